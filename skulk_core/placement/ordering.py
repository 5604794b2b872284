"""The master's placement check: a placement is admitted against everything ordered
before it, cluster-wide.

Every API node dry-runs the planner against its own replicated State before it
sends ``CreateInstance``, but two API nodes (or two quick requests racing one
replication delay) can plan against the same free memory. The master orders
commands one at a time, so checking each placement again there, against the
committed capacity of every instance it already accepted, means two placements
can never oversubscribe a node, whichever nodes they came through.
"""

from __future__ import annotations

from collections.abc import Mapping

from skulk_core.cluster.telemetry import NodeTelemetry
from skulk_core.ids import ModelId, NodeId
from skulk_core.models.cards import ModelCard
from skulk_core.placement.cluster import cluster_facts
from skulk_core.placement.exact import admit_instance
from skulk_core.placement.results import (
    NO_VALID_PLACEMENT,
    PLACEMENT_INFO_PENDING,
    PlacementRefusal,
)
from skulk_core.placement.rpc_pool import endpoints_problem
from skulk_core.state.commands import Command, CreateInstance
from skulk_core.state.decide import Refused
from skulk_core.state.shards import LlamaRpcInstance
from skulk_core.state.state import State


def admit_command(
    state: State,
    command: Command,
    telemetry: Mapping[NodeId, NodeTelemetry],
    cards: Mapping[ModelId, ModelCard],
) -> Refused | None:
    """A refusal when ``command`` places an instance that no longer fits, else None.

    A placement the master cannot judge (it has no card for the model, or no
    telemetry for a node yet) is let through: the API node already checked it, and
    refusing would block placements during a master change.
    """
    if not isinstance(command, CreateInstance):
        return None
    instance = command.instance
    # NOTE: where a pool's driver dials is judged from topology alone, before the
    # card lookup and never waived as pending: it must not depend on whether this
    # master can size the model, or a caller could route a driver anywhere.
    if isinstance(instance, LlamaRpcInstance):
        misrouted = endpoints_problem(instance, state.topology.connections)
        if misrouted is not None:
            return Refused(code=NO_VALID_PLACEMENT, message=misrouted)
    card = cards.get(instance.shard_assignments.model_id)
    if card is None:
        return None
    facts = cluster_facts(state, telemetry, cards)
    # NOTE: never lowered here: a window the API node accepted that no longer fits (a
    # placement ordered just before took the room) is refused, not silently shrunk.
    admitted = admit_instance(instance, card, facts, state, lower_to_ceiling=False)
    if isinstance(admitted, PlacementRefusal) and admitted.code != PLACEMENT_INFO_PENDING:
        return Refused(code=admitted.code, message=admitted.message)
    return None
