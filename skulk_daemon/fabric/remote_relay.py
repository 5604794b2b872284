"""One relay for runner tasks whose runner lives on another node.

The API node that accepted a request owns its command. It sends the kind's run
message (:class:`~skulk_core.cluster.fabric.RunSpeech`,
:class:`~skulk_core.cluster.fabric.RunImages`) to the node that hosts the instance's
runner; the task's input (a transcription's audio, an edit's image), when it has one,
follows as the command's data stream in raw frames of at most 1 MiB, and the serving
node checks its size, frame count and SHA-256 against the job before its runner sees
a byte (a mismatch fails the call). The serving node runs the task through its own
supervisor exactly as a local request (task bookkeeping, cancellation) and sends the
answer back as the command's data stream to the owner: the kind's typed pieces and a
closing frame; a streamed task's parts (speech partials, image previews) travel as
they are made, and the owner hands them on in order. Inputs and answers never enter
State or the event log.

When the owner stops waiting (the client went away, ``/v1/cancel``) it sends
:class:`CancelTask`; the serving node cancels the runner's task, and an owner still
listening sees the runner's own ``cancelled`` answer. A serving node that goes silent,
or a stream that loses a frame, ends the call with an error instead of a hang; an
owner that goes silent makes the serving node cancel its task.

:class:`RemoteRelay` is that mechanism once; a kind (``remote_speech``,
``remote_images``) says only what differs: its run message, its input, how its answer
travels as pieces and is put back together.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final, Generic, Protocol, TypeVar

from skulk_core.chat.generation import ErrorChunk
from skulk_core.cluster.fabric import (
    MAX_SPEECH_FRAME_BYTES,
    CancelTask,
    DataPayload,
    RunImages,
    RunSpeech,
    SpeechAccepted,
)
from skulk_core.ids import CommandId, InstanceId, NodeId, TaskId
from skulk_daemon.fabric.data_plane import DataStream, StreamBroken
from skulk_daemon.fabric.relay_frames import (
    ERROR_NODE_LOST,
    ERROR_STREAM_BROKEN,
    ERROR_UNAVAILABLE,
    Announced,
    Assembler,
    ForeignFrame,
    FrameSender,
    InputKind,
    relay_error,
    split,
)
from skulk_daemon.runner.client import Answer
from skulk_daemon.runner.protocol import ERROR_CANCELLED

if TYPE_CHECKING:
    from skulk_daemon.fabric.link import FabricLink

log = logging.getLogger(__name__)

LIVENESS_CHECK_SECONDS: Final = 1.0
"""How often a waiting end checks that the other node is still heard from."""
FIRST_FRAME_SECONDS: Final = 30.0
"""How long a serving node may take to accept a task before the owner gives up
(it waits up to this for a loading runner)."""
UPLOAD_IDLE_SECONDS: Final = 30.0
"""How long a serving node waits for the next input frame of a live owner."""
UPLOAD_SLACK_FRAMES: Final = 8
"""Frames an inbound stream holds beyond the most an input of its bound can take."""


MessageT = TypeVar("MessageT", RunSpeech, RunImages)
TaskT = TypeVar("TaskT")
WorkerT = TypeVar("WorkerT", bound="Worker")
PartT = TypeVar("PartT")
Sink = Callable[[PartT], None] | None
"""Where a streamed task's parts go, in order (``None``: not streamed)."""


