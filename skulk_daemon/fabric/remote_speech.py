"""Speech tasks whose runner lives on another node.

The API node that accepted a speech request owns its command, as for a generation
(:mod:`skulk_daemon.fabric.remote_tasks`). It sends :class:`RunSpeech` to the node
that hosts the instance's runner; a transcription's audio follows as the command's
data stream to that node, in raw frames of at most 1 MiB, and the serving node
checks its size and SHA-256 against the job before its runner sees a byte (a
mismatch fails the call). The serving node runs the task through its own supervisor
exactly as a local request (task bookkeeping, cancellation) and sends the answer
back as the command's data stream to the owner: typed pieces (samples in frames of
at most 1 MiB, segments, text) and a closing frame. A streamed task's parts travel
as they are made, and the owner hands them on in order. The audio never enters
State or the event log.

When the owner stops waiting (the client went away, ``/v1/cancel``) it sends
:class:`CancelTask`; the serving node cancels the runner's task, and an owner still
listening sees the runner's own ``cancelled`` answer. A serving node that goes
silent, or a stream that loses a frame, ends the call with an error instead of a
hang; an owner that goes silent makes the serving node cancel its task.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from skulk_core.audio.formats import MAX_AUDIO_UPLOAD_BYTES
from skulk_core.chat.generation import ErrorChunk
from skulk_core.cluster.fabric import (
    MAX_SPEECH_FRAME_BYTES,
    CancelTask,
    RunSpeech,
    SpeechAccepted,
    SpeechAudio,
    SpeechSegment,
    SpeechText,
    SynthesisDone,
    TranscriptionDone,
    TranscriptionJob,
)
from skulk_core.ids import CommandId, InstanceId, NodeId, TaskId
from skulk_daemon.fabric.data_plane import DataStream, StreamBroken
from skulk_daemon.fabric.speech_frames import (
    Assembly,
    FrameSender,
    job_of,
    part_sink,
    send_answer,
    split,
    task_of,
)
from skulk_daemon.runner.client import Answer, PartSink
from skulk_daemon.runner.protocol import ERROR_CANCELLED, SpeechTask, Transcribe

if TYPE_CHECKING:
    from skulk_daemon.fabric.link import FabricLink

log = logging.getLogger(__name__)

LIVENESS_CHECK_SECONDS: Final = 1.0
"""How often a waiting end checks that the other node is still heard from."""
FIRST_FRAME_SECONDS: Final = 30.0
"""How long a serving node may take to accept a task before the owner gives up."""
UPLOAD_IDLE_SECONDS: Final = 30.0
"""How long a serving node waits for the next audio frame of a live owner."""
UPLOAD_STREAM_FRAMES: Final = MAX_AUDIO_UPLOAD_BYTES // MAX_SPEECH_FRAME_BYTES + 8

ERROR_AUDIO_MISMATCH: Final = "audio_mismatch"
ERROR_NODE_LOST: Final = "node_lost"
ERROR_STREAM_BROKEN: Final = "stream_broken"
ERROR_UNAVAILABLE: Final = "instance_unavailable"


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


def _error(task_id: TaskId, code: str, message: str) -> ErrorChunk:
    return ErrorChunk(task_id=task_id, code=code, message=message)


@dataclass(slots=True)
class _Serving:
    task: asyncio.Task[None]
    instance_id: InstanceId
    task_id: TaskId
    running: bool = False
    """The runner has the task (cancel it there), not only its upload."""
    cancelled: bool = False


class RemoteSpeech:
    """Both ends of remote speech for one node."""

    def __init__(self, link: FabricLink) -> None:
        self._link = link
        self._worker: SpeechWorker | None = None
        self._serving: dict[CommandId, _Serving] = {}

    def attach(self, worker: SpeechWorker) -> None:
        self._worker = worker

    # -- the owner's end ---------------------------------------------------------------

    async def run(
        self,
        node: NodeId,
        instance_id: InstanceId,
        task: SpeechTask,
        command_id: CommandId,
        parts: PartSink = None,
    ) -> Answer:
        """``task`` served by ``node``'s runner; a streamed task's parts go to ``parts``
        in order. Always answers (an error chunk when the node or the stream fails);
        cancelling the caller cancels the task there."""
        link = self._link
        task_id = task.task_id
        stream = link.data.open(command_id, sender=node)
        ended = False
        try:
            job = RunSpeech(command_id=command_id, instance_id=instance_id, job=job_of(task))
            if not link.send_control(node, job):
                ended = True
                return _error(task_id, ERROR_UNAVAILABLE, f"node {node} cannot be reached")
            if isinstance(task, Transcribe) and not self._upload(node, command_id, task.audio):
                return _error(task_id, ERROR_UNAVAILABLE, f"the audio could not be sent to {node}")
            answer = await self._answer(node, stream, task_id, parts)
            ended = True
            return answer
        finally:
            stream.close()
            if not ended:
                # The caller stopped waiting (or the stream went wrong): so does the
                # serving node.
                link.send_control(node, CancelTask(command_id=command_id))

    def _upload(self, node: NodeId, command_id: CommandId, audio: bytes) -> bool:
        sender = FrameSender(self._link, node, command_id)
        pieces = split(audio)
        return all(
            sender.send(piece, final=number == len(pieces) - 1)
            for number, piece in enumerate(pieces)
        )

    async def _answer(
        self, node: NodeId, stream: DataStream, task_id: TaskId, parts: PartSink
    ) -> Answer:
        link = self._link
        assembly = Assembly(task_id, parts)
        started = time.monotonic()
        accepted = False
        while True:
            try:
                if stream.ready():
                    payload = await stream.next()
                else:
                    async with asyncio.timeout(LIVENESS_CHECK_SECONDS):
                        payload = await stream.next()
            except TimeoutError:
                if not link.is_live(node):
                    return _error(
                        task_id, ERROR_NODE_LOST, f"node {node} serving this request went away"
                    )
                if not accepted and time.monotonic() - started > FIRST_FRAME_SECONDS:
                    return _error(task_id, ERROR_UNAVAILABLE, f"node {node} did not start the task")
                continue
            except StreamBroken as exc:
                return _error(task_id, ERROR_STREAM_BROKEN, f"audio from {node} was lost: {exc}")
            accepted = True
            match payload:
                case SpeechAccepted():
                    pass
                case SpeechAudio():
                    assembly.audio(payload)
                case SpeechSegment():
                    assembly.segment(payload)
                case SpeechText():
                    assembly.text(payload)
                case SynthesisDone():
                    return assembly.synthesized(payload)
                case TranscriptionDone():
                    return assembly.transcribed(payload)
                case ErrorChunk():
                    return payload
                case None:
                    return _error(task_id, ERROR_STREAM_BROKEN, "the stream ended early")
                case _:
                    return _error(
                        task_id, ERROR_STREAM_BROKEN, f"node {node} sent a frame of another kind"
                    )

    # -- the serving end ---------------------------------------------------------------

    def serve(self, owner: NodeId, message: RunSpeech) -> None:
        """Take ``owner``'s speech task (called by the agent, never raises)."""
        command_id = message.command_id
        if command_id in self._serving:
            return
        task_id = message.job.task_id
        # The upload's frames follow this message on the same connection: the stream
        # must exist before this returns.
        inbound = (
            self._link.data.open(command_id, UPLOAD_STREAM_FRAMES, sender=owner)
            if isinstance(message.job, TranscriptionJob)
            else None
        )
        task = asyncio.create_task(self._serve(owner, message, inbound))
        self._serving[command_id] = _Serving(task, message.instance_id, task_id)
        task.add_done_callback(lambda _: self._serving.pop(command_id, None))

    async def _serve(self, owner: NodeId, message: RunSpeech, inbound: DataStream | None) -> None:
        command_id, job = message.command_id, message.job
        sender = FrameSender(self._link, owner, command_id)
        worker = self._worker
        try:
            if worker is None:
                sender.send(
                    _error(job.task_id, ERROR_UNAVAILABLE, "this node serves no runners"),
                    final=True,
                )
                return
            sender.send(SpeechAccepted(task_id=job.task_id))
            audio = b""
            if inbound is not None:
                assert isinstance(job, TranscriptionJob)
                received = await self._receive(owner, inbound, job)
                if isinstance(received, ErrorChunk):
                    sender.send(received, final=True)
                    return
                audio = received
            await self._run(worker, owner, message, task_of(job, audio), sender)
        except asyncio.CancelledError:
            serving = self._serving.get(command_id)
            cancelled = serving is not None and serving.cancelled
            code, why = (
                (ERROR_CANCELLED, "the request was cancelled")
                if cancelled
                else (ERROR_UNAVAILABLE, "the serving node is shutting down")
            )
            sender.send(_error(job.task_id, code, why), final=True)
            raise
        except Exception:
            log.exception("serving speech task %s for %s failed", job.task_id, owner)
            failure = _error(job.task_id, "engine_failed", "the serving node failed the task")
            sender.send(failure, final=True)
        finally:
            if inbound is not None:
                inbound.close()

    async def _receive(
        self, owner: NodeId, inbound: DataStream, job: TranscriptionJob
    ) -> bytes | ErrorChunk:
        """The job's audio, as it arrives from ``owner``, checked against the job."""
        task_id = job.task_id
        if not 0 < job.audio_bytes <= MAX_AUDIO_UPLOAD_BYTES:
            return _error(
                task_id, ERROR_AUDIO_MISMATCH, f"an upload of {job.audio_bytes} bytes is refused"
            )
        audio = bytearray()
        frames = 0
        idle_since = time.monotonic()
        while True:
            try:
                if inbound.ready():
                    payload = await inbound.next()
                else:
                    async with asyncio.timeout(LIVENESS_CHECK_SECONDS):
                        payload = await inbound.next()
            except TimeoutError:
                if not self._link.is_live(owner):
                    return _error(task_id, ERROR_NODE_LOST, f"node {owner} went away mid-upload")
                if time.monotonic() - idle_since > UPLOAD_IDLE_SECONDS:
                    return _error(task_id, ERROR_STREAM_BROKEN, "the audio upload stalled")
                continue
            except StreamBroken as exc:
                return _error(task_id, ERROR_STREAM_BROKEN, f"audio frames were lost: {exc}")
            idle_since = time.monotonic()
            match payload:
                case None:
                    break
                case bytes() if len(payload) <= MAX_SPEECH_FRAME_BYTES:
                    audio += payload
                    frames += 1
                    if len(audio) > job.audio_bytes or frames > job.audio_frames:
                        break
                case _:
                    return _error(
                        task_id, ERROR_AUDIO_MISMATCH, "the audio arrived in an unexpected frame"
                    )
        if len(audio) != job.audio_bytes or frames != job.audio_frames:
            return _error(
                task_id,
                ERROR_AUDIO_MISMATCH,
                f"the audio arrived as {len(audio)} bytes in {frames} frames; "
                f"{job.audio_bytes} bytes in {job.audio_frames} frames were sent",
            )
        if hashlib.sha256(audio).hexdigest() != job.audio_sha256:
            return _error(task_id, ERROR_AUDIO_MISMATCH, "the audio's SHA-256 does not match")
        return bytes(audio)

    async def _run(
        self,
        worker: SpeechWorker,
        owner: NodeId,
        message: RunSpeech,
        task: SpeechTask,
        sender: FrameSender,
    ) -> None:
        command_id, instance_id, task_id = message.command_id, message.instance_id, task.task_id
        serving = self._serving.get(command_id)
        if serving is not None:
            if serving.cancelled:
                sender.send(
                    _error(task_id, ERROR_CANCELLED, "the request was cancelled"), final=True
                )
                return
            serving.running = True

        def lost() -> None:
            log.warning("owner %s of %s stopped receiving; cancelling", owner, command_id)
            worker.cancel(instance_id, task_id)

        parts = part_sink(sender, task_id, lost) if task.stream else None
        speaking = asyncio.ensure_future(worker.speech(instance_id, task, command_id, parts))
        watching = True
        try:
            while not speaking.done():
                await asyncio.wait({speaking}, timeout=LIVENESS_CHECK_SECONDS)
                if watching and not speaking.done() and not self._link.is_live(owner):
                    watching = False  # nobody will read the answer: stop the work
                    lost()
            answer = speaking.result()
        except asyncio.CancelledError:
            worker.cancel(instance_id, task_id)
            speaking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await speaking
            raise
        if not send_answer(sender, answer):
            log.warning("could not send the answer of %s to %s", command_id, owner)

    def stop(self, command_id: CommandId) -> None:
        """The owner cancelled: cancel the task in the runner (its ``cancelled``
        answer still goes back), or stop its upload."""
        serving = self._serving.get(command_id)
        if serving is None:
            return
        serving.cancelled = True
        if serving.running:
            if self._worker is not None:
                self._worker.cancel(serving.instance_id, serving.task_id)
        else:
            serving.task.cancel()

    def cancel(self, node: NodeId, command_id: CommandId) -> None:
        """``/v1/cancel`` on the owner: the serving node cancels the runner's task
        (the caller keeps waiting for its ``cancelled`` answer)."""
        self._link.send_control(node, CancelTask(command_id=command_id))

    def serving(self) -> int:
        """Speech tasks this node serves for other nodes now."""
        return len(self._serving)

    async def close(self) -> None:
        tasks = [s.task for s in self._serving.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
