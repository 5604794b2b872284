"""Which received frames the fabric uses: its own, on the right plane, well formed."""

from __future__ import annotations

from skulk_core.cluster.fabric import (
    PLANE_OF,
    PROTOCOL_VERSION,
    CancelTask,
    Header,
    Plane,
    SyncRequest,
    encode,
)
from skulk_core.ids import CommandId, NodeId
from skulk_daemon.fabric.framing import checked

ME, PEER = NodeId("me"), NodeId("peer")
BODY = SyncRequest(last_idx=3, last_term=1, last_master=None)


def _header(origin: NodeId, plane: Plane) -> Header:
    return Header(
        version=PROTOCOL_VERSION, plane=plane, origin=origin, seq=1, session=None, reply_port=1
    )


def test_a_peers_frame_is_used() -> None:
    frames = encode(_header(PEER, PLANE_OF[SyncRequest]), BODY)
    assert checked(frames, ME) == (_header(PEER, PLANE_OF[SyncRequest]), BODY)


def test_a_frame_claiming_this_node_is_dropped() -> None:
    assert checked(encode(_header(ME, PLANE_OF[SyncRequest]), BODY), ME) == "own_origin"


def test_a_body_on_another_plane_is_dropped() -> None:
    other = next(p for p in set(PLANE_OF.values()) if p != PLANE_OF[SyncRequest])
    assert checked(encode(_header(PEER, other), BODY), ME) == "wrong_plane"
    cancel = CancelTask(command_id=CommandId("c"))
    assert checked(encode(_header(PEER, PLANE_OF[CancelTask]), cancel), ME) != "wrong_plane"


def test_garbage_is_dropped_with_a_reason() -> None:
    reason = checked([b"not", b"frames"], ME)
    assert isinstance(reason, str)