class FrameLost(Exception):
    """Waiting for a frame failed: the other node went away, never started, or the
    stream lost a frame. ``code`` and ``message`` are the error chunk's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def poll_frame(stream: DataStream) -> DataPayload | None:
    """The stream's next frame (``None``: it ended); ``TimeoutError`` when none came
    within :data:`LIVENESS_CHECK_SECONDS`, so the caller can check on the sender."""
    # NOTE: a frame already queued is taken without arming a timer; the timeout is
    # only for waiting.
    if stream.ready():
        return await stream.next()
    async with asyncio.timeout(LIVENESS_CHECK_SECONDS):
        return await stream.next()


async def next_frame(
    link: FabricLink,
    node: NodeId,
    stream: DataStream,
    *,
    since: float | None,
    what: str,
) -> DataPayload | None:
    """The next frame ``node`` sent on ``stream`` (``None``: the stream ended). Raises
    :class:`FrameLost` when ``node`` is no longer heard from, when nothing came within
    :data:`FIRST_FRAME_SECONDS` of ``since`` (``None``: the task started already), or
    when the stream lost a frame (of ``what``)."""
    while True:
        try:
            return await poll_frame(stream)
        except TimeoutError:
            if not link.is_live(node):
                raise FrameLost(
                    ERROR_NODE_LOST, f"node {node} serving this request went away"
                ) from None
            if since is not None and time.monotonic() - since > FIRST_FRAME_SECONDS:
                raise FrameLost(ERROR_UNAVAILABLE, f"node {node} did not start the task") from None
        except StreamBroken as exc:
            raise FrameLost(ERROR_STREAM_BROKEN, f"{what} from {node} were lost: {exc}") from None


class Worker(Protocol):
    """What the serving end needs of the node's supervisor besides the kind's call."""

    def cancel(self, instance_id: InstanceId, task_id: TaskId) -> None: ...


@dataclass(slots=True)
class _Serving:
    task: asyncio.Task[None]
    instance_id: InstanceId
    task_id: TaskId
    running: bool = False
    """The runner has the task (cancel it there), not only its upload."""
    cancelled: bool = False


class RemoteRelay(ABC, Generic[MessageT, TaskT, WorkerT, PartT]):
    """Both ends of one kind of remote runner task for one node."""

    ANSWER: ClassVar[str]
    """What the answer's frames carry, for errors ("audio", "pictures")."""
    TASK: ClassVar[str]
    """What one task is, for the log ("speech task", "render")."""
    INPUT: ClassVar[InputKind]
    """What a task's input is, when it has one."""

    def __init__(self, link: FabricLink) -> None:
        self._link = link
        self._worker: WorkerT | None = None
        self._serving: dict[CommandId, _Serving] = {}

    def attach(self, worker: WorkerT) -> None:
        self._worker = worker

    # -- what a kind says ----------------------------------------------------------

    @abstractmethod
    def _message(self, command_id: CommandId, instance_id: InstanceId, task: TaskT) -> MessageT:
        """The run message for ``task`` (its input stays out of it)."""

    @abstractmethod
    def _input(self, task: TaskT) -> bytes | None:
        """The input that follows the run message, if the task has one."""

    @abstractmethod
    def _task_id(self, task: TaskT) -> TaskId: ...

    @abstractmethod
    def _assembler(self, task_id: TaskId, sink: Sink[PartT]) -> Assembler: ...

    @abstractmethod
    def _announced(self, message: MessageT) -> Announced | None:
        """The input the serving node waits for before the task can run."""

    @abstractmethod
    def _task(self, message: MessageT, upload: bytes | None) -> TaskT:
        """The runner task for a received message and its checked input."""

    @abstractmethod
    def _work(
        self,
        worker: WorkerT,
        message: MessageT,
        task: TaskT,
        sender: FrameSender,
        lost: Callable[[], None],
    ) -> Awaitable[Answer]:
        """The task on this node's runner; a streamed task's parts go out on ``sender``
        (``lost`` when the owner no longer takes them)."""

    @abstractmethod
    def _send_answer(self, sender: FrameSender, answer: Answer) -> bool:
        """The runner's answer as pieces and a closing (final) frame."""

    # -- the owner's end -------------------------------------------------------------

    async def run(
        self,
        node: NodeId,
        instance_id: InstanceId,
        task: TaskT,
        command_id: CommandId,
        sink: Sink[PartT] = None,
    ) -> Answer:
        """``task`` served by ``node``'s runner; a streamed task's parts go to ``sink``
        in order. Always answers (an error chunk when the node or the stream fails);
        cancelling the caller cancels the task there."""
        link = self._link
        task_id = self._task_id(task)
        stream = link.data.open(command_id, sender=node)
        ended = False
        try:
            if not link.send_control(node, self._message(command_id, instance_id, task)):
                ended = True
                return relay_error(task_id, ERROR_UNAVAILABLE, f"node {node} cannot be reached")
            data = self._input(task)
            if data is not None and not self._upload(node, command_id, data):
                return relay_error(task_id, ERROR_UNAVAILABLE, f"the input could not reach {node}")
            answer = await self._answer(node, stream, task_id, sink)
            ended = True
            return answer
        finally:
            stream.close()
            if not ended:
                # The caller stopped waiting (or the stream went wrong): so does the
                # serving node.
                link.send_control(node, CancelTask(command_id=command_id))

    def _upload(self, node: NodeId, command_id: CommandId, data: bytes) -> bool:
        sender = FrameSender(self._link, node, command_id)
        pieces = split(data)
        return all(
            sender.send(piece, final=number == len(pieces) - 1)
            for number, piece in enumerate(pieces)
        )

    async def _answer(
        self, node: NodeId, stream: DataStream, task_id: TaskId, sink: Sink[PartT]
    ) -> Answer:
        assembler = self._assembler(task_id, sink)
        since: float | None = time.monotonic()
        while True:
            try:
                payload = await next_frame(self._link, node, stream, since=since, what=self.ANSWER)
            except FrameLost as lost:
                return relay_error(task_id, lost.code, lost.message)
            since = None  # accepted: from now on only liveness counts
            match payload:
                case SpeechAccepted():
                    continue
                case ErrorChunk():
                    return payload
                case None:
                    return relay_error(task_id, ERROR_STREAM_BROKEN, "the stream ended early")
            try:
                answer = assembler.take(payload)
            except ForeignFrame:
                return relay_error(
                    task_id, ERROR_STREAM_BROKEN, f"node {node} sent a frame of another kind"
                )
            if answer is not None:
                return answer

    def cancel(self, node: NodeId, command_id: CommandId) -> None:
        """``/v1/cancel`` on the owner: the serving node cancels the runner's task
        (the caller keeps waiting for its ``cancelled`` answer)."""
        self._link.send_control(node, CancelTask(command_id=command_id))

    # -- the serving end -------------------------------------------------------------

    def serve(self, owner: NodeId, message: MessageT) -> None:
        """Take ``owner``'s task (called by the agent, never raises)."""
        command_id = message.command_id
        if command_id in self._serving:
            return
        announced = self._announced(message)
        # The input's frames follow this message on the same connection: the stream
        # must exist before this returns.
        inbound = (
            None
            if announced is None
            else self._link.data.open(
                command_id,
                self.INPUT.limit // MAX_SPEECH_FRAME_BYTES + UPLOAD_SLACK_FRAMES,
                sender=owner,
            )
        )
        task = asyncio.create_task(self._serve(owner, message, announced, inbound))
        self._serving[command_id] = _Serving(task, message.instance_id, message.job.task_id)
        task.add_done_callback(lambda _: self._serving.pop(command_id, None))

    async def _serve(
        self,
        owner: NodeId,
        message: MessageT,
        announced: Announced | None,
        inbound: DataStream | None,
    ) -> None:
        command_id, task_id = message.command_id, message.job.task_id
        sender = FrameSender(self._link, owner, command_id)
        worker = self._worker
        try:
            if worker is None:
                failure = relay_error(task_id, ERROR_UNAVAILABLE, "this node serves no runners")
                sender.send(failure, final=True)
                return
            sender.send(SpeechAccepted(task_id=task_id))
            data = None
            if announced is not None and inbound is not None:
                received = await receive_upload(
                    self._link, owner, inbound, task_id, announced, kind=self.INPUT
                )
                if isinstance(received, ErrorChunk):
                    sender.send(received, final=True)
                    return
                data = received
            await self._run(worker, owner, message, self._task(message, data), sender)
        except asyncio.CancelledError:
            serving = self._serving.get(command_id)
            cancelled = serving is not None and serving.cancelled
            code, why = (
                (ERROR_CANCELLED, "the request was cancelled")
                if cancelled
                else (ERROR_UNAVAILABLE, "the serving node is shutting down")
            )
            sender.send(relay_error(task_id, code, why), final=True)
            raise
        except Exception:
            log.exception("serving %s %s for %s failed", self.TASK, task_id, owner)
            failure = relay_error(
                task_id, "engine_failed", f"the serving node failed the {self.TASK}"
            )
            sender.send(failure, final=True)
        finally:
            if inbound is not None:
                inbound.close()

    async def _run(
        self,
        worker: WorkerT,
        owner: NodeId,
        message: MessageT,
        task: TaskT,
        sender: FrameSender,
    ) -> None:
        command_id, instance_id = message.command_id, message.instance_id
        task_id = self._task_id(task)
        serving = self._serving.get(command_id)
        if serving is not None:
            if serving.cancelled:
                failure = relay_error(task_id, ERROR_CANCELLED, "the request was cancelled")
                sender.send(failure, final=True)
                return
            serving.running = True

        def lost() -> None:
            log.warning("owner %s of %s stopped receiving; cancelling", owner, command_id)
            worker.cancel(instance_id, task_id)

        working = asyncio.ensure_future(self._work(worker, message, task, sender, lost))
        watching = True
        try:
            while not working.done():
                await asyncio.wait({working}, timeout=LIVENESS_CHECK_SECONDS)
                if watching and not working.done() and not self._link.is_live(owner):
                    watching = False  # nobody will read the answer: stop the work
                    lost()
            answer = working.result()
        except asyncio.CancelledError:
            worker.cancel(instance_id, task_id)
            working.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await working
            raise
        if not self._send_answer(sender, answer):
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

    def serving(self) -> int:
        """Tasks of this kind this node serves for other nodes now."""
        return len(self._serving)

    async def close(self) -> None:
        await cancel_all([serving.task for serving in self._serving.values()])


