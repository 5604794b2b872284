"""``GET /models/requirements``: what one card needs at a context size.

An estimate only: nothing is reserved, downloaded or placed. The bounds here are
the spec's, enforced by the route and again by :func:`model_requirements`.
"""

from __future__ import annotations

from typing import Final

import msgspec

from skulk_core.models.card_digest import card_digest
from skulk_core.models.cards import ModelCard
from skulk_core.models.context_window import MAX_CONTEXT_TOKENS
from skulk_core.models.listing import card_capabilities
from skulk_core.models.memory_estimate import (
    DISCRETE_GPU_MEMORY_FRACTION,
    UNIFIED_MEMORY_FRACTION,
    estimate_memory_bytes,
)

MAX_MODEL_ID_CHARS: Final = 512
# A requirements read may ask for any budget from one token; placement's floor is higher.
MIN_CONTEXT_TOKENS: Final = 1


class ContextOutOfRangeError(ValueError):
    """The requested context is outside 1..1,048,576 or above the card's limit."""

    def __init__(self, message: str, *, context_limit: int | None) -> None:
        super().__init__(message)
        self.context_limit = context_limit


class ModelRequirements(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    registry_card_id: str | None
    card_digest: str
    context_tokens: int
    context_limit: int | None
    storage_bytes: int
    estimated_memory_bytes: int | None
    discrete_gpu_memory_fraction: float
    unified_memory_fraction: float
    compatible_backends: tuple[str, ...]
    required_capabilities: tuple[str, ...]
    """Every intrinsic capability the card positively evidences (its tasks' and its
    declared ones), sorted: the set an engine's support claims must cover in full for
    a matrix-only match; an empty set never matches."""
    engine_support: tuple[str, ...] = ()
    incomplete_capabilities: tuple[str, ...] = ()
    estimate_only: bool = True


def context_limit(card: ModelCard) -> int | None:
    """The card's advertised context limit; a non-positive value means unknown."""
    limit = card.context_length
    return limit if limit is not None and limit > 0 else None


def model_requirements(card: ModelCard, context_tokens: int) -> ModelRequirements:
    """Capacity requirements of ``card`` at ``context_tokens`` tokens per sequence.

    Raises :class:`ContextOutOfRangeError` outside the spec's bounds or above the card's
    advertised limit; the budget is never silently reduced.
    """
    limit = context_limit(card)
    if not MIN_CONTEXT_TOKENS <= context_tokens <= MAX_CONTEXT_TOKENS:
        raise ContextOutOfRangeError(
            f"context_tokens must be between {MIN_CONTEXT_TOKENS} and {MAX_CONTEXT_TOKENS}",
            context_limit=limit,
        )
    if limit is not None and context_tokens > limit:
        raise ContextOutOfRangeError(
            f"context_tokens {context_tokens} exceeds {card.model_id}'s context limit of {limit}",
            context_limit=limit,
        )
    return ModelRequirements(
        model_id=card.model_id,
        registry_card_id=card.registry_card_id,
        card_digest=card_digest(card),
        context_tokens=context_tokens,
        context_limit=limit,
        # NOTE: ModelCard declares no separate vision projector yet; when it does,
        # its bytes belong in this sum.
        storage_bytes=card.storage_size.in_bytes,
        estimated_memory_bytes=estimate_memory_bytes(card, context_tokens),
        discrete_gpu_memory_fraction=DISCRETE_GPU_MEMORY_FRACTION,
        unified_memory_fraction=UNIFIED_MEMORY_FRACTION,
        compatible_backends=card.compatible_backends,
        required_capabilities=tuple(sorted(card_capabilities(card))),
    )
