"""The realtime speech WebSockets: ``WS /v1/realtime?model=...`` and its Fabric-named twin
``WS /v1/fabric/chains/speech?stt_model=...`` (one handler; the contract is
:mod:`skulk_daemon.speech.realtime_session`).

Authority is the audio transcription routes' (open; API keys from other machines when
configured). A browser must connect same-origin: the guard refuses the handshake of a
cross-site ``Origin`` (SDK clients send none). OpenAPI does not describe WebSockets;
``docs/architecture.md`` and the spec's manual section are the contract.
"""

from __future__ import annotations

from litestar import websocket
from litestar.exceptions import WebSocketDisconnect

from skulk_core.audio.realtime_events import CLOSE_TRY_AGAIN
from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpSocket
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.capabilities.service import CapabilityService
from skulk_daemon.chat.service import ChatService
from skulk_daemon.node.node import Node
from skulk_daemon.speech.realtime_responder import ChatResponder
from skulk_daemon.speech.realtime_session import RealtimeSession
from skulk_daemon.speech.realtime_sources import MAX_SESSIONS_PER_SOURCE, SessionSources
from skulk_daemon.speech.realtime_wire import Responder
from skulk_daemon.system.http_server import source_of

_sources = SessionSources()
"""This process's realtime sessions per source address (one app per process)."""


class _Socket:
    """Litestar's WebSocket as a :class:`~skulk_daemon.speech.realtime_session.Connection`."""

    def __init__(self, socket: HttpSocket) -> None:
        self._socket = socket

    async def receive(self) -> str | bytes | None:
        try:
            message = await self._socket.receive()
        except WebSocketDisconnect:
            return None
        if message["type"] != "websocket.receive":
            return None
        text = message.get("text")
        if text is not None:
            return str(text)
        data = message.get("bytes")
        return bytes(data) if data is not None else ""

    async def send(self, text: str) -> None:
        await self._socket.send_text(text)

    async def close(self, code: int, reason: str) -> None:
        await self._socket.close(code=code, reason=reason)


async def _serve(
    socket: HttpSocket,
    model: str | None,
    node: Node,
    capabilities: CapabilityService | None,
    responder: Responder,
) -> None:
    client = socket.scope.get("client")
    source = source_of((str(client[0]), int(client[1])) if client else None)
    await socket.accept()
    if not _sources.acquire(source):
        await socket.close(
            code=CLOSE_TRY_AGAIN,
            reason=f"at most {MAX_SESSIONS_PER_SOURCE} realtime sessions per address",
        )
        return
    try:
        session = RealtimeSession(
            _Socket(socket),
            model=model or "",
            node=node,
            capabilities=capabilities,
            responder=responder,
        )
        await session.run()
    finally:
        _sources.release(source)


@websocket("/v1/realtime", opt=declare(Requirement.OPEN))
async def realtime_socket(
    socket: HttpSocket,
    *,
    node: Node,
    capabilities: CapabilityService | None,
    chat: ChatService,
    model: str | None = None,
) -> None:
    """Realtime transcription (OpenAI Realtime transcription subset)."""
    await _serve(socket, model, node, capabilities, ChatResponder(node, chat, capabilities))


@websocket("/v1/fabric/chains/speech", opt=declare(Requirement.OPEN))
async def speech_chain_socket(
    socket: HttpSocket,
    *,
    node: Node,
    capabilities: CapabilityService | None,
    chat: ChatService,
    stt_model: str | None = None,
) -> None:
    """The Fabric speech chain: the same contract, named by its Fabric role."""
    await _serve(socket, stt_model, node, capabilities, ChatResponder(node, chat, capabilities))


REALTIME_HANDLERS = [realtime_socket, speech_chain_socket]
