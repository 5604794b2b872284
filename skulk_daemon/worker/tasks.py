"""The tasks this node's runners run, as ``/state`` and the flight recorder see them.

:class:`RunnerTasks` opens one task on a runner (``StartTask`` now, ``FinishTask``
with how it ended), keeps the runner's count of active tasks and its running/ready
status, and cancels a task diagnostics names. How a task ended is decided by the
pure :func:`finish_status` and :func:`answer_status`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from skulk_core.chat.generation import EngineChunk as Chunk
from skulk_core.chat.generation import ErrorChunk, FinishChunk
from skulk_core.cluster.worker_plan import LocalRunnerPhase
from skulk_core.ids import CommandId, RunnerId, TaskId, new_command_id
from skulk_core.models.cards import ModelTask
from skulk_core.state.commands import FinishTask, StartTask
from skulk_core.state.shards import RunnerReady, RunnerRunning
from skulk_core.state.state import Task, TaskStatus
from skulk_daemon.node.node import Node
from skulk_daemon.runner.client import Answer
from skulk_daemon.runner.protocol import ERROR_CANCELLED
from skulk_daemon.worker.runners import ManagedRunner, RunnerLifecycle


@dataclass(slots=True)
class Outcome:
    """How a task ended, as its body found out."""

    status: TaskStatus = TaskStatus.FAILED


def finish_status(chunk: Chunk) -> TaskStatus | None:
    """The status a generation's chunk ends its task with (None: not its end)."""
    if isinstance(chunk, FinishChunk):
        return TaskStatus.CANCELLED if chunk.finish_reason == "cancelled" else TaskStatus.COMPLETE
    return None


def answer_status(answer: Answer) -> TaskStatus:
    """The status a runner's one answer (an embedding, a speech result) ends its
    task with."""
    if not isinstance(answer, ErrorChunk):
        return TaskStatus.COMPLETE
    return TaskStatus.CANCELLED if answer.code == ERROR_CANCELLED else TaskStatus.FAILED


class RunnerTasks:
    def __init__(self, node: Node, runners: RunnerLifecycle) -> None:
        self._node = node
        self._runners = runners

    @contextlib.contextmanager
    def open(
        self, runner: ManagedRunner, task_id: TaskId, command_id: CommandId, kind: ModelTask
    ) -> Iterator[Outcome]:
        """One task on ``runner``, as ``/state`` shows it: started now, finished with
        the status the body sets (failed unless it says otherwise; cancelled when the
        caller is cancelled or stops reading), the runner running while it has any."""
        self._node.report(
            StartTask(
                command_id=new_command_id(),
                task=Task(
                    task_id=task_id,
                    command_id=command_id,
                    instance_id=runner.instance_id,
                    kind=kind.value,
                    task_status=TaskStatus.RUNNING,
                ),
            )
        )
        runner.active_tasks += 1
        runner.tasks.add(task_id)
        self._runners.mark(runner, "task_started", "running", kind.value, task_id)
        if runner.active_tasks == 1:
            self._runners.report(runner.runner_id, RunnerRunning(active_tasks=1))
        outcome = Outcome()
        try:
            yield outcome
        except (GeneratorExit, asyncio.CancelledError):
            # NOTE: GeneratorExit reaches here when a generation's reader closes it
            # early (a client gone): the task was cancelled, not failed.
            outcome.status = TaskStatus.CANCELLED
            raise
        finally:
            runner.active_tasks -= 1
            runner.tasks.discard(task_id)
            idle = runner.active_tasks == 0 and runner.phase is LocalRunnerPhase.SERVING
            self._runners.mark(
                runner,
                "task_finished",
                "ready" if idle else runner.reported,
                outcome.status.value,
                task_id,
            )
            if idle:
                self._runners.report(runner.runner_id, RunnerReady())
            self._node.report(
                FinishTask(command_id=new_command_id(), task_id=task_id, task_status=outcome.status)
            )

    def cancel(self, runner_id: RunnerId, task_id: TaskId | None) -> TaskId | None:
        """Ask ``runner_id`` to cancel ``task_id`` (or its only task); the task asked,
        or None when the runner does not know it."""
        runner = self._runners.get(runner_id)
        if runner is None:
            return None
        if task_id is None:
            if len(runner.tasks) != 1:
                return None
            task_id = next(iter(runner.tasks))
        if task_id not in runner.tasks or runner.process is None:
            return None
        self._runners.mark(runner, "cancel_requested", runner.reported, "diagnostics", task_id)
        with contextlib.suppress(Exception):
            runner.process.cancel(task_id)
        return task_id
