"""One realtime transcription WebSocket session: the event contract over ``stt.realtime``.

The edge owns no model, runner or second speech path: each utterance opens one bounded
``stt.realtime@1.0.0`` provider call through the node's capability service (the same
truthful-card, readiness and capacity gates as any caller) on the node that serves the
model (this one when it can, else a reachable peer:
:mod:`skulk_daemon.speech.realtime_route`), forwards each append's
decoded PCM as binary Fabric media as it arrives, half-closes the call on commit, and
turns the provider's frames into transcript events.

Turns are serialized: audio appended while a committed turn still drains gets a
non-terminal ``turn_in_progress`` error (and is dropped); a completed (or failed) turn
rotates ``item_id``, links the next commit through ``previous_item_id``, resets server
VAD and releases its provider call. Provider deltas that arrive before the commit are
held (at most 1 MiB) and sent right after ``input_audio_buffer.committed``.

Close codes and bounds are :mod:`skulk_core.audio.realtime_events`'. Disconnecting
cancels the provider call in both directions.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from typing import Final, NamedTuple

from skulk_core.audio.realtime_config import (
    ConfigRefusal,
    SessionConfig,
    apply_beta_update,
    apply_update,
)
from skulk_core.audio.realtime_events import (
    CLOSE_NORMAL,
    CLOSE_POLICY,
    CLOSE_TOO_BIG,
    CLOSE_TRY_AGAIN,
    CLOSE_UNSUPPORTED_DATA,
    MAX_AUDIO_FRAME_BYTES,
    MAX_EVENT_BYTES,
    MAX_SESSION_AUDIO_BYTES,
    AppendAudio,
    CancelResponse,
    ClearAudio,
    ClientEvent,
    CommitAudio,
    InvalidEvent,
    SessionCreated,
    SessionUpdate,
    SessionUpdated,
    SpeechStartedEvent,
    SpeechStoppedEvent,
    TranscriptionSessionUpdate,
    TranscriptionSessionUpdated,
    decode_client_event,
)
from skulk_core.audio.realtime_turns import TurnStarted, TurnStopped
from skulk_core.ids import NodeId
from skulk_daemon.capabilities.service import CapabilityService
from skulk_daemon.node.node import Node
from skulk_daemon.speech.realtime_output import SessionClose, SessionOutput, new_id
from skulk_daemon.speech.realtime_route import pick_node
from skulk_daemon.speech.realtime_utterance import PROVIDER_ID, Utterances
from skulk_daemon.speech.realtime_vad import HELD_FLUSH_BYTES, HeldSlices, ServerVadGate
from skulk_daemon.speech.realtime_wire import (
    Connection,
    Responder,
    beta_view,
    model_refusal,
    session_view,
)


class UpdateRefusal(NamedTuple):
    """Why a session update is refused (an ``error`` event; the session is unchanged)."""

    code: str
    message: str
    param: str | None = None


def review_update(
    current: SessionConfig,
    proposed: SessionConfig,
    *,
    turn_open: bool,
    responder: Responder | None,
) -> UpdateRefusal | None:
    """Why ``proposed`` cannot replace ``current`` now, or None: turn detection stays
    while an utterance is open, and a response needs a participant that accepts it."""
    if turn_open and proposed.turn_detection != current.turn_detection:
        return UpdateRefusal(
            "turn_in_progress", "turn_detection cannot change while an utterance is in progress"
        )
    if proposed.response is None:
        return None
    refusal = (
        ConfigRefusal(
            "unsupported_field", "this node has no response participant", "session.response"
        )
        if responder is None
        else responder.refuse(proposed)
    )
    return None if refusal is None else UpdateRefusal(refusal.code, refusal.message, refusal.param)


IDLE_SESSION_SECONDS: Final = 600.0
"""How long a session may send nothing before it is closed: an open socket costs a
source's share (:mod:`.realtime_sources`) even between turns."""


