"""Choosing the context window a placement holds and the one it is stamped with.

The largest window is ``min(card.context_length, KV tokens that fit beside the
weights on every node)``. A requested window is honoured exactly up to that
maximum and refused above it, never silently lowered; only an exact instance
(``POST /instance``) has an inflated window lowered to the ceiling, as the spec says.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from skulk_core.models.cards import ModelCard
from skulk_core.models.context_window import (
    DEFAULT_CONTEXT_TOKENS,
    MAX_CONTEXT_TOKENS,
    MIN_CONTEXT_TOKENS,
    card_context_limit,
    judged_window,
    kv_window,
)
from skulk_core.placement.fit import Site, fits, gb, max_tokens, shortfall_message


class Window(msgspec.Struct, frozen=True, kw_only=True):
    max_tokens: int | None
    default_tokens: int | None
    # What the instance is stamped with: the request's window, else the default.
    tokens: int | None


def _ceiling(card: ModelCard, sites: Sequence[Site]) -> tuple[int | None, str]:
    """The largest window and what bounds it, for the refusal message."""
    limit = card_context_limit(card)
    per_site = [(t, s) for s in sites if (t := max_tokens(s)) is not None]
    bounds: list[tuple[int, str]] = [(MAX_CONTEXT_TOKENS, "the largest window Skulk places")]
    if limit is not None:
        bounds.append((limit, f"{card.model_id}'s context limit"))
    if per_site:
        tokens, site = min(per_site, key=lambda item: item[0])
        why = f"what fits beside the weights on node {site.label}"
        if site.pool.committed_bytes:
            why += (
                f", {gb(site.pool.committed_bytes)} of whose {site.pool.kind} is committed "
                "to instances placed there that have not yet taken it"
            )
        bounds.append((tokens, why))
    if limit is None and not per_site:
        return None, "unknown"
    tokens, why = min(bounds, key=lambda item: item[0])
    return tokens, why


def _floor(card: ModelCard) -> int:
    """The smallest window worth placing (the card's own limit, if that is smaller)."""
    limit = card_context_limit(card)
    return MIN_CONTEXT_TOKENS if limit is None else min(MIN_CONTEXT_TOKENS, limit)


def _too_small(sites: Sequence[Site], floor: int) -> list[Site]:
    """Sites that cannot hold their weights plus a ``floor``-token window."""
    return [s for s in sites if not fits(s, floor if s.share.kv_bytes_per_token else 0)]


def choose_window(
    card: ModelCard,
    sites: Sequence[Site],
    requested: int | None,
    *,
    reserves: bool,
    lower_to_ceiling: bool = False,
) -> Window | str:
    """The window for these sites, or the reason (with the GB arithmetic) there is none.

    ``requested`` above the maximum is refused naming the maximum, unless
    ``lower_to_ceiling`` (an exact instance's upper bound), which lowers it instead.
    """
    too_small = _too_small(sites, _floor(card))
    if too_small:
        # The arithmetic is shown at the window the caller asked about, else the default
        # (an exact instance's window is only an upper bound, so never above that).
        judge = judged_window(card)
        if requested is not None:
            judge = min(requested, judge) if lower_to_ceiling else requested
        return "; ".join(shortfall_message(s, judge) for s in too_small)
    ceiling, why = _ceiling(card, sites)
    default: int | None
    if reserves:
        default = (
            DEFAULT_CONTEXT_TOKENS if ceiling is None else min(DEFAULT_CONTEXT_TOKENS, ceiling)
        )
    else:
        default = ceiling
    tokens: int | None = default
    if requested is not None:
        tokens = requested
        if ceiling is not None and requested > ceiling:
            if not lower_to_ceiling:
                return (
                    f"context_tokens {requested} exceeds the largest window this placement "
                    f"holds: {ceiling} tokens ({why})"
                )
            tokens = ceiling
    # NOTE: this cannot fail while the ceiling comes from the same arithmetic; it stays
    # so that a change there can never let an oversubscribing window through.
    committed = kv_window(tokens, reserves=reserves)
    failing = [shortfall_message(s, committed) for s in sites if not fits(s, committed)]
    if failing:
        return "; ".join(failing)
    return Window(max_tokens=ceiling, default_tokens=default, tokens=tokens)
