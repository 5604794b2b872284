"""Speech tasks whose runner lives on another node: the speech kind of
:class:`~skulk_daemon.fabric.remote_relay.RemoteRelay`.

The owner sends :class:`RunSpeech`; a transcription's audio follows as the command's
data stream, checked (size, frames, SHA-256) before the runner sees a byte. The
serving node sends the answer back as typed pieces (samples in frames of at most
1 MiB, segments, text) and a closing frame; a streamed task's parts travel as they are
made (:mod:`skulk_daemon.fabric.speech_frames`). The audio never enters State or the
event log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from skulk_core.audio.formats import MAX_AUDIO_UPLOAD_BYTES
from skulk_core.cluster.fabric import RunSpeech, TranscriptionJob
from skulk_core.ids import CommandId, InstanceId, TaskId
from skulk_daemon.fabric.relay_frames import Announced, Assembler, FrameSender, InputKind
from skulk_daemon.fabric.remote_relay import RemoteRelay
from skulk_daemon.fabric.speech_frames import Assembly, job_of, part_sink, send_answer, task_of
from skulk_daemon.runner.client import Answer, PartSink
from skulk_daemon.runner.protocol import SpeechPartial, SpeechTask, Transcribe

ERROR_AUDIO_MISMATCH: Final = "audio_mismatch"


class SpeechWorker(Protocol):
    """What the serving end needs of the node's supervisor."""

    async def speech(
        self,
        instance_id: InstanceId,
        task: SpeechTask,
        command_id: CommandId,
        parts: PartSink = None,
    ) -> Answer: ...

    def cancel(self, instance_id: InstanceId, task_id: TaskId) -> None: ...


class RemoteSpeech(RemoteRelay[RunSpeech, SpeechTask, SpeechWorker, SpeechPartial]):
    """Both ends of remote speech for one node."""

    ANSWER = "audio"
    TASK = "speech task"
    INPUT = InputKind(limit=MAX_AUDIO_UPLOAD_BYTES, what="audio", mismatch=ERROR_AUDIO_MISMATCH)

    def _message(
        self, command_id: CommandId, instance_id: InstanceId, task: SpeechTask
    ) -> RunSpeech:
        return RunSpeech(command_id=command_id, instance_id=instance_id, job=job_of(task))

    def _input(self, task: SpeechTask) -> bytes | None:
        return task.audio if isinstance(task, Transcribe) else None

    def _task_id(self, task: SpeechTask) -> TaskId:
        return task.task_id

    def _assembler(self, task_id: TaskId, sink: PartSink) -> Assembler:
        return Assembly(task_id, sink)

    def _announced(self, message: RunSpeech) -> Announced | None:
        job = message.job
        if not isinstance(job, TranscriptionJob):
            return None
        return Announced(job.audio_bytes, job.audio_frames, job.audio_sha256)

    def _task(self, message: RunSpeech, upload: bytes | None) -> SpeechTask:
        return task_of(message.job, upload or b"")

    def _work(
        self,
        worker: SpeechWorker,
        message: RunSpeech,
        task: SpeechTask,
        sender: FrameSender,
        lost: Callable[[], None],
    ) -> Awaitable[Answer]:
        parts = part_sink(sender, task.task_id, lost) if task.stream else None
        return worker.speech(message.instance_id, task, message.command_id, parts)

    def _send_answer(self, sender: FrameSender, answer: Answer) -> bool:
        return send_answer(sender, answer)