class RealtimeSession:
    """One socket's session; :meth:`run` returns when the socket is closed."""

    def __init__(
        self,
        connection: Connection,
        *,
        model: str,
        node: Node,
        capabilities: CapabilityService | None,
        responder: Responder | None = None,
        idle_seconds: float = IDLE_SESSION_SECONDS,
    ) -> None:
        self._conn = connection
        self._idle_seconds = idle_seconds
        self._node = node
        self._capabilities = capabilities
        self._responder = responder
        self._config = SessionConfig(model=model)
        self._session_id = new_id("sess")
        self._gate: ServerVadGate | None = None
        self._audio_bytes = 0
        self._response: asyncio.Task[None] | None = None
        self._out = SessionOutput(connection)
        self._utterances = Utterances(
            self._out,
            capabilities,
            target=self._target,
            model=lambda: self._config.model,
            ended=self._utterance_ended,
            transcribed=self._start_response,
        )

    # -- the loop ---------------------------------------------------------------------

    async def run(self) -> None:
        out = self._out
        out.main = asyncio.current_task()
        try:
            self._admit()
            view = session_view(self._session_id, self._config)
            await out.emit(SessionCreated(event_id=new_id("event"), session=view))
            while not out.closed:
                message = await self._next_event()
                if message is None:
                    break
                await self._handle(message)
        except SessionClose as close:
            await out.close(close.code, close.reason)
        except asyncio.CancelledError:
            # A turn's reader closed the socket: this loop's wait for the client ends.
            if not out.closed or out.main is None:
                raise
            out.main.uncancel()
        finally:
            await self._cancel_response()
            await self._utterances.teardown()

    async def _next_event(self) -> str | bytes | None:
        """The client's next message; a session that sends nothing for
        ``idle_seconds`` is closed (its turn, if any, is paced on its own)."""
        try:
            async with asyncio.timeout(self._idle_seconds):
                return await self._conn.receive()
        except TimeoutError:
            raise SessionClose(
                CLOSE_NORMAL,
                f"no client event for {self._idle_seconds:g} s: the idle session is closed",
            ) from None

    def _admit(self) -> None:
        refusal = model_refusal(self._node.catalog(), self._config.model)
        if refusal is not None:
            raise SessionClose(CLOSE_POLICY, refusal)
        if self._target() is None:
            raise SessionClose(
                CLOSE_TRY_AGAIN,
                "no ready realtime transcription capacity in the cluster; retry once a "
                "runner of the model is ready",
            )

    def _target(self) -> NodeId | None:
        """The node whose runner serves the next utterance: this one when it can."""
        if self._capabilities is None:
            return None
        return pick_node(
            self._node, self._capabilities, self._config.model, PROVIDER_ID, single_host=True
        )

    async def _handle(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            raise SessionClose(
                CLOSE_UNSUPPORTED_DATA, "send JSON text messages; binary is not accepted"
            )
        if len(message) > MAX_EVENT_BYTES // 4 and len(message.encode()) > MAX_EVENT_BYTES:
            raise SessionClose(CLOSE_TOO_BIG, f"a client event is at most {MAX_EVENT_BYTES} bytes")
        try:
            event = decode_client_event(message)
        except InvalidEvent as exc:
            await self._out.error("invalid_event", str(exc))
            return
        await self._dispatch(event)

    async def _dispatch(self, event: ClientEvent) -> None:
        match event:
            case SessionUpdate(session=patch, event_id=event_id):
                await self._update(apply_update(self._config, patch), event_id, beta=False)
            case TranscriptionSessionUpdate(session=patch, event_id=event_id):
                await self._update(apply_beta_update(self._config, patch), event_id, beta=True)
            case AppendAudio(audio=audio, event_id=event_id):
                await self._append(audio, event_id)
            case CommitAudio(event_id=event_id):
                await self._utterances.commit(by_vad=False, event_id=event_id)
            case ClearAudio(event_id=event_id):
                await self._out.error(
                    "unsupported_event",
                    "input_audio_buffer.clear is not supported: audio is forwarded as it "
                    "arrives and cannot be retracted",
                    event_id=event_id,
                )
            case CancelResponse():
                await self._cancel_response()

    # -- configuration ----------------------------------------------------------------

    async def _update(
        self, outcome: SessionConfig | ConfigRefusal, event_id: str | None, *, beta: bool
    ) -> None:
        if isinstance(outcome, ConfigRefusal):
            await self._out.error(
                outcome.code, outcome.message, param=outcome.param, event_id=event_id
            )
            return
        turn_open = self._utterances.turn is not None
        refusal = review_update(
            self._config, outcome, turn_open=turn_open, responder=self._responder
        )
        if refusal is not None:
            await self._out.error(
                refusal.code, refusal.message, param=refusal.param, event_id=event_id
            )
            return
        if outcome.turn_detection != self._config.turn_detection:
            self._gate = (
                None if outcome.turn_detection is None else ServerVadGate(outcome.turn_detection)
            )
        self._config = outcome
        if beta:
            await self._out.emit(
                TranscriptionSessionUpdated(
                    event_id=new_id("event"), session=beta_view(self._session_id, self._config)
                )
            )
        else:
            await self._out.emit(
                SessionUpdated(
                    event_id=new_id("event"), session=session_view(self._session_id, self._config)
                )
            )

    # -- audio ------------------------------------------------------------------------

    async def _append(self, audio: str, event_id: str | None) -> None:
        try:
            pcm = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            await self._out.error("invalid_audio", "audio must be base64", event_id=event_id)
            return
        if len(pcm) > MAX_AUDIO_FRAME_BYTES:
            raise SessionClose(
                CLOSE_TOO_BIG, f"one append carries at most {MAX_AUDIO_FRAME_BYTES} bytes of audio"
            )
        if len(pcm) % 2:
            await self._out.error(
                "invalid_audio", "audio must be whole 16-bit samples", event_id=event_id
            )
            return
        self._audio_bytes += len(pcm)
        if self._audio_bytes > MAX_SESSION_AUDIO_BYTES:
            raise SessionClose(CLOSE_POLICY, "the session's audio exceeds 64 MiB")
        if not pcm:
            return
        if self._gate is None:
            await self._append_manual(pcm, event_id)
        else:
            await self._append_vad(self._gate, pcm, event_id)

    async def _busy(self, event_id: str | None) -> None:
        await self._out.error(
            "turn_in_progress",
            "the committed utterance is still being transcribed; this audio was dropped. "
            "Send the next turn after its completed event",
            event_id=event_id,
        )

    async def _append_manual(self, pcm: bytes, event_id: str | None) -> None:
        turn = self._utterances.turn
        if turn is not None and turn.committed:
            await self._busy(event_id)
            return
        if turn is None:
            await self._cancel_response()
            turn = await self._utterances.open()
        await self._utterances.forward(turn, pcm)

    async def _append_vad(self, gate: ServerVadGate, pcm: bytes, event_id: str | None) -> None:
        warned = False
        held = HeldSlices()  # one frame per append and turn, cut at the boundary
        for piece in gate.slices(pcm):
            turn = self._utterances.turn
            if held.turn is not turn or len(held.pcm) >= HELD_FLUSH_BYTES:
                await held.flush(self._utterances.forward, turn)
            if turn is not None and turn.committed:
                if not warned:
                    await self._busy(event_id)
                    warned = True
                continue
            if turn is None:
                gate.remember(piece)
                if isinstance(piece.event, TurnStarted):
                    await self._cancel_response()
                    turn = await self._utterances.open()
                    await self._out.emit(
                        SpeechStartedEvent(
                            event_id=new_id("event"),
                            audio_start_ms=piece.event.start_ms,
                            item_id=turn.item_id,
                        )
                    )
                    held.turn = turn
                    for earlier in gate.preroll(piece.event.start_ms):
                        held.pcm += earlier
                continue
            held.pcm += piece.pcm
            if isinstance(piece.event, TurnStopped):
                await held.flush(self._utterances.forward, None)
                await self._out.emit(
                    SpeechStoppedEvent(
                        event_id=new_id("event"),
                        audio_end_ms=piece.event.end_ms,
                        item_id=turn.item_id,
                    )
                )
                await self._utterances.commit(by_vad=True, event_id=None)
        await held.flush(self._utterances.forward, None)

    def _utterance_ended(self) -> None:
        if self._gate is not None:
            self._gate.reset()

    # -- the response participant -----------------------------------------------------

    def _start_response(self, transcript: str) -> None:
        if self._responder is None or self._config.response is None or not transcript.strip():
            return
        self._response = asyncio.create_task(
            self._responder.respond(self._config, transcript, self._out.emit)
        )

    async def _cancel_response(self) -> None:
        task, self._response = self._response, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
