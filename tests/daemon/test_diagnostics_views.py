"""Diagnostics' pure views: a member's answer to a sweep decoded into its wire type (or
the reason it cannot be), and the envelope a generation counts in when nothing is known
of the hardware or the model."""

from __future__ import annotations

from skulk_core.diagnostics.answers import NodeEnvelopes
from skulk_core.diagnostics.envelopes import EnvelopeKey
from skulk_core.ids import ModelId, NodeId
from skulk_daemon.diagnostics.performance import envelope_key
from skulk_daemon.diagnostics.views import decoded
from skulk_daemon.node.fanout import PeerAnswer

PEER = NodeId("peer")


def test_a_peer_that_answered_is_decoded_into_the_wire_type() -> None:
    body = {"nodeId": "peer", "envelopes": []}
    answer = PeerAnswer(node_id=PEER, status=200, body=body, url="http://peer:52415")
    got = decoded(answer, NodeEnvelopes)
    assert isinstance(got, NodeEnvelopes)
    assert got.node_id == "peer"


def test_a_peer_that_refused_says_why() -> None:
    body = {"error": {"message": "no such route"}}
    answer = PeerAnswer(node_id=PEER, status=404, body=body, url="http://peer:52415")
    assert decoded(answer, NodeEnvelopes) == "HTTP 404: no such route"
    gone = PeerAnswer(node_id=PEER, status=None, body=None, url=None, error="refused")
    assert decoded(gone, NodeEnvelopes) == "refused"


def test_a_malformed_answer_says_what_is_malformed() -> None:
    answer = PeerAnswer(node_id=PEER, status=200, body={"nodeId": 7}, url="http://peer:52415")
    got = decoded(answer, NodeEnvelopes)
    assert isinstance(got, str)
    assert got.startswith("a malformed answer")


def test_an_unknown_node_and_model_count_as_unknown_on_cpu() -> None:
    model = ModelId("m")
    assert envelope_key(model, None, None) == EnvelopeKey(
        "unknown", model, "llama.cpp/cpu", "unknown"
    )
