"""Context windows: the bounds a request may ask for and the default a launch stamps."""

from __future__ import annotations

from typing import Final

from skulk_core.models.cards import ModelCard

# ``context_tokens`` on a placement request, per the spec: 256 to 1,048,576 tokens.
MIN_CONTEXT_TOKENS: Final = 256
MAX_CONTEXT_TOKENS: Final = 1_048_576
# What a launch without ``context_tokens`` stamps on engines that reserve the window
# at load (llama.cpp); the memory fit is also judged at this window.
DEFAULT_CONTEXT_TOKENS: Final = 8192


def card_context_limit(card: ModelCard) -> int | None:
    """The card's advertised context length; a non-positive value means unknown."""
    limit = card.context_length
    return limit if limit is not None and limit > 0 else None


def judged_window(card: ModelCard) -> int:
    """The window a fit is judged at when the request names none."""
    limit = card_context_limit(card)
    return DEFAULT_CONTEXT_TOKENS if limit is None else min(DEFAULT_CONTEXT_TOKENS, limit)


def kv_window(tokens: int | None, *, reserves: bool) -> int:
    """Tokens of KV cache a placement commits on a node.

    An engine that reserves at load commits its whole stamped window. One that grows
    its cache per request (MLX) is counted at the default window, so a placement
    stamped with a huge maximum does not lock every other model out.
    """
    if tokens is None:
        return DEFAULT_CONTEXT_TOKENS
    return tokens if reserves else min(tokens, DEFAULT_CONTEXT_TOKENS)


def context_in_range(tokens: int) -> bool:
    return MIN_CONTEXT_TOKENS <= tokens <= MAX_CONTEXT_TOKENS
