"""A realtime session's utterances: one bounded provider call each.

:class:`Utterances` opens an utterance's ``stt.realtime`` call on the node that serves
the model, forwards its PCM as it arrives, commits it (half-closing the call), and
turns the provider's frames into transcript events. Deltas that arrive before the
commit is announced are held (bounded) and sent right after it; a completed (or
failed) utterance rotates ``item_id`` and links the next through
``previous_item_id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Final

from skulk_core.audio.realtime_events import (
    CLOSE_INTERNAL,
    CLOSE_TRY_AGAIN,
    INPUT_SAMPLE_RATE,
    MAX_TRANSCRIPT_BYTES,
    Committed,
    TranscriptCompleted,
    TranscriptDelta,
    TranscriptFailed,
)
from skulk_core.extensions.capabilities import (
    MAX_TIMEOUT_SECONDS,
    CapabilityError,
    CapabilityStreamFrame,
    InlineMediaAttachment,
    descriptor_revision,
)
from skulk_core.ids import NodeId
from skulk_daemon.capabilities.service import CapabilityService
from skulk_daemon.speech.realtime_output import SessionClose, SessionOutput, new_id
from skulk_daemon.speech.realtime_provider import REALTIME_DESCRIPTOR
from skulk_daemon.speech.realtime_wire import Turn, close_code, failure_body

log = logging.getLogger(__name__)

PROVIDER_ID: Final = "stt.realtime"
PROVIDER_VERSION: Final = "1.0.0"
CODEC: Final = "pcm_s16le"


class Utterances:
    """The session's current utterance (at most one) and the item ids that link them."""

    def __init__(
        self,
        output: SessionOutput,
        capabilities: CapabilityService | None,
        *,
        target: Callable[[], NodeId | None],
        model: Callable[[], str],
        ended: Callable[[], None],
        transcribed: Callable[[str], None],
    ) -> None:
        self._out = output
        self._capabilities = capabilities
        self._target = target
        self._model = model
        self._ended = ended
        self._transcribed = transcribed
        self.turn: Turn | None = None
        self._item_id = new_id("item")
        self._previous_item_id: str | None = None
        self._auto_committed = False

    # -- input ------------------------------------------------------------------------

    async def open(self) -> Turn:
        capabilities = self._capabilities
        target = self._target()
        if capabilities is None or target is None:
            raise SessionClose(CLOSE_TRY_AGAIN, "no ready realtime transcription capacity")
        self._auto_committed = False
        # Same-node input short-circuits in process; a peer's runner is reached over
        # the fabric's capability stream (bounded frames, the PCM as raw media).
        stream = await capabilities.stream(
            target,
            PROVIDER_ID,
            PROVIDER_VERSION,
            descriptor_revision(REALTIME_DESCRIPTOR),
            {"model": self._model(), "sample_rate": INPUT_SAMPLE_RATE},
            timeout=MAX_TIMEOUT_SECONDS,
        )
        if not stream.open_result.ok:
            error = stream.open_result.error or CapabilityError(
                code="provider_error", message="the provider refused the call"
            )
            await self._out.emit(
                TranscriptFailed(
                    event_id=new_id("event"), item_id=self._item_id, error=failure_body(error)
                )
            )
            raise SessionClose(close_code(error), error.message)
        turn = Turn(item_id=self._item_id, stream=stream)
        self.turn = turn
        turn.reader = asyncio.create_task(self._read(turn))
        return turn

    async def forward(self, turn: Turn, pcm: bytes) -> None:
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

    async def commit(self, *, by_vad: bool, event_id: str | None) -> None:
        turn = self.turn
        if turn is None:
            if self._auto_committed and not by_vad:
                return  # server VAD already committed (and finished) this utterance
            await self._out.error(
                "input_audio_buffer_commit_empty",
                "there is no audio to commit",
                event_id=event_id,
            )
            return
        if turn.committed:
            if turn.by_vad and not by_vad:
                return  # a manual commit racing server VAD's: an idempotent no-op
            await self._out.error(
                "input_audio_buffer_commit_duplicate",
                "this utterance is already committed",
                event_id=event_id,
            )
            return
        if turn.sent_bytes == 0:
            await self._out.error(
                "input_audio_buffer_commit_empty", "there is no audio to commit", event_id=event_id
            )
            return
        turn.committed = True
        turn.by_vad = by_vad
        self._auto_committed = by_vad
        if turn.stream.input is not None:
            await turn.stream.input.complete()
        await self._out.emit(
            Committed(
                event_id=new_id("event"),
                previous_item_id=self._previous_item_id,
                item_id=turn.item_id,
            )
        )
        pending, turn.pending = turn.pending, []
        for text in pending:
            await self._out.emit(
                TranscriptDelta(event_id=new_id("event"), item_id=turn.item_id, delta=text)
            )
        turn.announced.set()

    # -- output -----------------------------------------------------------------------

    async def _read(self, turn: Turn) -> None:
        try:
            await self._read_frames(turn)
        except SessionClose as close:
            await self._out.close(close.code, close.reason)
        except Exception:
            log.exception("the realtime turn reader failed")
            await self._out.close(CLOSE_INTERNAL, "the realtime edge failed")

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
        self._end(turn)
        if terminal is not None and terminal.kind == "completed":
            transcript = str((terminal.payload or {}).get("text", ""))
            if len(transcript.encode()) > MAX_TRANSCRIPT_BYTES:
                await self._overflow(turn)
            await self._out.emit(
                TranscriptCompleted(
                    event_id=new_id("event"), item_id=turn.item_id, transcript=transcript
                )
            )
            self._transcribed(transcript)
            return
        error = (
            terminal.error
            if terminal is not None and terminal.error is not None
            else CapabilityError(code="provider_error", message="the provider call ended early")
        )
        await self._out.emit(
            TranscriptFailed(
                event_id=new_id("event"), item_id=turn.item_id, error=failure_body(error)
            )
        )
        if error.code != "cancelled":
            raise SessionClose(close_code(error), error.message)

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
        await self._out.emit(
            TranscriptDelta(event_id=new_id("event"), item_id=turn.item_id, delta=text)
        )

    async def _overflow(self, turn: Turn) -> None:
        self._end(turn)
        if turn.stream.input is not None:
            await turn.stream.input.cancel("the transcript exceeded its bound")
        error = CapabilityError(
            code="payload_too_large", message=f"the transcript exceeds {MAX_TRANSCRIPT_BYTES} bytes"
        )
        await self._out.emit(
            TranscriptFailed(
                event_id=new_id("event"), item_id=turn.item_id, error=failure_body(error)
            )
        )
        raise SessionClose(CLOSE_INTERNAL, error.message)

    def _end(self, turn: Turn) -> None:
        """The turn is over: rotate the item, reset VAD, release the call."""
        if turn.done:
            return
        turn.done = True
        if self.turn is turn:
            self.turn = None
            self._previous_item_id = turn.item_id
            self._item_id = new_id("item")
            self._ended()

    async def teardown(self) -> None:
        """The client is gone: cancel the open call in both directions."""
        turn, self.turn = self.turn, None
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
