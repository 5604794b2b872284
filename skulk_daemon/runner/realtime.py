"""The runner's side of a ``TranscribeRealtime`` task: its audio inlet and its decode loop.

The runner's frame loop (stdin thread) puts each :class:`RealtimeAudio` packet into the
task's :class:`RealtimeInlets` queue as it arrives, even before the speech worker
reaches the task; the worker thread drains it into the model's streaming session
(:meth:`WhisperTranscriber.create_streaming_session`), sending each newly confirmed
piece of text as a ``SpeechPartial`` at once, and answers with the accumulated text
after the final packet. The inlet is bounded: a caller more than
:data:`MAX_PENDING_BYTES` ahead of the decoder fails its task rather than growing the
runner's memory. ``Cancel`` wakes a waiting task. Audio is never logged or kept.
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from skulk_core.audio.realtime_agreement import TimedWord, joined
from skulk_core.audio.realtime_resample import pcm16_to_float
from skulk_core.audio.subtitles import TranscriptSegment
from skulk_core.ids import TaskId
from skulk_daemon.runner.protocol import (
    RealtimeAudio,
    RunnerMessage,
    Transcribed,
    TranscribeRealtime,
)

if TYPE_CHECKING:
    from skulk_daemon.engines.whisper_stt import WhisperTranscriber

MAX_PENDING_BYTES: Final = 16 * 1024 * 1024
"""Audio queued ahead of the decoder (about 8.7 minutes at 16 kHz)."""
WAIT_SECONDS: Final = 0.5
"""How often a task waiting for audio looks at its cancellation flag."""
FORGOTTEN: Final = 256
"""Finished task ids remembered so a late packet does not open a new inlet."""


class RealtimeRefused(ValueError):
    """The task's input broke its bounds; the message is safe to show."""


class InletCancelled(Exception):
    pass


@dataclass(slots=True)
class _Inlet:
    packets: queue.SimpleQueue[bytes | None] = field(default_factory=queue.SimpleQueue)
    pending: int = 0
    overflow: bool = False


class RealtimeInlets:
    """Every realtime task's queued audio, shared by the frame loop and the worker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inlets: dict[TaskId, _Inlet] = {}
        self._finished: collections.deque[TaskId] = collections.deque(maxlen=FORGOTTEN)

    def _inlet(self, task_id: TaskId) -> _Inlet | None:
        if task_id in self._finished:
            return None
        return self._inlets.setdefault(task_id, _Inlet())

    def feed(self, packet: RealtimeAudio) -> None:
        with self._lock:
            inlet = self._inlet(packet.task_id)
            if inlet is None or inlet.overflow:
                return
            if packet.pcm:
                if inlet.pending + len(packet.pcm) > MAX_PENDING_BYTES:
                    inlet.overflow = True
                    inlet.packets.put(None)
                    return
                inlet.pending += len(packet.pcm)
                inlet.packets.put(packet.pcm)
            if packet.final:
                inlet.packets.put(None)

    def wake(self, task_id: TaskId) -> None:
        """A cancelled task stops waiting for audio."""
        with self._lock:
            inlet = self._inlets.get(task_id)
            if inlet is not None:
                inlet.packets.put(None)

    def take(self, task_id: TaskId, cancelled: Callable[[], bool]) -> list[bytes] | None:
        """Every packet queued now (waiting for the first); ``None`` at end of input."""
        with self._lock:
            inlet = self._inlet(task_id)
        assert inlet is not None, "a finished task asked for audio"
        while True:
            if cancelled():
                raise InletCancelled
            try:
                first = inlet.packets.get(timeout=WAIT_SECONDS)
                break
            except queue.Empty:
                continue
        taken: list[bytes | None] = [first]
        while True:
            try:
                taken.append(inlet.packets.get_nowait())
            except queue.Empty:
                break
        data = [item for item in taken if item is not None]
        with self._lock:
            inlet.pending -= sum(len(item) for item in data)
            overflow = inlet.overflow
        if overflow:
            raise RealtimeRefused(
                f"more than {MAX_PENDING_BYTES} bytes of audio queued ahead of the decoder"
            )
        if cancelled():
            raise InletCancelled
        if len(data) < len(taken):
            # The end of input (or a wake-up): what came before it is still decoded.
            if data:
                inlet.packets.put(None)
                return data
            return None
        return data

    def forget(self, task_id: TaskId) -> None:
        with self._lock:
            self._inlets.pop(task_id, None)
            self._finished.append(task_id)


Delta = Callable[[TranscriptSegment], None]


def run_realtime(
    model: WhisperTranscriber,
    task: TranscribeRealtime,
    inlets: RealtimeInlets,
    cancelled: Callable[[], bool],
    delta: Delta,
) -> RunnerMessage:
    """Decode the task's audio as it arrives; raises ``InletCancelled`` when cancelled,
    ``RealtimeRefused`` for input past its bounds, ``StreamingCancelled`` from the
    engine."""
    session = model.create_streaming_session(
        delay_ms=task.transcription_delay_ms,
        temperature=task.temperature or 0.0,
        cancelled=cancelled,
    )
    parts: list[str] = []

    def emit(confirmed: list[TimedWord]) -> None:
        if not confirmed:
            return
        text = joined(confirmed, first=not parts)
        if not text:
            return
        parts.append(text)
        delta(
            TranscriptSegment(
                id=len(parts) - 1,
                start=round(confirmed[0].start, 3),
                end=round(confirmed[-1].end, 3),
                text=text,
            )
        )

    while (packets := inlets.take(task.task_id, cancelled)) is not None:
        if any(len(pcm) % 2 for pcm in packets):
            raise RealtimeRefused("a packet is not a whole number of 16-bit samples")
        # Everything queued is decoded as one step: a decoder that fell behind
        # catches up with one decode instead of one per packet.
        emit(session.push(pcm16_to_float(b"".join(packets))))
    emit(session.finish())
    return Transcribed(
        task_id=task.task_id,
        text="".join(parts).strip(),
        language=session.language,
        duration=round(session.duration, 3),
    )
