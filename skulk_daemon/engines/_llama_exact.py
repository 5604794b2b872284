"""Which KV cells are *exact* (bit for bit what a cold decode of the prompt
writes), and the batches that keep them so.

llama.cpp's CPU kernels compute each row of a batch on its own, but pick the
kernel by the batch's shape, and the kernels round differently:

- flash attention runs a tiled GEMM for a batch of at least 64 rows
  (``GGML_FA_TILE_Q``) and a per-row vector loop for a smaller one;
- matrix products with repacked quantized weights (Gemma 3's Q4_K on x86) take
  a batch's rows four at a time through a GEMM and its last ``n % 4`` through
  a GEMV (as does every one-row generation step).

So a cell depends only on the cells before it and on which kernels wrote it.
Every prompt is decoded in batches of at least ``chunk`` tokens (the last may
be any size from ``chunk`` up), each but the last a multiple of ``rows``, from
a start that is a multiple of ``rows``: then every cell but the prompt's last
``len % rows`` comes from the batched kernels, and is exact. A prompt served
from exact cells decodes the rest the same way, so its cells and the logits of
its last token are what a cold decode gives, and temperature-0 output does not
depend on what the cache held. (Measured on Gemma 3 270M with flash attention,
701 tokens: 512 + 189, 100 + 400 + 201, 300 + 401 and 436 + 265 give identical
logits, and the first 188 cells of the 189-token batch are those 512 + 188 +
100 gives; 512 + 188 + 1, a 101-token first batch or a 60-token last one move
the logits by 0.5 to 0.9; ``tests/engines/test_llama_exact_kernels.py`` keeps
checking it. Measured on x86; other CPUs' kernels may pair rows differently,
e.g. aarch64's two-row dot products.)

A reply's cells, written by one-row generation steps, are never exact, nor is
anything decoded after cells that were not. A prompt shorter than ``chunk``
decodes as one batch and has no exact cells.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

EXACT_ROWS: Final = 4
"""Rows a repacked-weight GEMM takes at a time (``ggml-cpu/repack.cpp``)."""
FLASH_ATTENTION_TILE: Final = 64
"""The smallest batch CPU flash attention tiles (``GGML_FA_TILE_Q``): the least
``chunk`` can be, since a smaller batch's rows take the per-row loop."""


class ExactBatching:
    """The batching rule: ``chunk`` is the smallest batch whose cells are exact
    (the flash-attention tile), ``rows`` the granule of exact counts, ``widest``
    the most tokens one batch may hold. With ``widest`` under two chunks some
    spans cannot be split into batches of a chunk or more, and rather than tell
    which, the rule keeps nothing exact."""

    __slots__ = ("chunk", "rows", "widest")

    def __init__(
        self, chunk: int = FLASH_ATTENTION_TILE, rows: int = EXACT_ROWS, *, widest: int
    ) -> None:
        if rows < 1 or chunk < rows or chunk % rows:
            raise ValueError(f"the chunk ({chunk}) must be a positive multiple of {rows} rows")
        if widest < 1:
            raise ValueError(f"a batch must hold a token, got {widest}")
        self.chunk = chunk
        self.rows = rows
        self.widest = widest // rows * rows or widest

    @property
    def enabled(self) -> bool:
        return self.widest >= 2 * self.chunk

    def exact_after(self, total: int) -> int:
        """The exact cells of a ``total``-token prompt decoded from an exact start."""
        if not self.enabled or total < self.chunk:
            return 0
        return total - total % self.rows

    def start(self, exact: int, total: int) -> int:
        """Where a ``total``-token prompt whose first ``exact`` tokens have exact
        cells resumes: a multiple of ``rows`` at most ``exact``, leaving at least
        a chunk to decode (0 for a prompt shorter than that)."""
        if not self.enabled:
            return 0
        return max(0, min(exact, total - self.chunk)) // self.rows * self.rows

    def batches(self, start: int, total: int) -> Iterator[int]:
        """The sizes of the batches decoding ``[start, total)``: up to ``widest``
        tokens, each but the last a multiple of ``rows``, none under a chunk
        unless the whole span is (a prompt shorter than a chunk, or a start the
        rule did not choose)."""
        left = total - start
        chunk, rows, widest = self.chunk, self.rows, self.widest
        while left > widest:
            n = widest if left - widest >= chunk else (left - chunk) // rows * rows
            if n < chunk:  # widest < 2 chunks: the rule is off, any split will do
                n = widest
            yield n
            left -= n
        if left > 0:
            yield left
