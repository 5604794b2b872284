"""How a speech task and its answer travel as fabric values, and back.

A runner task becomes a :class:`~skulk_core.cluster.fabric.SpeechJob` (a
transcription's audio stays out of it: it follows as raw frames of at most
:data:`~skulk_core.cluster.fabric.MAX_SPEECH_FRAME_BYTES`); the runner's answer and a
streamed task's parts become bounded pieces (samples, segments, text) and a closing
frame, which :class:`Assembly` turns back into the same answer and parts on the owner.
Nothing here waits or decides; :mod:`skulk_daemon.fabric.remote_speech` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from skulk_core.audio.subtitles import TranscriptSegment
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
from skulk_core.ids import TaskId
from skulk_daemon.fabric.relay_frames import ForeignFrame, FrameSender, announce, send_other, split
from skulk_daemon.runner.client import Answer, PartSink
from skulk_daemon.runner.protocol import (
    SpeechPartial,
    SpeechTask,
    Synthesize,
    Synthesized,
    Transcribe,
    Transcribed,
)

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
            size, frames, sha256 = announce(task.audio)
            return TranscriptionJob(
                task_id=task.task_id,
                audio_bytes=size,
                audio_frames=frames,
                audio_sha256=sha256,
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


class Assembly:
    """The owner's view of an answer as its pieces arrive."""

    def __init__(self, task_id: TaskId, parts: PartSink) -> None:
        self._task_id = task_id
        self._parts = parts
        self._part_pcm = bytearray()
        self._pcm = bytearray()
        self._segments: list[TranscriptSegment] = []
        self._text: list[str] = []

    def take(self, payload: DataPayload) -> Answer | None:
        match payload:
            case SpeechAudio():
                self.audio(payload)
            case SpeechSegment():
                self.segment(payload)
            case SpeechText():
                self.text(payload)
            case SynthesisDone():
                return self.synthesized(payload)
            case TranscriptionDone():
                return self.transcribed(payload)
            case _:
                raise ForeignFrame
        return None

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
        case _:
            return send_other(sender, answer)
