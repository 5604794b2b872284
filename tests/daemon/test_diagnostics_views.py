"""Diagnostics' pure views: a member's entry in a cluster sweep, and the envelope a
generation counts in when nothing is known of the hardware or the model."""

from __future__ import annotations

from skulk_core.diagnostics.envelopes import EnvelopeKey
from skulk_core.ids import ModelId, NodeId
from skulk_core.version import SKULK_VERSION
from skulk_daemon.diagnostics.fanout import PeerAnswer
from skulk_daemon.diagnostics.performance import envelope_key
from skulk_daemon.diagnostics.views import member_entry

PEER = NodeId("peer")


def test_this_nodes_own_bundle_is_its_entry() -> None:
    bundle = {"nodeId": "me"}
    assert member_entry(NodeId("me"), bundle, None) == {
        "nodeId": "me",
        "ok": True,
        "skulkVersion": SKULK_VERSION,
        "bundle": bundle,
    }


def test_a_peer_that_answered_is_there_with_its_version() -> None:
    body = {"skulkVersion": "9.9"}
    answer = PeerAnswer(node_id=PEER, status=200, body=body, url="http://peer:52415")
    assert member_entry(PEER, answer, "1.0") == {
        "nodeId": "peer",
        "ok": True,
        "url": "http://peer:52415",
        "skulkVersion": "9.9",
        "bundle": body,
    }


def test_a_peer_that_refused_says_why_and_what_its_telemetry_said() -> None:
    body = {"error": {"message": "no such route"}}
    answer = PeerAnswer(node_id=PEER, status=404, body=body, url="http://peer:52415")
    assert member_entry(PEER, answer, "1.0") == {
        "nodeId": "peer",
        "ok": False,
        "skulkVersion": "1.0",
        "error": "HTTP 404: no such route",
    }
    gone = PeerAnswer(node_id=PEER, status=None, body=None, url=None, error="refused")
    assert member_entry(PEER, gone, None)["error"] == "refused"


def test_an_unknown_node_and_model_count_as_unknown_on_cpu() -> None:
    model = ModelId("m")
    assert envelope_key(model, None, None) == EnvelopeKey(
        "unknown", model, "llama.cpp/cpu", "unknown"
    )
