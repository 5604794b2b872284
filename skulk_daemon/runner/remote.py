"""What a service needs to run a task on another node's runner.

The fabric's relays (:mod:`skulk_daemon.fabric.remote_speech`,
:mod:`skulk_daemon.fabric.remote_images`) provide it; the speech and image services
depend on this protocol only, so they never import the fabric.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from skulk_core.ids import CommandId, InstanceId, NodeId
from skulk_daemon.runner.routing import Answer

TaskT_contra = TypeVar("TaskT_contra", contravariant=True)
PartT_co = TypeVar("PartT_co", covariant=True)


class RemoteRunner(Protocol[TaskT_contra, PartT_co]):
    """Tasks on another node's runner: one kind of task, whose streamed parts (speech
    partials, image previews) go to a sink in order."""

    async def run(
        self,
        node: NodeId,
        instance_id: InstanceId,
        task: TaskT_contra,
        command_id: CommandId,
        sink: Callable[[PartT_co], None] | None = None,
    ) -> Answer:
        """``task`` served by ``node``'s runner. Always answers (an error chunk when
        the node or the stream fails); cancelling the caller cancels it there."""
        ...

    def cancel(self, node: NodeId, command_id: CommandId) -> None:
        """``/v1/cancel`` on the owner: the serving node cancels the runner's task."""
        ...
