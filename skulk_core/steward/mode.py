"""Intelligent-fabric mode as the cluster has it: State's value once there is one.

``PUT /config`` on any node orders its ``intelligent_fabric`` section into State's
cluster settings (:class:`~skulk_core.state.state.FabricMode`); until one is ordered
the master publishes its own. Every reader (the master's planner, each node's
``GET /v1/steward``, ``/v1/models``, the steward's 409 on DELETE) asks this module, so
all nodes agree whatever their own files say.
"""

from __future__ import annotations

from skulk_core.config import IntelligentFabricConfig
from skulk_core.state.state import FabricMode, State


def mode_of(section: IntelligentFabricConfig) -> FabricMode:
    return FabricMode(
        enabled=section.enabled,
        brain_model=section.brain_model,
        max_tool_calls=section.max_tool_calls,
    )


def section_of(mode: FabricMode) -> IntelligentFabricConfig:
    return IntelligentFabricConfig(
        enabled=mode.enabled, brain_model=mode.brain_model, max_tool_calls=mode.max_tool_calls
    )


def cluster_mode(state: State) -> FabricMode | None:
    """The mode ordered into State, or ``None`` when none has been yet."""
    settings = state.cluster_settings
    return None if settings is None else settings.intelligent_fabric


def effective_fabric(state: State, own: IntelligentFabricConfig) -> IntelligentFabricConfig:
    """The cluster's ``intelligent_fabric`` section; this node's own until State has one."""
    mode = cluster_mode(state)
    return own if mode is None else section_of(mode)