async def receive_upload(
    link: FabricLink,
    owner: NodeId,
    inbound: DataStream,
    task_id: TaskId,
    upload: Announced,
    *,
    kind: InputKind,
) -> bytes | ErrorChunk:
    """The task's input, as it arrives from ``owner``, checked against the job."""
    what, mismatch = kind.what, kind.mismatch
    if not 0 < upload.size <= kind.limit:
        return relay_error(task_id, mismatch, f"an upload of {upload.size} bytes is refused")
    data = bytearray()
    frames = 0
    idle_since = time.monotonic()
    while True:
        try:
            payload = await poll_frame(inbound)
        except TimeoutError:
            if not link.is_live(owner):
                return relay_error(task_id, ERROR_NODE_LOST, f"node {owner} went away mid-upload")
            if time.monotonic() - idle_since > UPLOAD_IDLE_SECONDS:
                return relay_error(task_id, ERROR_STREAM_BROKEN, f"the {what} upload stalled")
            continue
        except StreamBroken as exc:
            return relay_error(task_id, ERROR_STREAM_BROKEN, f"{what} frames were lost: {exc}")
        idle_since = time.monotonic()
        match payload:
            case None:
                break
            case bytes() if len(payload) <= MAX_SPEECH_FRAME_BYTES:
                data += payload
                frames += 1
                if len(data) > upload.size or frames > upload.frames:
                    break
            case _:
                return relay_error(task_id, mismatch, f"the {what} arrived in an unexpected frame")
    if len(data) != upload.size or frames != upload.frames:
        return relay_error(
            task_id,
            mismatch,
            f"the {what} arrived as {len(data)} bytes in {frames} frames; "
            f"{upload.size} bytes in {upload.frames} frames were sent",
        )
    if hashlib.sha256(data).hexdigest() != upload.sha256:
        return relay_error(task_id, mismatch, f"the {what}'s SHA-256 does not match")
    return bytes(data)


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and wait until each has ended."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
