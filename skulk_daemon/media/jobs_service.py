"""The effectful half of the media job machinery, shared by video and music: it admits
a job, runs it on the instance's runner, applies progress and both completion planes,
and serves cancel, delete, listing and content. Each family supplies the parts that
differ (:class:`Family`): the runner task it sends and the container check.

A job's id is also its command id, so ``POST /v1/cancel/{id}`` reaches it. Jobs and
content belong to the API node that accepted them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import msgspec

from skulk_core.chat.generation import ErrorChunk
from skulk_core.ids import CommandId, InstanceId, ModelId, TaskId
from skulk_core.media import jobs as plan
from skulk_core.media.jobs import Job, JobFamily, JobRefused, ListOrder, Page
from skulk_core.models.cards import ModelCard, ModelTask
from skulk_core.state.shards import serving_node
from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.media.containers import ContainerRejected
from skulk_daemon.media.store import JobStore, StoreFull
from skulk_daemon.node.node import Node
from skulk_daemon.runner.protocol import ERROR_CANCELLED, MediaProgress, MediaRendered, MediaTask
from skulk_daemon.worker.supervisor import Supervisor

log = logging.getLogger(__name__)
MODE_UNAVAILABLE: Final = "video_mode_unavailable"


class Family(Protocol):
    """What one job family adds to the shared machinery."""

    family: JobFamily
    task: ModelTask

    def runner_task(self, job: Job, task_id: TaskId, work_dir: Path) -> MediaTask:
        """The runner message that renders ``job`` into ``work_dir``."""
        ...

    def stats(self, job: Job, rendered: MediaRendered) -> msgspec.Raw:
        """The encoded stats of the render report."""
        ...

    def verify(self, job: Job, files: list[Path]) -> msgspec.Raw:
        """The encoded output facts of the delivered ``files`` (blocking; run in a
        thread). Raises ``ContainerRejected``."""
        ...


@dataclass(frozen=True, slots=True)
class Content:
    path: Path
    media_type: str


class MediaJobs:
    """One family's jobs on this node."""

    def __init__(
        self,
        node: Node,
        worker: Supervisor,
        commands: ActiveCommands,
        family: Family,
        store: JobStore,
    ) -> None:
        self._node = node
        self._worker = worker
        self._commands = commands
        self.family = family
        self.store = store
        self._running: dict[str, asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._opened = False

    # -- lifecycle ---------------------------------------------------------------------

    def open(self) -> None:
        if not self._opened:
            self.store.open()
            self._opened = True

    async def start(self) -> None:
        self.open()
        self._sweeper = asyncio.create_task(self._sweep_forever())

    async def stop(self) -> None:
        tasks = [task for task in (self._sweeper, *self._running.values()) if task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(plan.SWEEP_INTERVAL_S)
            self.sweep(time.time())

    def sweep(self, now: float) -> None:
        """Apply the delivery bound, the lost-frame grace and content expiry."""
        for job in self.store:
            after = plan.swept(job, now)
            if after != job:
                self._settle(after)

    # -- admission ---------------------------------------------------------------------

    def card(self, model: str) -> ModelCard:
        """The model's card; 404 when the catalog has none, 400 when it is not a card
        of this family."""
        if not model:
            raise JobRefused(400, "model is required", "invalid_request")
        entry = self._node.catalog().get(ModelId(model))
        if entry is None:
            raise JobRefused(404, f"model {model} is not in the catalog", "model_not_found")
        if self.family.task not in entry.card.tasks:
            raise JobRefused(
                400,
                f"model {model} does not support {self.family.task.value}",
                "wrong_task",
            )
        return entry.card

    def _instance(self, model: str) -> tuple[InstanceId | None, str]:
        """This node's instance of ``model``, or why there is none. A placed instance
        that is still loading is used: the supervisor waits for it to be ready."""
        model_id = ModelId(model)
        placed = [
            instance
            for instance in self._node.state.instances.values()
            if instance.shard_assignments.model_id == model_id
        ]
        for instance in sorted(placed, key=lambda instance: instance.instance_id):
            if serving_node(instance) == self._node.node_id:
                return instance.instance_id, ""
        if not placed:
            return None, f"no placed instance of {model} on a node with its engine"
        return None, (
            f"{model} is placed on node {serving_node(placed[0])}; media jobs render on "
            "the API node's own runner, so place the model here or call that node's API"
        )

    def create(
        self, model: str, request: msgspec.Raw, inputs: list[tuple[str, bytes]] | None = None
    ) -> Job:
        """Record a queued job and start it (503 past 32 live jobs). ``inputs`` are the
        uploads' names and bytes, written under the job's work dir for the runner."""
        plan.admit(self.store)
        self.open()
        job_id = f"{self.family.family}_{secrets.token_hex(12)}"
        job = Job(
            id=job_id,
            family=self.family.family,
            model=model,
            created_at=int(time.time()),
            created_ns=time.time_ns(),
            request=request,
        )
        work = self.store.work_dir(job_id)
        work.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name, data in inputs or ():
            (work / name).write_bytes(data)
        self.store.put(job)
        instance_id, why = self._instance(model)
        if instance_id is None:
            code = MODE_UNAVAILABLE if self.family.family == "video" else "model_unavailable"
            return self._settle(plan.failed(job, f"{code}: {why}", time.time()))
        task = asyncio.create_task(self._run(job_id, instance_id))
        self._running[job_id] = task
        task.add_done_callback(lambda _: self._running.pop(job_id, None))
        self._commands.register(CommandId(job_id), lambda: self._cancel_quietly(job_id))
        return job

    # -- running -----------------------------------------------------------------------

    async def _run(self, job_id: str, instance_id: InstanceId) -> None:
        job = self.store.get(job_id)
        if job is None:
            return
        # NOTE: the job stays queued until the runner reports its first progress: the
        # runner admits one generation at a time, so a job may wait in its queue.
        task_id = TaskId(f"{job_id}-render")
        output_dir = self.store.work_dir(job_id) / "out"
        message = self.family.runner_task(job, task_id, output_dir)
        try:
            answer = await self._worker.media(
                instance_id, message, CommandId(job_id), self._progress(job_id)
            )
            await self._finish(job_id, answer)
        finally:
            self._commands.finish(CommandId(job_id))
            current = self.store.get(job_id)
            if current is not None and current.live:
                self._settle(plan.task_ended(current, time.time()))

    def _progress(self, job_id: str) -> Callable[[MediaProgress], None]:
        def report(update: MediaProgress) -> None:
            job = self.store.get(job_id)
            if job is None:
                return
            after = plan.progressed(job, update.progress, update.stage)
            # NOTE: progress is kept in memory between stages; a record is written
            # when the stage changes, so a chatty engine cannot make the store churn.
            self.store.put(after, persist=after.stage != job.stage)

        return report

    async def _finish(self, job_id: str, answer: MediaRendered | ErrorChunk) -> None:
        job = self.store.get(job_id)
        if job is None or not job.live:
            return
        now = time.time()
        match answer:
            case ErrorChunk(code=code, message=message):
                if code == ERROR_CANCELLED:
                    self._settle(plan.cancelled(job, now))
                else:
                    self._settle(plan.failed(job, message, now))
                return
            case MediaRendered() as rendered:
                stats = self.family.stats(job, rendered)
                job = self._settle(plan.reported(job, stats, now))
        files = [Path(name) for name in answer.files]
        try:
            output = await asyncio.to_thread(self.family.verify, job, files)
            stored = self.store.adopt(job, files)
        except (ContainerRejected, StoreFull, OSError) as exc:
            current = self.store.get(job_id)
            if current is not None:
                self._settle(plan.failed(current, str(exc), time.time()))
            return
        current = self.store.get(job_id)
        if current is not None and current.live:
            self._settle(plan.delivered(current, output, stored, time.time()))
        else:
            # Cancelled while the container was being verified: drop what arrived.
            shutil.rmtree(self.store.content_dir(job_id), ignore_errors=True)

    def _settle(self, job: Job) -> Job:
        return self.store.put(job)

    # -- routes ------------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        self.open()
        job = self.store.get(job_id)
        if job is None:
            raise JobRefused(404, f"{self.family.family} job {job_id} not found", "not_found")
        return job

    def page(self, limit: int, after: str | None, order: ListOrder) -> Page:
        self.open()
        return plan.page(self.store, limit=limit, after=after, order=order)

    def cancel(self, job_id: str) -> Job:
        """Stop a live job (its runner task is cancelled, partial output removed); a
        terminal job comes back unchanged."""
        job = self.get(job_id)
        if not job.live:
            return job
        running = self._running.pop(job_id, None)
        if running is not None:
            # NOTE: cancelling the task interrupts the supervisor's await, which sends
            # Cancel to the runner (the runner then removes its partial output).
            running.cancel()
        self._commands.finish(CommandId(job_id))
        return self._settle(plan.cancelled(job, time.time()))

    def _cancel_quietly(self, job_id: str) -> None:
        """``POST /v1/cancel/{id}``'s hook: the job may have been forgotten since."""
        with contextlib.suppress(JobRefused):
            self.cancel(job_id)

    def delete(self, job_id: str) -> None:
        self.cancel(job_id)
        self.store.forget(job_id)

    def content(self, job_id: str, name: str, media_type: str) -> Content:
        """A completed job's stored file; 409 before completion, 404 once gone."""
        job = self.get(job_id)
        if job.status != "completed":
            raise JobRefused(409, f"job {job_id} is {job.status}, not completed", "not_ready")
        path = self.store.content_dir(job_id) / name
        if job.content_bytes == 0 or not path.is_file():
            raise JobRefused(404, f"the content of job {job_id} has expired", "content_expired")
        return Content(path=path, media_type=media_type)
