"""How a speech task and its answer travel as fabric values, and back.

A runner task becomes a :class:`~skulk_core.cluster.fabric.SpeechJob` (a
transcription's audio stays out of it: it follows as raw frames of at most
:data:`~skulk_core.cluster.fabric.MAX_SPEECH_FRAME_BYTES`); the runner's answer and a
streamed task's parts become bounded pieces (samples, segments, text) and a closing
frame, which :class:`Assembly` turns back into the same answer and parts on the owner.
Nothing here waits or decides; :mod:`skulk_daemon.fabric.remote_speech` does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from skulk_core.audio.subtitles import TranscriptSegment
from skulk_core.chat.generation import ErrorChunk
from skulk_core.cluster.fabric import (
    MAX_SPEECH_FRAME_BYTES,
    DataPayload,
    SpeechAudio,
    SpeechJob,
    SpeechSegment,
    SpeechText,
    SynthesisDone,
    SynthesisJob,
    TranscriptionDone,
    TranscriptionJob,
)
from skulk_core.ids import CommandId, NodeId, TaskId
from skulk_daemon.runner.client import Answer, PartSink
from skulk_daemon.runner.protocol import (
    SpeechPartial,
    SpeechTask,
    Synthesize,
    Synthesized,
    Transcribe,
    Transcribed,
)

if TYPE_CHECKING:
    from skulk_daemon.fabric.link import FabricLink

MAX_TEXT_CHARS: Final = MAX_SPEECH_FRAME_BYTES // 4
"""Characters of transcript per frame (UTF-8 takes at most 4 bytes a character)."""


def job_of(task: SpeechTask) -> SpeechJob:
    """The fabric's job for a runner task (a transcription's audio stays out of it)."""
    match task:
        case Synthesize():
            return SynthesisJob(
                task_id=task.task_id,
                text=task.text,
                voice=task.voice,
                speed=task.speed,
                seed=task.seed,
                stream=task.stream,
            )
        case Transcribe():
            return TranscriptionJob(
                task_id=task.task_id,
                audio_bytes=len(task.audio),
                audio_frames=len(split(task.audio)),
                audio_sha256=hashlib.sha256(task.audio).hexdigest(),
                language=task.language,
                prompt=task.prompt,
                temperature=task.temperature,
                translate=task.translate,
                stream=task.stream,
            )


def task_of(job: SpeechJob, audio: bytes) -> SpeechTask:
    """The runner task for a job received over the fabric (with its checked audio)."""
    match job:
        case SynthesisJob():
            return Synthesize(
                task_id=job.task_id,
                text=job.text,
                voice=job.voice,
                speed=job.speed,
                seed=job.seed,
                stream=job.stream,
            )
        case TranscriptionJob():
            return Transcribe(
                task_id=job.task_id,
                audio=audio,
                language=job.language,
                prompt=job.prompt,
                temperature=job.temperature,
                translate=job.translate,
                stream=job.stream,
            )


def split(data: bytes, size: int = MAX_SPEECH_FRAME_BYTES) -> list[bytes]:
    """``data`` in pieces of at most ``size`` bytes (at least one piece)."""
    return [data[start : start + size] for start in range(0, len(data), size)] or [b""]


class Assembly:
    """The owner's view of an answer as its pieces arrive."""

    def __init__(self, task_id: TaskId, parts: PartSink) -> None:
        self._task_id = task_id
        self._parts = parts
        self._part_pcm = bytearray()
        self._pcm = bytearray()
        self._segments: list[TranscriptSegment] = []
        self._text: list[str] = []

    def audio(self, piece: SpeechAudio) -> None:
        if piece.index < 0:
            self._pcm += piece.pcm
            return
        self._part_pcm += piece.pcm
        if piece.last:
            pcm, self._part_pcm = bytes(self._part_pcm), bytearray()
            self._emit(SpeechPartial(task_id=self._task_id, index=piece.index, pcm=pcm))

    def segment(self, piece: SpeechSegment) -> None:
        if piece.partial:
            part = SpeechPartial(task_id=self._task_id, index=piece.index, segment=piece.segment)
            self._emit(part)
        else:
            self._segments.append(piece.segment)

    def text(self, piece: SpeechText) -> None:
        self._text.append(piece.text)

    def _emit(self, part: SpeechPartial) -> None:
        if self._parts is not None:
            self._parts(part)

    def synthesized(self, done: SynthesisDone) -> Synthesized:
        return Synthesized(
            task_id=self._task_id,
            pcm=bytes(self._pcm),
            sample_rate=done.sample_rate,
            sentences=done.sentences,
        )

    def transcribed(self, done: TranscriptionDone) -> Transcribed:
        return Transcribed(
            task_id=self._task_id,
            text="".join(self._text),
            language=done.language,
            duration=done.duration,
            segments=tuple(self._segments),
        )


class FrameSender:
    """Numbers one command's frames to ``node`` (the owner, or a serving node)."""

    def __init__(self, link: FabricLink, node: NodeId, command_id: CommandId) -> None:
        self._link = link
        self._node = node
        self._command_id = command_id
        self._seq = 0
        self.failed = False

    def send(self, payload: DataPayload, *, final: bool = False) -> bool:
        if self.failed:
            return False
        sent = self._link.data.send(self._node, self._command_id, self._seq, payload, final=final)
        if not sent:
            self.failed = True
            return False
        self._seq += 1
        return True


def part_sink(sender: FrameSender, task_id: TaskId, lost: Callable[[], None]) -> PartSink:
    def send(part: SpeechPartial) -> None:
        if sender.failed:
            return
        ok = True
        if part.segment is not None:
            piece = SpeechSegment(
                task_id=task_id, index=part.index, segment=part.segment, partial=True
            )
            ok = sender.send(piece)
        else:
            pieces = split(part.pcm)
            for number, pcm in enumerate(pieces):
                last = number == len(pieces) - 1
                ok = ok and sender.send(
                    SpeechAudio(task_id=task_id, pcm=pcm, index=part.index, last=last)
                )
        if not ok:
            lost()

    return send


def send_answer(sender: FrameSender, answer: Answer) -> bool:
    """The runner's answer as pieces and a closing (final) frame."""
    match answer:
        case Synthesized():
            task_id = answer.task_id
            if answer.pcm:
                for pcm in split(answer.pcm):
                    if not sender.send(SpeechAudio(task_id=task_id, pcm=pcm)):
                        return False
            done = SynthesisDone(
                task_id=task_id, sample_rate=answer.sample_rate, sentences=answer.sentences
            )
            return sender.send(done, final=True)
        case Transcribed():
            task_id = answer.task_id
            for index, segment in enumerate(answer.segments):
                if not sender.send(SpeechSegment(task_id=task_id, index=index, segment=segment)):
                    return False
            text = answer.text
            for start in range(0, len(text), MAX_TEXT_CHARS):
                if not sender.send(
                    SpeechText(task_id=task_id, text=text[start : start + MAX_TEXT_CHARS])
                ):
                    return False
            closing = TranscriptionDone(
                task_id=task_id, language=answer.language, duration=answer.duration
            )
            return sender.send(closing, final=True)
        case ErrorChunk():
            return sender.send(answer, final=True)
        case _:
            message = "the runner answered out of kind"
            failure = ErrorChunk(task_id=answer.task_id, code="engine_failed", message=message)
            return sender.send(failure, final=True)
