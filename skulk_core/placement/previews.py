"""``GET /instance/previews``: every combination of sharding, instance kind and node
count, placed or refused with the reason, plus the other hosts that would also do."""

from __future__ import annotations

import msgspec

from skulk_core.ids import ModelId, NodeId
from skulk_core.models.card_digest import card_digest
from skulk_core.models.cards import ModelCard
from skulk_core.models.memory_estimate import card_kv_bytes_per_token
from skulk_core.placement.backends import card_backends, reserves_context_at_load
from skulk_core.placement.cluster import ClusterFacts
from skulk_core.placement.eligibility import screen_nodes
from skulk_core.placement.id_factory import IdFactory
from skulk_core.placement.planner import (
    Plan,
    SizeOutcome,
    evaluate_size,
    refusal,
    request_problem,
    size_failure,
    to_placement,
)
from skulk_core.placement.results import NO_VALID_PLACEMENT
from skulk_core.state.shards import Instance, InstanceMeta, Sharding


class PreviewQuery(msgspec.Struct, frozen=True, kw_only=True):
    """``None`` for ``sharding``/``instance_meta`` previews every value."""

    sharding: Sharding | None = None
    instance_meta: InstanceMeta | None = None
    min_nodes: int = 1
    node_ids: frozenset[NodeId] = frozenset()
    excluded_node_ids: frozenset[NodeId] = frozenset()
    context_tokens: int | None = None


class PlacementPreview(msgspec.Struct, frozen=True, kw_only=True):
    """One previewed combination: a placement (``instance``) or a refusal (``error``).

    ``instance_meta`` is the kind placement would mint, which may differ from the one
    enumerated (one node is always ``MlxRing``). ``instance.contextTokenLimit`` is the
    largest window the placement holds (or the requested one);
    ``memory_delta_by_node`` is what ``POST /place_instance`` with the same request
    would take from each node (bytes), i.e. at ``default_context_tokens`` unless
    ``context_tokens`` was given. Previews reserve nothing.
    """

    model_id: ModelId
    sharding: Sharding
    instance_meta: InstanceMeta
    node_count: int
    node_ids: tuple[NodeId, ...] = ()
    backend: str | None = None
    instance: Instance | None = None
    error: str | None = None
    error_code: str | None = None
    memory_delta_by_node: dict[NodeId, int] = {}
    max_context_tokens: int | None = None
    default_context_tokens: int | None = None
    reserves_context_at_load: bool = False
    kv_bytes_per_token: int | None = None
    card_digest: str | None = None
    alternative: bool = False


def _valid(
    card: ModelCard,
    plan: Plan,
    query: PreviewQuery,
    ids: IdFactory,
    *,
    digest: str,
    alternative: bool,
) -> PlacementPreview:
    window = plan.window
    stamp = query.context_tokens
    if stamp is None:
        stamp = window.max_tokens if window.max_tokens is not None else window.tokens
    placement = to_placement(card, plan, ids, stamp=stamp)
    # The launch a client would make from this preview commits the default window
    # (or the requested one), not the maximum stamped on the instance.
    return PlacementPreview(
        model_id=card.model_id,
        sharding=plan.sharding,
        instance_meta=plan.instance_meta,
        node_count=len(plan.sites),
        node_ids=plan.ring,
        backend=plan.backend,
        instance=placement.instance,
        memory_delta_by_node=placement.memory_delta_by_node,
        max_context_tokens=placement.max_context_tokens,
        default_context_tokens=placement.default_context_tokens,
        reserves_context_at_load=placement.reserves_context_at_load,
        kv_bytes_per_token=placement.kv_bytes_per_token,
        card_digest=digest,
        alternative=alternative,
    )


def _invalid(
    card: ModelCard,
    *,
    sharding: Sharding,
    meta: InstanceMeta,
    size: int,
    code: str,
    message: str,
) -> PlacementPreview:
    return PlacementPreview(
        model_id=card.model_id,
        sharding=sharding,
        instance_meta=meta,
        node_count=size,
        error=message,
        error_code=code,
        reserves_context_at_load=reserves_context_at_load(card_backends(card)[0]),
        kv_bytes_per_token=card_kv_bytes_per_token(card),
    )


def preview_placements(
    card: ModelCard, facts: ClusterFacts, query: PreviewQuery, ids: IdFactory
) -> list[PlacementPreview]:
    """Every combination the query allows, in order: sharding, instance kind, node count.

    Combinations that mint the same placement (one node is ``MlxRing`` whatever was
    enumerated) or fail for the same reason appear once. For one-node shapes the
    ranked pick comes first and every other host that passes admission follows,
    marked ``alternative``, unless ``node_ids`` already constrains the hosts.
    """
    shardings = list(Sharding) if query.sharding is None else [query.sharding]
    metas = list(InstanceMeta) if query.instance_meta is None else [query.instance_meta]
    problem = request_problem(query.context_tokens, query.min_nodes)
    if problem is not None:
        return [
            _invalid(
                card,
                sharding=s,
                meta=m,
                size=max(1, query.min_nodes),
                code=NO_VALID_PLACEMENT,
                message=problem,
            )
            for s in shardings
            for m in metas
        ]
    candidates, ineligible = screen_nodes(card, facts, query.excluded_node_ids)
    first = max(query.min_nodes, len(query.node_ids))
    previews: list[PlacementPreview] = []
    seen: set[tuple[object, ...]] = set()
    outcomes: dict[tuple[Sharding, int, InstanceMeta | None], SizeOutcome] = {}
    digest = card_digest(card)
    for sharding in shardings:
        for meta in metas:
            for size in range(first, max(first, len(candidates)) + 1):
                # One node mints MlxRing whatever was enumerated: plan it once per sharding.
                memo_key = (sharding, size, meta if size > 1 else None)
                outcome = outcomes.get(memo_key)
                if outcome is None:
                    outcome = outcomes[memo_key] = evaluate_size(
                        card,
                        facts=facts,
                        candidates=candidates,
                        size=size,
                        sharding=sharding,
                        requested_meta=meta,
                        context_tokens=query.context_tokens,
                        required=query.node_ids,
                    )
                if not outcome.plans:
                    reasons = [size_failure(outcome, len(candidates))] if candidates else []
                    refused = refusal(card, facts, ineligible, reasons, query.node_ids)
                    key: tuple[object, ...] = ("refused", sharding, size, refused.message)
                    if key not in seen:
                        seen.add(key)
                        previews.append(
                            _invalid(
                                card,
                                sharding=sharding,
                                meta=meta,
                                size=size,
                                code=refused.code,
                                message=refused.message,
                            )
                        )
                    continue
                best, *others = outcome.plans
                ranked = [(best, False)]
                if size == 1 and not query.node_ids:
                    ranked += [(plan, True) for plan in others]
                for plan, alternative in ranked:
                    key = ("placed", sharding, plan.instance_meta, plan.ring)
                    if key not in seen:
                        seen.add(key)
                        previews.append(
                            _valid(card, plan, query, ids, digest=digest, alternative=alternative)
                        )
    return previews
