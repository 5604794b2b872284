"""The planner: which nodes hold which part of a model, and how much context fits.

Pure: a card, the cluster facts and a request in; a :class:`Placement` or a
:class:`PlacementRefusal` out. The API dry-runs it before it sends the master a
command, so an impossible placement fails at the API with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

from skulk_core.ids import NodeId
from skulk_core.models.cards import ModelCard
from skulk_core.models.context_window import (
    MAX_CONTEXT_TOKENS,
    MIN_CONTEXT_TOKENS,
    context_in_range,
    kv_window,
)
from skulk_core.placement.backends import (
    card_backends,
    common_backend,
    kv_reservation,
    reserves_context_at_load,
)
from skulk_core.placement.capacity import PoolUnknown
from skulk_core.placement.cluster import ClusterFacts
from skulk_core.placement.eligibility import Candidate, Ineligible, screen_nodes
from skulk_core.placement.fit import HEADROOM_BYTES, Site, consumption_bytes
from skulk_core.placement.id_factory import IdFactory
from skulk_core.placement.layers import pipeline_shares, tensor_shares
from skulk_core.placement.results import (
    NO_VALID_PLACEMENT,
    PLACEMENT_INFO_PENDING,
    Placement,
    PlacementRefusal,
)
from skulk_core.placement.rings import candidate_rings
from skulk_core.placement.rpc_pool import assign_endpoints, assign_ring_endpoints
from skulk_core.placement.shapes import Unsupported, mint_instance, minted_meta
from skulk_core.placement.window import Window, choose_window
from skulk_core.state.shards import InstanceMeta, Sharding

# A refusal lists at most this many distinct reasons; the rest are summarised.
MAX_REASONS_IN_MESSAGE: Final = 8


class PlacementRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What ``POST /place_instance`` asks for.

    ``node_ids``: a placement must include every one of these nodes (previews'
    subset filter). ``context_tokens``: honoured exactly up to the maximum.
    """

    sharding: Sharding = Sharding.PIPELINE
    instance_meta: InstanceMeta = InstanceMeta.MLX_RING
    min_nodes: int = 1
    excluded_node_ids: frozenset[NodeId] = frozenset()
    node_ids: frozenset[NodeId] = frozenset()
    context_tokens: int | None = None


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """A ring that holds the model, before ids are minted for it."""

    sharding: Sharding
    instance_meta: InstanceMeta
    backend: str
    sites: tuple[Site, ...]
    window: Window
    # What a launch takes from each node, and the memory it leaves free across the
    # ring (the rank: more is better).
    memory_delta_by_node: dict[NodeId, int]
    score: int
    # LlamaRpc only: where each donor's RPC server will listen.
    rpc_endpoints: dict[NodeId, str] = {}

    @property
    def ring(self) -> tuple[NodeId, ...]:
        return tuple(site.share.node_id for site in self.sites)

    @property
    def reserves_context_at_load(self) -> bool:
        return reserves_context_at_load(self.backend)

    @property
    def kv_bytes_per_token(self) -> int | None:
        per_node = [site.share.kv_bytes_per_token for site in self.sites]
        return None if None in per_node else sum(p for p in per_node if p is not None)


class SizeOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """Every ring of one size: the valid plans (best first) and why the others fail.

    No plans and no failures means no ring of that size was found at all.
    """

    size: int
    plans: tuple[Plan, ...]
    failures: tuple[str, ...]


def request_problem(context_tokens: int | None, min_nodes: int) -> str | None:
    if min_nodes < 1:
        return f"min_nodes must be at least 1, got {min_nodes}"
    if context_tokens is not None and not context_in_range(context_tokens):
        return (
            f"context_tokens must be between {MIN_CONTEXT_TOKENS} and {MAX_CONTEXT_TOKENS}, "
            f"got {context_tokens}"
        )
    return None


def ring_independent_problem(
    card: ModelCard, size: int, sharding: Sharding, requested_meta: InstanceMeta
) -> str | None:
    """Why no ring of ``size`` nodes can hold the card, whichever nodes it has."""
    if sharding == Sharding.TENSOR and not card.supports_tensor:
        return f"{card.model_id} does not support Tensor sharding"
    if sharding == Sharding.PIPELINE and card.n_layers < size:
        return f"{card.model_id} has {card.n_layers} layers, fewer than {size} nodes"
    shapes = [
        minted_meta(backend, requested_meta, size, sharding) for backend in card_backends(card)
    ]
    if all(isinstance(shape, Unsupported) for shape in shapes):
        return "; ".join(dict.fromkeys(s.reason for s in shapes if isinstance(s, Unsupported)))
    return None


