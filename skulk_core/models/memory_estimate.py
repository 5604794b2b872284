"""How much memory a model needs at a context size: weights plus the KV cache.

Pure arithmetic over a card's declared geometry, shared by ``GET
/models/requirements`` and the placement planner. An estimate, not a measured
load: engines add scratch buffers on top. The KV cache is F16 (llama.cpp's and MLX's
default) unless a llama.cpp node says otherwise (:mod:`skulk_core.models.kv_cache`).
"""

from __future__ import annotations

from typing import Final

import msgspec

from skulk_core.models.cards import ModelCard, ModelTask
from skulk_core.models.kv_cache import KvCacheBackend, row_bytes

# Keys and values: two tensors per layer.
KV_TENSORS_PER_LAYER: Final = 2

# Usable share of a device's memory for one model. Discrete GPUs keep a margin for
# the driver and compute buffers; macOS caps the GPU working set at about three
# quarters of unified RAM by default.
DISCRETE_GPU_MEMORY_FRACTION: Final = 0.9
UNIFIED_MEMORY_FRACTION: Final = 0.75


class KvGeometry(msgspec.Struct, frozen=True, kw_only=True):
    """The attention shape that sizes the KV cache."""

    n_layers: int
    kv_heads: int
    head_dim: int


def kv_bytes_per_token(
    geometry: KvGeometry, *, kv_cache: KvCacheBackend = KvCacheBackend.DEFAULT
) -> int:
    """Bytes of KV cache one token of context costs across all layers, its cells of
    type ``kv_cache`` (each layer's keys and values a row of ``kv_heads * head_dim``)."""
    row = row_bytes(kv_cache, geometry.kv_heads * geometry.head_dim)
    return KV_TENSORS_PER_LAYER * geometry.n_layers * row


def kv_geometry(card: ModelCard) -> KvGeometry | None:
    """The card's KV geometry, or ``None`` when any part of it is unknown.

    The head dimension is the declared one, else ``hidden_size / num_attention_heads``
    when both are declared and divide evenly; it is never assumed.
    """
    head_dim = card.head_dim
    if head_dim is None:
        head_dim = _derived_head_dim(card.hidden_size, card.num_attention_heads)
    kv_heads = card.num_key_value_heads
    if head_dim is None or kv_heads is None or min(head_dim, kv_heads, card.n_layers) < 1:
        return None
    return KvGeometry(n_layers=card.n_layers, kv_heads=kv_heads, head_dim=head_dim)


def _derived_head_dim(hidden: int | None, heads: int | None) -> int | None:
    if hidden is None or heads is None or hidden < 1 or heads < 1 or hidden % heads:
        return None
    return hidden // heads


def card_kv_bytes_per_token(card: ModelCard) -> int | None:
    geometry = kv_geometry(card)
    return None if geometry is None else kv_bytes_per_token(geometry)


def estimate_memory_bytes(card: ModelCard, context_tokens: int) -> int | None:
    """Whole-model footprint at ``context_tokens``: weights plus the KV cache.

    ``None`` for models that do not generate text (no KV cache to size this way) and
    for cards without KV geometry.
    """
    if ModelTask.TEXT_GENERATION not in card.tasks:
        return None
    per_token = card_kv_bytes_per_token(card)
    if per_token is None:
        return None
    return card.storage_size.in_bytes + per_token * context_tokens
