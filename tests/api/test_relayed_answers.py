"""What another node or the store host answers is decoded into the same wire types the
answering route documents: a malformed answer is told as such, never passed on."""

from __future__ import annotations

import pytest

from skulk_core.diagnostics.answers import TimelineSource
from skulk_core.diagnostics.bundle import NodeBundle
from skulk_core.ids import NodeId
from skulk_core.store.answers import StoreDownload
from skulk_daemon.api.store import _answer
from skulk_daemon.diagnostics.views import decoded
from skulk_daemon.errors import ApiError
from skulk_daemon.node.fanout import PeerAnswer

PEER = NodeId("peer")


def _peer(status: int | None, body: object, error: str | None = None) -> PeerAnswer:
    return PeerAnswer(PEER, status, body, "http://peer:52415", error)


def test_a_malformed_peer_bundle_is_a_reason_not_an_entry() -> None:
    got = decoded(_peer(200, {"nodeId": "peer", "skulkVersion": "1"}), NodeBundle)
    assert isinstance(got, str) and got.startswith("a malformed answer:")
    assert "lastEventAppliedIdx" in got  # names what is missing


def test_a_refusing_or_silent_peer_says_why() -> None:
    refused = _peer(403, {"error": {"message": "not trusted"}})
    assert decoded(refused, NodeBundle) == "HTTP 403: not trusted"
    assert decoded(_peer(None, None, "no reachable API route"), NodeBundle) == (
        "no reachable API route"
    )


def test_the_timeline_takes_a_bundle_without_runner_blocks_as_empty() -> None:
    got = decoded(_peer(200, {"nodeId": "peer"}), TimelineSource)
    assert got == TimelineSource()


def test_a_malformed_store_answer_is_a_502_and_a_refusal_keeps_its_status() -> None:
    with pytest.raises(ApiError) as malformed:
        _answer(200, {"modelId": "m"}, StoreDownload)
    assert malformed.value.status_code == 502
    assert "malformed" in malformed.value.message
    with pytest.raises(ApiError) as refused:
        _answer(409, {"error": {"message": "no cancellable store download of m"}}, StoreDownload)
    assert refused.value.status_code == 409
    answer = {"modelId": "m", "sourceRevision": None, "status": "complete", "progress": 1.0}
    assert _answer(200, answer, StoreDownload).status == "complete"