def plan_ring(
    card: ModelCard,
    ring: Sequence[Candidate],
    *,
    sharding: Sharding,
    requested_meta: InstanceMeta,
    context_tokens: int | None,
    facts: ClusterFacts,
) -> Plan | str:
    """The plan for exactly these nodes, in this ring order, or why there is none.

    Callers screen :func:`ring_independent_problem` first.
    """
    backend = common_backend(card, [c.backends for c in ring])
    if backend is None:
        labels = ", ".join(c.label for c in ring)
        return f"nodes {labels} share no engine that serves {card.model_id}"
    meta = minted_meta(backend, requested_meta, len(ring), sharding)
    if isinstance(meta, Unsupported):
        return meta.reason
    endpoints: dict[NodeId, str] = {}
    if meta == InstanceMeta.LLAMA_RPC:
        assigned = assign_endpoints(
            [c.node_id for c in ring], facts.connections, facts.rpc_ports_in_use
        )
        if isinstance(assigned, str):
            return assigned
        endpoints = assigned
    elif meta == InstanceMeta.MLX_RING and len(ring) > 1:
        ringed = assign_ring_endpoints(
            [c.node_id for c in ring], facts.connections, facts.rpc_ports_in_use
        )
        if isinstance(ringed, str):
            return ringed
        endpoints = ringed
    pools = []
    for candidate in ring:
        pool = candidate.pool(backend)
        if isinstance(pool, PoolUnknown):
            return f"node {candidate.label}: {pool.reason}"
        pools.append(pool)
    nodes = [c.node_id for c in ring]
    kv = kv_reservation(card, backend, facts.telemetry.get(nodes[0]))
    if sharding == Sharding.PIPELINE:
        # Layers follow the memory each node can give after its headroom.
        shares = pipeline_shares(
            card, nodes, [max(0, p.available_bytes - HEADROOM_BYTES) for p in pools], kv
        )
    else:
        shares = tensor_shares(card, nodes, kv)
    sites = tuple(
        Site(share=share, pool=pool, label=c.label)
        for share, pool, c in zip(shares, pools, ring, strict=True)
    )
    window = choose_window(card, sites, context_tokens, reserves=reserves_context_at_load(backend))
    if isinstance(window, str):
        return window
    tokens = kv_window(window.tokens, reserves=reserves_context_at_load(backend))
    delta = {site.share.node_id: consumption_bytes(site.share, tokens) for site in sites}
    return Plan(
        sharding=sharding,
        instance_meta=meta,
        backend=backend,
        sites=sites,
        window=window,
        memory_delta_by_node=delta,
        score=sum(site.pool.available_bytes - delta[site.share.node_id] for site in sites),
        rpc_endpoints=endpoints,
    )


def evaluate_size(
    card: ModelCard,
    *,
    facts: ClusterFacts,
    candidates: Sequence[Candidate],
    size: int,
    sharding: Sharding,
    requested_meta: InstanceMeta,
    context_tokens: int | None,
    required: frozenset[NodeId] = frozenset(),
) -> SizeOutcome:
    problem = ring_independent_problem(card, size, sharding, requested_meta)
    if problem is not None:
        # With too few candidates, that shortage is the better explanation.
        shown = (problem,) if size <= len(candidates) else ()
        return SizeOutcome(size=size, plans=(), failures=shown)
    by_id = {c.node_id: c for c in candidates}
    plans: list[Plan] = []
    failures: list[str] = []
    for ring in candidate_rings(list(by_id), facts.connections, size, required):
        planned = plan_ring(
            card,
            [by_id[n] for n in ring],
            sharding=sharding,
            requested_meta=requested_meta,
            context_tokens=context_tokens,
            facts=facts,
        )
        if isinstance(planned, Plan):
            plans.append(planned)
        else:
            failures.append(planned)
    plans.sort(key=lambda p: (-p.score, p.ring))
    return SizeOutcome(size=size, plans=tuple(plans), failures=tuple(dict.fromkeys(failures)))


