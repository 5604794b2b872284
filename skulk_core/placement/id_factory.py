"""Where placement gets fresh instance and runner ids.

The planner never mints ids itself: the caller injects a factory, so tests are
deterministic and the API can give an instance the id of the command that owns it.
"""

from __future__ import annotations

from typing import Protocol

from skulk_core.ids import InstanceId, RunnerId, new_instance_id, new_runner_id


class IdFactory(Protocol):
    def instance_id(self) -> InstanceId: ...

    def runner_id(self) -> RunnerId: ...


class RandomIds:
    """Fresh random (UUID4) ids for every instance and runner."""

    def instance_id(self) -> InstanceId:
        return new_instance_id()

    def runner_id(self) -> RunnerId:
        return new_runner_id()


class CommandOwnedIds(RandomIds):
    """A fixed instance id (the owning command's), fresh runner ids.

    ``POST /place_instance`` answers with ``command_id == instance_id``: the accepted
    command owns exactly the placement identity it created.
    """

    def __init__(self, instance_id: InstanceId) -> None:
        self._instance_id = instance_id

    def instance_id(self) -> InstanceId:
        return self._instance_id
