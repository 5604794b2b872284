"""The types a llama.cpp runner's KV cells can have, and what a cell costs in each.

``inference.kv_cache_backend`` (or ``SKULK_KV_CACHE_BACKEND``) picks one per node; the
node advertises it in its telemetry, and placement sizes a llama.cpp placement's KV
window at the type of the node that serves it (an RPC pool's driver, whose context
holds every layer's cells, the donors' included).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

LLAMA_CPP_SEQUENCES: Final = 4
"""The sequences (slots) a llama.cpp text runner serves at once; its context holds a
whole window of cells for each (``n_ctx = window x slots``, a non-unified cache)."""


class KvCacheBackend(StrEnum):
    """The type of a llama.cpp runner's KV cells (``default``: llama.cpp's, F16)."""

    DEFAULT = "default"
    F16 = "f16"
    Q8_0 = "q8_0"
    Q4_0 = "q4_0"

    @property
    def quantized(self) -> bool:
        """llama.cpp keeps a quantized V cache only with flash attention."""
        return self in (KvCacheBackend.Q8_0, KvCacheBackend.Q4_0)

    @property
    def block(self) -> tuple[int, int]:
        """``(values, bytes)`` of one block in ggml's layout: F16 two bytes a value;
        Q8_0 32 int8 and a 2-byte scale; Q4_0 32 nibbles and a 2-byte scale."""
        match self:
            case KvCacheBackend.DEFAULT | KvCacheBackend.F16:
                return (1, 2)
            case KvCacheBackend.Q8_0:
                return (32, 34)
            case KvCacheBackend.Q4_0:
                return (32, 18)


def row_bytes(kv_cache: KvCacheBackend, elements: int) -> int:
    """Bytes one row of ``elements`` KV values takes (whole blocks)."""
    values, size = kv_cache.block
    return -(-elements // values) * size