def size_failure(outcome: SizeOutcome, eligible: int) -> str:
    """Why no ring of ``outcome.size`` nodes holds the model."""
    if outcome.failures:
        return _join(outcome.failures)
    if outcome.size > eligible:
        return (
            f"a placement on {outcome.size} nodes needs a connected cycle of {outcome.size} "
            f"nodes but only {eligible} node(s) are eligible"
        )
    return f"no connected cycle of {outcome.size} nodes among the {eligible} eligible"


def refusal(
    card: ModelCard,
    facts: ClusterFacts,
    ineligible: Sequence[Ineligible],
    reasons: Iterable[str],
    required: frozenset[NodeId] = frozenset(),
) -> PlacementRefusal:
    """One refusal naming every reason, pending while a candidate has not reported in."""
    parts = list(dict.fromkeys(reasons))
    if not facts.topology_nodes:
        parts.insert(0, "no node has joined the cluster yet")
    elif (
        ineligible
        and all(i.excluded for i in ineligible)
        and len(ineligible) == len(facts.topology_nodes)
    ):
        parts = [f"the exclusions removed every candidate ({len(ineligible)} node(s) excluded)"]
    known = set(facts.topology_nodes)
    parts += [
        f"node {node} named in node_ids is not in the cluster" for node in sorted(required - known)
    ]
    parts += [f"node {i.label} {i.reason}" for i in ineligible if not i.excluded]
    pending = not facts.topology_nodes or any(i.pending for i in ineligible)
    return PlacementRefusal(
        code=PLACEMENT_INFO_PENDING if pending else NO_VALID_PLACEMENT,
        message=f"cannot place {card.model_id}: {_join(parts)}",
    )


def _join(reasons: Sequence[str]) -> str:
    if len(reasons) <= MAX_REASONS_IN_MESSAGE:
        return "; ".join(reasons)
    shown = "; ".join(reasons[:MAX_REASONS_IN_MESSAGE])
    return f"{shown}; and {len(reasons) - MAX_REASONS_IN_MESSAGE} more"


def to_placement(card: ModelCard, plan: Plan, ids: IdFactory, *, stamp: int | None) -> Placement:
    """Mint the instance for ``plan``, stamped with ``stamp`` tokens of context."""
    instance = mint_instance(
        card.model_id,
        n_layers=card.n_layers,
        meta=plan.instance_meta,
        sharding=plan.sharding,
        shares=[site.share for site in plan.sites],
        context_tokens=stamp,
        ids=ids,
        rpc_endpoints=plan.rpc_endpoints,
    )
    return Placement(
        model_id=card.model_id,
        sharding=plan.sharding,
        instance_meta=plan.instance_meta,
        backend=plan.backend,
        node_ids=plan.ring,
        instance=instance,
        memory_delta_by_node=plan.memory_delta_by_node,
        context_tokens=stamp,
        max_context_tokens=plan.window.max_tokens,
        default_context_tokens=plan.window.default_tokens,
        reserves_context_at_load=plan.reserves_context_at_load,
        kv_bytes_per_token=plan.kv_bytes_per_token,
    )


def place(
    card: ModelCard, facts: ClusterFacts, request: PlacementRequest, ids: IdFactory
) -> Placement | PlacementRefusal:
    """The best placement for ``request``: the fewest nodes (at least ``min_nodes``)
    that hold the model, and among those the ring that leaves the most memory free."""
    problem = request_problem(request.context_tokens, request.min_nodes)
    if problem is not None:
        return PlacementRefusal(code=NO_VALID_PLACEMENT, message=problem)
    candidates, ineligible = screen_nodes(card, facts, request.excluded_node_ids)
    first = max(request.min_nodes, len(request.node_ids))
    reasons: list[str] = []
    for size in range(first, max(first, len(candidates)) + 1):
        outcome = evaluate_size(
            card,
            facts=facts,
            candidates=candidates,
            size=size,
            sharding=request.sharding,
            requested_meta=request.instance_meta,
            context_tokens=request.context_tokens,
            required=request.node_ids,
        )
        if outcome.plans:
            return to_placement(card, outcome.plans[0], ids, stamp=outcome.plans[0].window.tokens)
        # Larger sizes only add to the story when they failed for a reason of their own.
        if candidates and (size == first or outcome.failures):
            reasons.append(size_failure(outcome, len(candidates)))
    return refusal(card, facts, ineligible, reasons, request.node_ids)
