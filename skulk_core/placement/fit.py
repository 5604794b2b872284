"""Per-node memory arithmetic: what one share of a model needs beside its KV window.

A node holds a share when ``weights * RUNTIME_OVERHEAD_FACTOR + KV(window) +
HEADROOM_BYTES`` is strictly less than what the node has available: a share that
exactly equals free memory would thrash, not run.
"""

from __future__ import annotations

import math
from typing import Final

import msgspec

from skulk_core.ids import NodeId
from skulk_core.placement.capacity import MemoryPool

# Runner, activations and engine scratch on top of the raw weight bytes.
RUNTIME_OVERHEAD_FACTOR: Final = 1.10
# Left free on every node a placement touches, for the OS and everything else on it.
HEADROOM_BYTES: Final = 512 * 1024**2
_GB: Final = 1024**3


class Share(msgspec.Struct, frozen=True, kw_only=True):
    """What one node holds of a model: weight bytes and the KV cost of one token of
    one sequence, reserved for ``kv_sequences`` sequences of a whole window each."""

    node_id: NodeId
    weights_bytes: int
    # ``None`` when the card's attention geometry is unknown.
    kv_bytes_per_token: int | None
    start_layer: int
    end_layer: int
    kv_sequences: int = 1


class Site(msgspec.Struct, frozen=True, kw_only=True):
    """A share on the node that would hold it, with that node's pool."""

    share: Share
    pool: MemoryPool
    label: str


def loaded_weights_bytes(share: Share) -> int:
    return math.ceil(share.weights_bytes * RUNTIME_OVERHEAD_FACTOR)


def kv_bytes(share: Share, tokens: int) -> int:
    """The KV cells a window of ``tokens`` reserves, for every sequence."""
    if share.kv_bytes_per_token is None:
        return 0
    return share.kv_bytes_per_token * tokens * share.kv_sequences


def consumption_bytes(share: Share, tokens: int) -> int:
    """Bytes the share takes from its node with ``tokens`` of KV cache."""
    return loaded_weights_bytes(share) + kv_bytes(share, tokens)


def required_bytes(share: Share, tokens: int) -> int:
    return consumption_bytes(share, tokens) + HEADROOM_BYTES


def fits(site: Site, tokens: int) -> bool:
    return required_bytes(site.share, tokens) < site.pool.available_bytes


def max_tokens(site: Site) -> int | None:
    """The largest KV window that fits beside the share's weights (``None``: unknown KV)."""
    if site.share.kv_bytes_per_token is None or site.share.kv_bytes_per_token <= 0:
        return None
    per_token = site.share.kv_bytes_per_token * site.share.kv_sequences
    # Strictly less than available: fixed + per_token * t <= available - 1.
    room = site.pool.available_bytes - loaded_weights_bytes(site.share) - HEADROOM_BYTES - 1
    return max(0, room // per_token)


def gb(value: int) -> str:
    return f"{value / _GB:.2f} GB"


def shortfall_message(site: Site, tokens: int) -> str:
    """``needs X GB (weights … * 1.10 + KV … for N tokens + headroom …) but node … has …``."""
    share, pool = site.share, site.pool
    # The multiplication sign is the spec's notation for this arithmetic.
    parts = f"weights {gb(share.weights_bytes)} × {RUNTIME_OVERHEAD_FACTOR:.2f}"  # noqa: RUF001
    if share.kv_bytes_per_token is None:
        parts += f" + headroom {gb(HEADROOM_BYTES)}; KV cache size unknown"
    else:
        parts += f" + KV {gb(kv_bytes(share, tokens))} for {tokens} tokens"
        if share.kv_sequences > 1:
            parts += f" × {share.kv_sequences} sequences"  # noqa: RUF001
        parts += f" + headroom {gb(HEADROOM_BYTES)}"
    have = f"{gb(pool.available_bytes)} of {pool.kind} available"
    if pool.committed_bytes:
        have += (
            f" ({gb(pool.free_bytes)} free, {gb(pool.committed_bytes)} committed to "
            "instances placed here that have not yet taken it)"
        )
    return f"needs {gb(required_bytes(share, tokens))} ({parts}) but node {site.label} has {have}"
