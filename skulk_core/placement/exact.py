"""Admitting an exact instance (``POST /instance``): the caller chose the shape,
placement checks that this cluster can run it and stamps its context window."""

from __future__ import annotations

import msgspec

from skulk_core.models.cards import ModelCard
from skulk_core.placement.backends import (
    common_backend,
    kv_reservation,
    reserves_context_at_load,
)
from skulk_core.placement.capacity import PoolUnknown
from skulk_core.placement.cluster import ClusterFacts
from skulk_core.placement.eligibility import Candidate, screen_node
from skulk_core.placement.fit import Site
from skulk_core.placement.results import (
    MODEL_CARD_IDENTITY_MISMATCH,
    NO_VALID_PLACEMENT,
    PLACEMENT_INFO_PENDING,
    PlacementRefusal,
)
from skulk_core.placement.rpc_pool import endpoints_problem, split_endpoint
from skulk_core.placement.shapes import (
    Unsupported,
    instance_meta_of,
    instance_shares,
    minted_meta,
    sharding_of,
)
from skulk_core.placement.window import choose_window
from skulk_core.state.shards import Instance, LlamaRpcInstance, Sharding
from skulk_core.state.state import State


def _refuse(message: str, code: str = NO_VALID_PLACEMENT) -> PlacementRefusal:
    return PlacementRefusal(code=code, message=message)


def identity_problem(instance: Instance, card: ModelCard) -> str | None:
    """Why the instance's shards do not all name ``card``'s model, if they do not."""
    assignments = instance.shard_assignments
    if assignments.model_id != card.model_id:
        return f"the instance assigns {assignments.model_id!r}, not {card.model_id!r}"
    for runner, shard in assignments.runner_to_shard.items():
        if shard.model_id != assignments.model_id:
            return (
                f"runner {runner}'s shard names {shard.model_id!r} but the instance "
                f"assigns {assignments.model_id!r}"
            )
    return None


def admit_instance(
    instance: Instance,
    card: ModelCard,
    facts: ClusterFacts,
    state: State,
    *,
    lower_to_ceiling: bool = True,
) -> Instance | PlacementRefusal:
    """The instance as the master should commit it, or why it cannot run here.

    The shape must be one this node can run, on nodes that host ``card`` with room
    for their shares. A positive ``contextTokenLimit`` is an upper bound: a smaller
    one is kept, an inflated one is lowered to the resource-derived ceiling; an
    omitted one is backfilled with the default a launch would stamp.
    ``lower_to_ceiling=False`` (the master's re-check of an ordered instance) refuses
    a limit that no longer fits instead of lowering it: the API node promised the
    caller that window.
    """
    mismatch = identity_problem(instance, card)
    if mismatch is not None:
        return _refuse(mismatch, MODEL_CARD_IDENTITY_MISMATCH)
    limit = instance.context_token_limit
    if limit is not None and limit <= 0:
        return _refuse(f"contextTokenLimit must be positive, got {limit}")
    shares = instance_shares(card, instance)
    if isinstance(shares, str):
        return _refuse(shares)
    if sharding_of(instance) == Sharding.TENSOR and not card.supports_tensor:
        return _refuse(f"{card.model_id} does not support Tensor sharding")
    taken = {
        runner: other.instance_id
        for other in state.instances.values()
        for runner in other.shard_assignments.runner_to_shard
    }
    for runner in instance.shard_assignments.runner_to_shard:
        if runner in taken:
            return _refuse(f"runner {runner} already belongs to instance {taken[runner]}")
    ring: list[Candidate] = []
    for share in shares:
        if share.node_id not in facts.topology_nodes:
            return _refuse(f"node {share.node_id} is not in the cluster")
        screened = screen_node(card, facts, share.node_id, frozenset())
        if not isinstance(screened, Candidate):
            code = PLACEMENT_INFO_PENDING if screened.pending else NO_VALID_PLACEMENT
            return _refuse(f"node {screened.label} {screened.reason}", code)
        ring.append(screened)
    backend = common_backend(card, [c.backends for c in ring])
    if backend is None:
        return _refuse(f"the instance's nodes share no engine that serves {card.model_id}")
    # The shares above gave the nodes; what the engine reserves sizes each.
    shares = instance_shares(
        card, instance, kv_reservation(card, backend, facts.telemetry.get(shares[0].node_id))
    )
    if isinstance(shares, str):
        return _refuse(shares)
    actual = instance_meta_of(instance)
    expected = minted_meta(backend, actual, len(ring), sharding_of(instance) or Sharding.PIPELINE)
    if isinstance(expected, Unsupported):
        return _refuse(expected.reason)
    if expected != actual:
        return _refuse(
            f"a {len(ring)}-node {backend} placement is a {expected}Instance, not {actual}Instance"
        )
    pool_problem = _rpc_pool_problem(instance, facts)
    if pool_problem is not None:
        return _refuse(pool_problem)
    sites: list[Site] = []
    for share, candidate in zip(shares, ring, strict=True):
        pool = candidate.pool(backend)
        if isinstance(pool, PoolUnknown):
            return _refuse(f"node {candidate.label}: {pool.reason}")
        sites.append(Site(share=share, pool=pool, label=candidate.label))
    window = choose_window(
        card,
        sites,
        limit,
        reserves=reserves_context_at_load(backend),
        lower_to_ceiling=lower_to_ceiling,
    )
    if isinstance(window, str):
        return _refuse(f"cannot place {card.model_id}: {window}")
    return msgspec.structs.replace(instance, context_token_limit=window.tokens)


def _rpc_pool_problem(instance: Instance, facts: ClusterFacts) -> str | None:
    """Why a pool's donor endpoints are not the donors' own, or collide with ports
    already held, if so.

    A wrong host is refused, not replaced: the caller chose this exact shape, and
    the master's re-check (ordering.py) can only refuse, so one rule holds at both.
    """
    if not isinstance(instance, LlamaRpcInstance):
        return None
    misrouted = endpoints_problem(instance, facts.connections)
    if misrouted is not None:
        return misrouted
    for node, endpoint in instance.rpc_endpoints.items():
        parts = split_endpoint(endpoint)
        if parts is not None and parts[1] in facts.rpc_ports_in_use.get(parts[0], frozenset()):
            return f"donor node {node}'s RPC endpoint {endpoint} is already taken"
    return None
