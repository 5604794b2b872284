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
import logging
import secrets
from typing import Final

from skulk_core.audio.realtime_config import (
    ConfigRefusal,
    SessionConfig,
    apply_beta_update,
    apply_update,
)
from skulk_core.audio.realtime_events import (
    CLOSE_INTERNAL,
    CLOSE_POLICY,
    CLOSE_TOO_BIG,
    CLOSE_TRY_AGAIN,
    CLOSE_UNSUPPORTED_DATA,
    INPUT_SAMPLE_RATE,
    MAX_AUDIO_FRAME_BYTES,
    MAX_EVENT_BYTES,
    MAX_SESSION_AUDIO_BYTES,
    MAX_TRANSCRIPT_BYTES,
    AppendAudio,
    CancelResponse,
    ClearAudio,
    ClientEvent,
    CommitAudio,
    Committed,
    ErrorBody,
    ErrorEvent,
    InvalidEvent,
    ServerEvent,
    SessionCreated,
    SessionUpdate,
    SessionUpdated,
    SpeechStartedEvent,
    SpeechStoppedEvent,
    TranscriptCompleted,
    TranscriptDelta,
    TranscriptFailed,
    TranscriptionSessionUpdate,
    TranscriptionSessionUpdated,
    decode_client_event,
    encode_server_event,
)
from skulk_core.audio.realtime_turns import TurnStarted, TurnStopped
from skulk_core.extensions.capabilities import (
    MAX_TIMEOUT_SECONDS,
    CapabilityError,
    CapabilityStreamFrame,
    InlineMediaAttachment,
    descriptor_revision,
)
from skulk_core.ids import NodeId
from skulk_daemon.capabilities.service import CapabilityService
from skulk_daemon.node.node import Node
from skulk_daemon.speech.realtime_provider import REALTIME_DESCRIPTOR
from skulk_daemon.speech.realtime_route import pick_node
from skulk_daemon.speech.realtime_vad import HELD_FLUSH_BYTES, HeldSlices, ServerVadGate
from skulk_daemon.speech.realtime_wire import (
    Connection,
    Responder,
    Turn,
    beta_view,
    close_code,
    close_name,
    failure_body,
    model_refusal,
    session_view,
)

log = logging.getLogger(__name__)

PROVIDER_ID: Final = "stt.realtime"
PROVIDER_VERSION: Final = "1.0.0"
CODEC: Final = "pcm_s16le"


