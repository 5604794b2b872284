"""The steward's lifecycle: what the master should do about the hidden brain instance,
and the ``GET /v1/steward`` status derived from State.

The master's agent (``skulk_daemon/steward/agent.py``) calls :func:`plan_steward` every
tick with its own State and configuration and carries the action out; this module
decides, it never acts.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

import msgspec

from skulk_core.ids import InstanceId, ModelId
from skulk_core.state.shards import Instance, RunnerReady, RunnerRunning
from skulk_core.state.state import State

STEWARD_MODEL_ID: Final = "skulk/steward"
"""The reserved virtual model id that selects model-plus-harness."""
STEWARD_ROLE: Final = "steward"
"""The ``system_role`` of the hidden instance and of its ``/v1/models`` entry."""
STEWARD_DISPLAY_NAME: Final = "Skulk"
CANARY_FAILURES_TO_REPLACE: Final = 3
"""Consecutive failed liveness probes after which the fabric replaces the placement."""

ACTIVE_DOWNLOAD_STATUSES: Final = frozenset({"pending", "in_progress"})


class Transition(StrEnum):
    IDLE = "idle"
    PRESTAGING = "prestaging"
    REPLACING = "replacing"
    REPAIRING = "repairing"


class LifecycleState(StrEnum):
    DISABLED = "disabled"
    DOWNLOADING = "downloading"
    STARTING = "starting"
    READY = "ready"
    DEGRADED = "degraded"


class PlaceSteward(msgspec.Struct, frozen=True, kw_only=True):
    model_id: ModelId


class RemoveSteward(msgspec.Struct, frozen=True, kw_only=True):
    instance_id: InstanceId
    reason: str


StewardAction = PlaceSteward | RemoveSteward


class StewardStatus(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/steward``: the booleans are authoritative, ``state`` summarises them."""

    enabled: bool
    present: bool
    ready: bool
    steward_model: str | None
    instance_id: str | None
    desired_model: str | None
    transition: Transition
    progress: float | None
    state: LifecycleState


def is_steward(state: State, instance_id: InstanceId) -> bool:
    intent = state.placement_intents.get(instance_id)
    return intent is not None and intent.system_role == STEWARD_ROLE


def steward_instances(state: State) -> list[tuple[InstanceId, Instance]]:
    """The hidden steward placements, in State's (creation) order."""
    return [(iid, inst) for iid, inst in state.instances.items() if is_steward(state, iid)]


def plan_steward(
    state: State, *, enabled: bool, brain_model: str, canary_failures: int = 0
) -> list[StewardAction]:
    """What keeps exactly one steward of ``brain_model`` placed while ``enabled``, and
    none otherwise. A placement of another brain, a duplicate, or one whose liveness
    canary failed :data:`CANARY_FAILURES_TO_REPLACE` times is removed; a missing one is
    placed (repair when its placement disappeared)."""
    placed = steward_instances(state)
    if not enabled:
        return [
            RemoveSteward(instance_id=iid, reason="intelligent fabric disabled")
            for iid, _ in placed
        ]
    actions: list[StewardAction] = []
    keep: InstanceId | None = None
    for iid, inst in placed:
        if inst.shard_assignments.model_id != brain_model:
            actions.append(RemoveSteward(instance_id=iid, reason="brain model changed"))
        elif keep is not None:
            actions.append(RemoveSteward(instance_id=iid, reason="duplicate steward"))
        elif canary_failures >= CANARY_FAILURES_TO_REPLACE:
            actions.append(RemoveSteward(instance_id=iid, reason="liveness canary failed"))
        else:
            keep = iid
    if keep is None:
        actions.append(PlaceSteward(model_id=ModelId(brain_model)))
    return actions


def _ready(state: State, instance: Instance) -> bool:
    runners = instance.shard_assignments.node_to_runner.values()
    return bool(runners) and all(
        isinstance(state.runners.get(r), RunnerReady | RunnerRunning) for r in runners
    )


def _download_progress(state: State, instance: Instance) -> tuple[bool, float | None]:
    """Whether the brain's weights are still being staged on its nodes, and how far."""
    model = instance.shard_assignments.model_id
    done = total = 0
    active = False
    for node in instance.shard_assignments.node_to_runner:
        for progress in state.downloads.get(node, ()):
            if progress.model_id == model and progress.status in ACTIVE_DOWNLOAD_STATUSES:
                active = True
                done += progress.downloaded_bytes
                total += progress.total_bytes
    return active, (min(1.0, done / total) if active and total > 0 else None)


def steward_status(
    state: State,
    *,
    enabled: bool,
    brain_model: str,
    canary_failures: int = 0,
    repairing: bool = False,
) -> StewardStatus:
    """The status with the spec's precedence: disabled, then downloading (placed, weights
    still staging), starting (placing or loading), degraded (a probe failure
    outstanding), ready."""
    placed = steward_instances(state) if enabled else []
    current = next(
        ((iid, inst) for iid, inst in placed if inst.shard_assignments.model_id == brain_model),
        placed[0] if placed else None,
    )
    present = current is not None
    ready = current is not None and _ready(state, current[1])
    downloading, progress = (
        (False, None) if current is None else _download_progress(state, current[1])
    )
    serving_model = current[1].shard_assignments.model_id if current is not None else None
    if not enabled:
        transition = Transition.IDLE
    elif serving_model is not None and serving_model != brain_model:
        transition = Transition.REPLACING
    elif current is None and repairing:
        transition = Transition.REPAIRING
    elif downloading:
        transition = Transition.PRESTAGING
    else:
        transition = Transition.IDLE
    if not enabled:
        lifecycle = LifecycleState.DISABLED
    elif present and downloading and not ready:
        lifecycle = LifecycleState.DOWNLOADING
    elif not ready:
        lifecycle = LifecycleState.STARTING
    elif canary_failures > 0:
        lifecycle = LifecycleState.DEGRADED
    else:
        lifecycle = LifecycleState.READY
    return StewardStatus(
        enabled=enabled,
        present=present,
        ready=ready,
        steward_model=serving_model,
        instance_id=str(current[0]) if current is not None else None,
        desired_model=brain_model if enabled else None,
        transition=transition,
        progress=progress,
        state=lifecycle,
    )
