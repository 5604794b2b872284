"""Which node ``POST /admin/restart`` means: a pure resolution over live telemetry.

Operator clients name a node by its stable install id (a UUIDv4 that survives
restarts and re-keying); legacy local clients by its session node id. The spec's
rules: both forms at once is a 400, no match a 404, more than one live node
reporting the same install id (a copied data dir) a 409, neither form the API node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from skulk_core.ids import NodeId, NodeInstallId


class TargetRefusal(StrEnum):
    BOTH_FORMS = "conflicting_restart_targets"
    NOT_FOUND = "restart_target_not_found"
    AMBIGUOUS = "ambiguous_restart_target"


@dataclass(frozen=True, slots=True)
class RestartTarget:
    node_id: NodeId
    install_id: NodeInstallId | None
    """``None`` when the client named the node by its session id (the legacy shape)."""
    local: bool


@dataclass(frozen=True, slots=True)
class TargetRefused:
    reason: TargetRefusal
    message: str


def resolve_restart_target(
    own_node_id: NodeId,
    own_install_id: NodeInstallId,
    live: Mapping[NodeId, NodeInstallId],
    *,
    node_install_id: str | None,
    node_id: str | None,
) -> RestartTarget | TargetRefused:
    """The node to restart, given ``live`` (each live node's reported install id)."""
    if node_install_id is not None and node_id is not None:
        return TargetRefused(
            TargetRefusal.BOTH_FORMS,
            "pass node_install_id or node_id, not both",
        )
    if node_install_id is not None:
        matches = sorted(n for n, install in live.items() if install == node_install_id)
        if not matches:
            return TargetRefused(
                TargetRefusal.NOT_FOUND,
                f"no live node reports node_install_id {node_install_id!r}; "
                "read GET /state nodeIdentities for the current ones",
            )
        if len(matches) > 1:
            return TargetRefused(
                TargetRefusal.AMBIGUOUS,
                f"{len(matches)} live nodes report node_install_id {node_install_id!r} "
                f"({', '.join(matches)}); restart one by node_id or give each its own data dir",
            )
        found = matches[0]
        return RestartTarget(found, NodeInstallId(node_install_id), local=found == own_node_id)
    if node_id is not None:
        if node_id == own_node_id:
            return RestartTarget(own_node_id, None, local=True)
        if node_id in live:
            return RestartTarget(NodeId(node_id), None, local=False)
        return TargetRefused(
            TargetRefusal.NOT_FOUND, f"no live node has node_id {node_id!r}; see GET /state"
        )
    return RestartTarget(own_node_id, own_install_id, local=True)
