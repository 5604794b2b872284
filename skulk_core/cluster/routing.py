"""Which placed instance serves a request for a model (pure).

With several replicas of a model, a request goes to the one that holds the longest
prefix of its prompt (see :mod:`skulk_core.cluster.prefixes`), unless that one is
saturated; otherwise, and among equals, to the least loaded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Final

from skulk_core.cluster.prefixes import held_blocks
from skulk_core.ids import InstanceId, ModelId
from skulk_core.state.shards import (
    Instance,
    RunnerLoaded,
    RunnerLoading,
    RunnerReady,
    RunnerRunning,
    RunnerStatus,
    RunnerWarmingUp,
)
from skulk_core.state.state import State, TaskStatus

SATURATED_TASKS: Final = 4
"""Active tasks at which a replica's held prefix stops attracting requests: a runner
serves four sequences at once by default, and a fifth would queue behind them."""

_SERVING = (RunnerReady, RunnerRunning)
_COMING_UP = (RunnerLoading, RunnerLoaded, RunnerWarmingUp)


def _readiness(statuses: list[RunnerStatus | None]) -> int | None:
    """0 when every rank serves, 1 while any is still coming up, None when unavailable.

    A placement with any failed, shutting-down or status-less rank is unavailable.
    """
    if any(s is None for s in statuses):
        return None
    if all(isinstance(s, _SERVING) for s in statuses):
        return 0
    if all(isinstance(s, _SERVING + _COMING_UP) for s in statuses):
        return 1
    return None


def select_instance(
    state: State,
    model_id: ModelId,
    *,
    fingerprint: tuple[int, ...] = (),
    held: Mapping[InstanceId, frozenset[int]] | None = None,
) -> Instance | None:
    """Ready or running before loading; then ordinary instances before a system one
    (the resident steward serves its model's ordinary requests only as a fallback);
    then the longest held prefix of the prompt
    (``fingerprint``, against what each instance is known to hold in ``held``) on a
    replica that is not saturated; then the fewest active text tasks; then id order."""
    active: Counter[InstanceId] = Counter(
        task.instance_id
        for task in state.tasks.values()
        if task.task_status in (TaskStatus.PENDING, TaskStatus.RUNNING)
    )
    best: tuple[int, int, int, int, str] | None = None
    chosen: Instance | None = None
    for instance in state.instances.values():
        if instance.shard_assignments.model_id != model_id:
            continue
        statuses = [state.runners.get(r) for r in instance.shard_assignments.runner_to_shard]
        readiness = _readiness(statuses)
        if readiness is None:
            continue
        load = active[instance.instance_id]
        prefix = 0
        if fingerprint and held and load < SATURATED_TASKS:
            prefix = held_blocks(fingerprint, held.get(instance.instance_id, frozenset()))
        intent = state.placement_intents.get(instance.instance_id)
        system = 1 if intent is not None and intent.system_role is not None else 0
        key = (readiness, system, -prefix, load, instance.instance_id)
        if best is None or key < best:
            best, chosen = key, instance
    return chosen
