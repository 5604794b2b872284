"""``GET /v1/diagnostics/node``: this node's view of the cluster fabric.

The spec's full node bundle (process tree, flight recorders, doctor checks) is
not built yet; this route serves the parts that exist: the node's role in the
cluster, its peers, and the fabric's frame counters (what was dropped and why,
which peers were refused and why), plus the data plane's stream counters.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, get

from skulk_core.version import SKULK_VERSION
from skulk_daemon.api.authority import AuthorityGuard, declare
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.fabric.cluster import ClusterAgent
from skulk_daemon.node.node import Node


class DiagnosticsController(Controller):
    tags = ("Diagnostics",)
    opt = declare(Requirement.OPEN)

    @get(
        "/v1/diagnostics/node",
        summary="This node's role, peers and fabric counters",
        responses=errors(OPENAI),
    )
    async def node_bundle(
        self, node: Node, cluster: ClusterAgent | None, authority_guard: AuthorityGuard
    ) -> dict[str, Any]:
        state = node.state
        return {
            "nodeId": node.node_id,
            "skulkVersion": SKULK_VERSION,
            "lastEventAppliedIdx": state.last_event_applied_idx,
            "cluster": None if cluster is None else cluster.diagnostics(),
            # Requests the authority policy refused since start, by reason.
            "authorityRefusals": dict(sorted(authority_guard.refusals.items())),
        }
