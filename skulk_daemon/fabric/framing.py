"""The fabric's frames: what this node stamps on each message it sends (origin,
sequence, session, reply port), and which received frames are used at all (a foreign
protocol version, a malformed body, a frame claiming to come from this node, or a
body on the wrong plane is dropped, by reason)."""

from __future__ import annotations

from collections.abc import Callable

from skulk_core.cluster.election import Session
from skulk_core.cluster.fabric import (
    PLANE_OF,
    PROTOCOL_VERSION,
    Body,
    FrameError,
    Header,
    decode_body,
    decode_header,
    encode,
)
from skulk_core.ids import NodeId
from skulk_daemon.fabric.peers import PeerBook
from skulk_daemon.fabric.transport import FabricTransport


def checked(frames: list[bytes], own_id: NodeId) -> tuple[Header, Body] | str:
    """A received message's header and body, or the reason it is dropped."""
    try:
        header = decode_header(frames)
    except FrameError as exc:
        return exc.reason
    if header.origin == own_id:
        return "own_origin"
    try:
        body = decode_body(frames)
    except FrameError as exc:
        return exc.reason
    if PLANE_OF[type(body)] != header.plane:
        return "wrong_plane"
    return header, body


class Outbox:
    """Sends this node's messages: to one member by node id, or to every address
    dialed."""

    def __init__(
        self,
        own_id: NodeId,
        peers: PeerBook,
        transport: FabricTransport,
        session: Callable[[], Session | None],
    ) -> None:
        self._own_id = own_id
        self._peers = peers
        self._transport = transport
        self._session = session
        self._seq = 0

    def frames(self, body: Body) -> list[bytes]:
        self._seq += 1
        header = Header(
            version=PROTOCOL_VERSION,
            plane=PLANE_OF[type(body)],
            origin=self._own_id,
            seq=self._seq,
            session=self._session(),
            reply_port=self._transport.port,
        )
        return encode(header, body)

    def send(self, node_id: NodeId, body: Body) -> bool:
        address = self._peers.address_of(node_id)
        if address is None:
            return False
        return self._transport.send(address, self.frames(body))

    def broadcast(self, body: Body) -> None:
        frames = self.frames(body)
        for address in sorted(self._peers.dial):
            self._transport.send(address, frames)
