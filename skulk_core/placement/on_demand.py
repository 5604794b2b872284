"""Loading on demand, the pure half: which preview a request places, and how far
the placement it made has come.

With ``inference.load_on_demand`` on, a request for an installed model that no
instance serves places it the way ``skulk place`` does with no options: the
planner's first valid preview (not an alternative shape), asked for exactly. The
daemon's :mod:`skulk_daemon.placement.on_demand` applies these answers.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from skulk_core.ids import InstanceId
from skulk_core.placement.planner import PlacementRequest
from skulk_core.placement.previews import PlacementPreview
from skulk_core.state.shards import RunnerFailed, RunnerReady, RunnerRunning
from skulk_core.state.state import State


class Loading(msgspec.Struct, frozen=True, kw_only=True):
    """Still coming up (or not yet applied on this node)."""


class Ready(msgspec.Struct, frozen=True, kw_only=True):
    """Every runner serves."""


class LoadFailed(msgspec.Struct, frozen=True, kw_only=True):
    """The placement failed or was removed before it was ready."""

    message: str


LoadProgress = Loading | Ready | LoadFailed


def first_valid(previews: Sequence[PlacementPreview]) -> PlacementPreview | None:
    """The preview the planner ranks first among the valid, non-alternative ones."""
    for preview in previews:
        if preview.error is None and preview.instance is not None and not preview.alternative:
            return preview
    return None


def no_placement_reason(previews: Sequence[PlacementPreview]) -> str:
    """Why nothing fits, from the previews' own reasons (each said once)."""
    reasons = list(dict.fromkeys(p.error for p in previews if p.error))
    return "; ".join(reasons[:3]) or "no node can hold it"


def request_of(preview: PlacementPreview) -> PlacementRequest:
    """The launch that makes ``preview``'s shape (GGUF on two nodes is ``LlamaRpc``)."""
    return PlacementRequest(sharding=preview.sharding, instance_meta=preview.instance_meta)


def load_progress(state: State, instance_id: InstanceId, *, seen: bool) -> LoadProgress:
    """How far ``instance_id`` has come; ``seen`` says it was applied here before
    (gone now means removed, not yet applied)."""
    instance = state.instances.get(instance_id)
    if instance is None:
        for failure in state.instance_failures:
            if failure.instance_id == instance_id:
                return LoadFailed(message=f"{failure.error_message} ({failure.error_code})")
        if seen:
            return LoadFailed(message="the instance was removed before it was ready")
        return Loading()
    statuses = [state.runners.get(r) for r in instance.shard_assignments.runner_to_shard]
    for status in statuses:
        if isinstance(status, RunnerFailed):
            return LoadFailed(message=f"a runner failed: {status.error_message}")
    if statuses and all(isinstance(s, RunnerReady | RunnerRunning) for s in statuses):
        return Ready()
    return Loading()