class _Close(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


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
    ) -> None:
        self._conn = connection
        self._node = node
        self._capabilities = capabilities
        self._responder = responder
        self._config = SessionConfig(model=model)
        self._session_id = _id("sess")
        self._item_id = _id("item")
        self._previous_item_id: str | None = None
        self._turn: Turn | None = None
        self._gate: ServerVadGate | None = None
        self._auto_committed = False
        self._audio_bytes = 0
        self._send_lock = asyncio.Lock()
        self._closed = False
        self._response: asyncio.Task[None] | None = None
        self._main: asyncio.Task[None] | None = None

    # -- the loop ---------------------------------------------------------------------

    async def run(self) -> None:
        self._main = asyncio.current_task()
        try:
            self._admit()
            view = session_view(self._session_id, self._config)
            await self._emit(SessionCreated(event_id=_id("event"), session=view))
            while not self._closed:
                message = await self._conn.receive()
                if message is None:
                    break
                await self._handle(message)
        except _Close as close:
            await self._close(close.code, close.reason)
        except asyncio.CancelledError:
            # A turn's reader closed the socket: this loop's wait for the client ends.
            if not self._closed or self._main is None:
                raise
            self._main.uncancel()
        finally:
            await self._teardown()

    def _admit(self) -> None:
        refusal = model_refusal(self._node.catalog(), self._config.model)
        if refusal is not None:
            raise _Close(CLOSE_POLICY, refusal)
        if self._target() is None:
            raise _Close(
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
            raise _Close(CLOSE_UNSUPPORTED_DATA, "send JSON text messages; binary is not accepted")
        if len(message) > MAX_EVENT_BYTES // 4 and len(message.encode()) > MAX_EVENT_BYTES:
            raise _Close(CLOSE_TOO_BIG, f"a client event is at most {MAX_EVENT_BYTES} bytes")
        try:
            event = decode_client_event(message)
        except InvalidEvent as exc:
            await self._error("invalid_event", str(exc))
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
                await self._commit(by_vad=False, event_id=event_id)
            case ClearAudio(event_id=event_id):
                await self._error(
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
            await self._error(outcome.code, outcome.message, param=outcome.param, event_id=event_id)
            return
        if self._turn is not None and outcome.turn_detection != self._config.turn_detection:
            await self._error(
                "turn_in_progress",
                "turn_detection cannot change while an utterance is in progress",
                event_id=event_id,
            )
            return
        if outcome.response is not None:
            refusal = (
                ConfigRefusal(
                    "unsupported_field",
                    "this node has no response participant",
                    "session.response",
                )
                if self._responder is None
                else self._responder.refuse(outcome)
            )
            if refusal is not None:
                await self._error(
                    refusal.code, refusal.message, param=refusal.param, event_id=event_id
                )
                return
        if outcome.turn_detection != self._config.turn_detection:
            self._gate = (
                None if outcome.turn_detection is None else ServerVadGate(outcome.turn_detection)
            )
        self._config = outcome
        if beta:
            await self._emit(
                TranscriptionSessionUpdated(
                    event_id=_id("event"), session=beta_view(self._session_id, self._config)
                )
            )
        else:
            await self._emit(
                SessionUpdated(
                    event_id=_id("event"), session=session_view(self._session_id, self._config)
                )
            )

    # -- audio ------------------------------------------------------------------------

    async def _append(self, audio: str, event_id: str | None) -> None:
        try:
            pcm = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            await self._error("invalid_audio", "audio must be base64", event_id=event_id)
            return
        if len(pcm) > MAX_AUDIO_FRAME_BYTES:
            raise _Close(
                CLOSE_TOO_BIG, f"one append carries at most {MAX_AUDIO_FRAME_BYTES} bytes of audio"
            )
        if len(pcm) % 2:
            await self._error(
                "invalid_audio", "audio must be whole 16-bit samples", event_id=event_id
            )
            return
        self._audio_bytes += len(pcm)
        if self._audio_bytes > MAX_SESSION_AUDIO_BYTES:
            raise _Close(CLOSE_POLICY, "the session's audio exceeds 64 MiB")
        if not pcm:
            return
        if self._gate is None:
            await self._append_manual(pcm, event_id)
        else:
            await self._append_vad(self._gate, pcm, event_id)

    async def _busy(self, event_id: str | None) -> None:
        await self._error(
            "turn_in_progress",
            "the committed utterance is still being transcribed; this audio was dropped. "
            "Send the next turn after its completed event",
            event_id=event_id,
        )

    async def _append_manual(self, pcm: bytes, event_id: str | None) -> None:
        turn = self._turn
        if turn is not None and turn.committed:
            await self._busy(event_id)
            return
        if turn is None:
            await self._cancel_response()
            turn = await self._open_turn()
        await self._forward(turn, pcm)

    async def _append_vad(self, gate: ServerVadGate, pcm: bytes, event_id: str | None) -> None:
        warned = False
        held = HeldSlices()  # one frame per append and turn, cut at the boundary
        for piece in gate.slices(pcm):
            turn = self._turn
            if held.turn is not turn or len(held.pcm) >= HELD_FLUSH_BYTES:
                await held.flush(self._forward, turn)
            if turn is not None and turn.committed:
                if not warned:
                    await self._busy(event_id)
                    warned = True
                continue
            if turn is None:
                gate.remember(piece)
                if isinstance(piece.event, TurnStarted):
                    await self._cancel_response()
                    turn = await self._open_turn()
                    await self._emit(
                        SpeechStartedEvent(
                            event_id=_id("event"),
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
                await held.flush(self._forward, None)
                await self._emit(
                    SpeechStoppedEvent(
                        event_id=_id("event"),
                        audio_end_ms=piece.event.end_ms,
                        item_id=turn.item_id,
                    )
                )
                await self._commit(by_vad=True, event_id=None)
        await held.flush(self._forward, None)

    async def _forward(self, turn: Turn, pcm: bytes) -> None:
        sink = turn.stream.input
        if sink is None or turn.done:
            return
        turn.sent_bytes += len(pcm)
        await sink.send_chunk(
            {"format": CODEC, "sample_rate": INPUT_SAMPLE_RATE, "channels": 1},
            InlineMediaAttachment(
                data=pcm,
                media_type="audio/pcm",
                codec=CODEC,
                sample_rate=INPUT_SAMPLE_RATE,
                channels=1,
            ),
        )

    async def _commit(self, *, by_vad: bool, event_id: str | None) -> None:
        turn = self._turn
        if turn is None:
            if self._auto_committed and not by_vad:
                return  # server VAD already committed (and finished) this utterance
            await self._error(
                "input_audio_buffer_commit_empty",
                "there is no audio to commit",
                event_id=event_id,
            )
            return
        if turn.committed:
            if turn.by_vad and not by_vad:
                return  # a manual commit racing server VAD's: an idempotent no-op
            await self._error(
                "input_audio_buffer_commit_duplicate",
                "this utterance is already committed",
                event_id=event_id,
            )
            return
        if turn.sent_bytes == 0:
            await self._error(
                "input_audio_buffer_commit_empty", "there is no audio to commit", event_id=event_id
            )
            return
        turn.committed = True
        turn.by_vad = by_vad
        self._auto_committed = by_vad
        if turn.stream.input is not None:
            await turn.stream.input.complete()
        await self._emit(
            Committed(
                event_id=_id("event"),
                previous_item_id=self._previous_item_id,
                item_id=turn.item_id,
            )
        )
        pending, turn.pending = turn.pending, []
        for text in pending:
            await self._emit(
                TranscriptDelta(event_id=_id("event"), item_id=turn.item_id, delta=text)
            )
        turn.announced.set()

    # -- the provider call ------------------------------------------------------------

    async def _open_turn(self) -> Turn:
        capabilities = self._capabilities
        target = self._target()
        if capabilities is None or target is None:
            raise _Close(CLOSE_TRY_AGAIN, "no ready realtime transcription capacity")
        self._auto_committed = False
        # Same-node input short-circuits in process; a peer's runner is reached over
        # the fabric's capability stream (bounded frames, the PCM as raw media).
        stream = await capabilities.stream(
            target,
            PROVIDER_ID,
            PROVIDER_VERSION,
            descriptor_revision(REALTIME_DESCRIPTOR),
            {"model": self._config.model, "sample_rate": INPUT_SAMPLE_RATE},
            timeout=MAX_TIMEOUT_SECONDS,
        )
        if not stream.open_result.ok:
            error = stream.open_result.error or CapabilityError(
                code="provider_error", message="the provider refused the call"
            )
            await self._emit(
                TranscriptFailed(
                    event_id=_id("event"), item_id=self._item_id, error=failure_body(error)
                )
            )
            raise _Close(close_code(error), error.message)
        turn = Turn(item_id=self._item_id, stream=stream)
        self._turn = turn
        turn.reader = asyncio.create_task(self._read(turn))
        return turn

    async def _read(self, turn: Turn) -> None:
        try:
            await self._read_frames(turn)
        except _Close as close:
            await self._close(close.code, close.reason)
        except Exception:
            log.exception("the realtime turn reader failed")
            await self._close(CLOSE_INTERNAL, "the realtime edge failed")

    async def _read_frames(self, turn: Turn) -> None:
        terminal: CapabilityStreamFrame | None = None
        async for frame in turn.stream.frames:
            if frame.kind == "started":
                continue
            if frame.kind == "chunk":
                text = str((frame.payload or {}).get("text", ""))
                await self._delta(turn, text)
                continue
            terminal = frame
            break
        if terminal is not None and terminal.kind == "completed":
            # NOTE: the terminal follows the half-close; ``committed`` goes out first.
            await turn.announced.wait()
        self._end_turn(turn)
        if terminal is not None and terminal.kind == "completed":
            transcript = str((terminal.payload or {}).get("text", ""))
            if len(transcript.encode()) > MAX_TRANSCRIPT_BYTES:
                await self._overflow(turn)
            await self._emit(
                TranscriptCompleted(
                    event_id=_id("event"), item_id=turn.item_id, transcript=transcript
                )
            )
            self._start_response(transcript)
            return
        error = (
            terminal.error
            if terminal is not None and terminal.error is not None
            else CapabilityError(code="provider_error", message="the provider call ended early")
        )
        await self._emit(
            TranscriptFailed(event_id=_id("event"), item_id=turn.item_id, error=failure_body(error))
        )
        if error.code != "cancelled":
            raise _Close(close_code(error), error.message)

    async def _delta(self, turn: Turn, text: str) -> None:
        size = len(text.encode())
        if not turn.announced.is_set():
            turn.pending_bytes += size
            if turn.pending_bytes > MAX_TRANSCRIPT_BYTES:
                await self._overflow(turn)
            turn.pending.append(text)
            return
        if size > MAX_TRANSCRIPT_BYTES:
            await self._overflow(turn)
        await self._emit(TranscriptDelta(event_id=_id("event"), item_id=turn.item_id, delta=text))

    async def _overflow(self, turn: Turn) -> None:
        self._end_turn(turn)
        if turn.stream.input is not None:
            await turn.stream.input.cancel("the transcript exceeded its bound")
        error = CapabilityError(
            code="payload_too_large", message=f"the transcript exceeds {MAX_TRANSCRIPT_BYTES} bytes"
        )
        await self._emit(
            TranscriptFailed(event_id=_id("event"), item_id=turn.item_id, error=failure_body(error))
        )
        raise _Close(CLOSE_INTERNAL, error.message)

    def _end_turn(self, turn: Turn) -> None:
        """The turn is over: rotate the item, reset VAD, release the call."""
        if turn.done:
            return
        turn.done = True
        if self._turn is turn:
            self._turn = None
            self._previous_item_id = turn.item_id
            self._item_id = _id("item")
            if self._gate is not None:
                self._gate.reset()

    # -- the response participant -----------------------------------------------------

    def _start_response(self, transcript: str) -> None:
        if self._responder is None or self._config.response is None or not transcript.strip():
            return
        self._response = asyncio.create_task(
            self._responder.respond(self._config, transcript, self._emit)
        )

    async def _cancel_response(self) -> None:
        task, self._response = self._response, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- output -----------------------------------------------------------------------

    async def _emit(self, event: ServerEvent) -> None:
        if self._closed:
            return
        text = encode_server_event(event)
        async with self._send_lock:
            try:
                await self._conn.send(text)
            except Exception:
                self._closed = True

    async def _error(
        self, code: str, message: str, *, param: str | None = None, event_id: str | None = None
    ) -> None:
        await self._emit(
            ErrorEvent(
                event_id=_id("event"),
                error=ErrorBody(
                    type="invalid_request_error",
                    code=code,
                    message=message,
                    param=param,
                    event_id=event_id,
                ),
            )
        )

    async def _close(self, code: int, reason: str) -> None:
        if self._closed:
            return
        if code != CLOSE_INTERNAL:
            await self._error(close_name(code), reason)
        self._closed = True
        with contextlib.suppress(Exception):
            await self._conn.close(code, reason[:120])
        if self._main is not None and self._main is not asyncio.current_task():
            self._main.cancel()

    async def _teardown(self) -> None:
        await self._cancel_response()
        turn, self._turn = self._turn, None
        if turn is None:
            return
        turn.done = True
        if turn.stream.input is not None:
            with contextlib.suppress(Exception):
                await turn.stream.input.cancel("the client disconnected")
        if turn.reader is not None and turn.reader is not asyncio.current_task():
            turn.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await turn.reader
        frames = turn.stream.frames
        aclose = getattr(frames, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
