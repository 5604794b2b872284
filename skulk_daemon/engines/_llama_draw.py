"""Sampling without a 262k-entry sort: llama.cpp's chain, computed where it matters.

llama.cpp's sampler chain starts by copying the whole vocabulary into a
candidates array, and its top-p sorts all of it: for Gemma 3's 262,144 tokens
that costs 3-5 ms a token on this machine (measured in ``bench/token_overhead.py``),
as much as a fifth of a decode step. The chain's result, though, only ever
depends on the few tokens near the peak:

* top-k keeps the ``k`` highest logits, which all lie within some distance of
  the peak; so the tokens within a window of the peak that holds ``k`` of
  them hold the top-k;
* top-p keeps the likeliest tokens until their probability mass reaches ``p``;
  once a window of the peak carries mass ``p`` (measured against the whole
  vocabulary's normaliser), the nucleus lies inside it;
* min-p keeps the tokens whose logit is within ``-log(min_p)`` of the peak;
* with none of them, the draw is over the whole vocabulary at the temperature:
  drawn in two stages (the window, or else the rest), which is the same
  distribution.

So :func:`candidates` finds a window that provably contains what the chain
keeps (one vectorised pass over the logits, widened only when it must be),
applies the chain's rules to it in the chain's order (top-k, top-p, min-p, then
the temperature) and :class:`Draw` picks from the result with its own seeded
generator. The kept tokens and their probabilities are llama.cpp's (a test
compares them with llama.cpp's own samplers); the random stream is numpy's, so
a seed reproduces Skulk's draws, not llama.cpp's. Penalties and grammars keep
llama.cpp's chain (see :mod:`_llama_sampling`).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from skulk_core.chat.generation import SamplingParams

_FIRST_WINDOW: Final = 8.0
"""Nats below the peak the first window reaches (measured on Gemma 3: about 100
tokens holding 97 % of the mass); each retry doubles it."""
_WIDEST_WINDOW: Final = 128.0
"""Past this the window is the whole vocabulary."""


def _window(logits: np.ndarray, floor: float) -> np.ndarray:
    """Ids of the tokens whose logit is at least ``floor``."""
    return np.flatnonzero(logits >= floor)


def _sorted(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``ids`` by descending logit (ties: lower id first, as a stable sort gives)."""
    return ids[np.argsort(-logits[ids], kind="stable")]


def _top_k(logits: np.ndarray, peak: float, k: int) -> np.ndarray:
    """The ``k`` highest logits' ids, sorted."""
    gap = _FIRST_WINDOW
    while True:
        ids = _window(logits, peak - gap) if gap <= _WIDEST_WINDOW else np.arange(len(logits))
        if len(ids) >= k:
            break
        gap *= 2.0
    if len(ids) > k:
        ids = ids[np.argpartition(-logits[ids], k - 1)[:k]]
    return _sorted(logits, ids)


def _relative_weights(logits: np.ndarray, peak: float, out: np.ndarray) -> np.ndarray:
    """``exp(logits - peak)`` for the whole vocabulary, written into ``out``
    (one float32 pass, no temporaries: this is the draw's costliest step)."""
    np.subtract(logits, np.float32(peak), out=out)
    np.exp(out, out=out)
    return out


def _nucleus_window(
    logits: np.ndarray, peak: float, top_p: float, scratch: np.ndarray
) -> tuple[np.ndarray, float]:
    """Sorted ids of a window whose mass reaches ``top_p``, and the normaliser
    (the whole vocabulary's ``sum(exp(logit - peak))``)."""
    weights = _relative_weights(logits, peak, scratch)
    total = float(weights.sum())
    gap = _FIRST_WINDOW
    while gap <= _WIDEST_WINDOW:
        ids = np.flatnonzero(weights >= math.exp(-gap))
        if float(weights[ids].sum()) / total >= top_p:
            return _sorted(logits, ids), total
        gap *= 2.0
    return _sorted(logits, np.arange(len(logits))), total


def _cut_top_p(weights: np.ndarray, total: float, top_p: float) -> int:
    """How many of the sorted candidates top-p keeps (at least one): up to and
    including the first whose running mass reaches ``top_p``."""
    reached = np.flatnonzero(np.cumsum(weights) / total >= top_p)
    return int(reached[0]) + 1 if len(reached) else len(weights)


def candidates(
    logits: np.ndarray, params: SamplingParams, scratch: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """The tokens llama.cpp's top-k, top-p, min-p and temperature keep, by
    descending logit, and their probabilities at the temperature; ``None`` when
    the chain keeps the whole vocabulary (no truncation at all: see
    :meth:`Draw.__call__`). ``scratch``: a float32 buffer the vocabulary's size
    to reuse."""
    n_vocab = len(logits)
    peak = float(logits.max())
    top_k = params.top_k if 0 < params.top_k < n_vocab else 0
    top_p = params.top_p if params.top_p < 1.0 else 1.0
    min_p = params.min_p if params.min_p > 0.0 else 0.0
    if top_k:
        ids = _top_k(logits, peak, top_k)
        if top_p < 1.0:
            weights = np.exp(logits[ids].astype(np.float64) - peak)
            ids = ids[: _cut_top_p(weights, float(weights.sum()), top_p)]
    elif top_p < 1.0:
        if scratch is None or len(scratch) != n_vocab:
            scratch = np.empty(n_vocab, dtype=np.float32)
        ids, total = _nucleus_window(logits, peak, top_p, scratch)
        weights = np.exp(logits[ids].astype(np.float64) - peak)
        ids = ids[: _cut_top_p(weights, total, top_p)]
    elif min_p:
        ids = _sorted(logits, _window(logits, peak + math.log(min_p)))
    else:
        return None
    if min_p and len(ids) > 1:
        kept = logits[ids] >= peak + math.log(min_p)
        ids = ids[kept] if kept.any() else ids[:1]
    scaled = np.exp((logits[ids].astype(np.float64) - peak) / params.temperature)
    return ids, scaled / scaled.sum()


class Draw:
    """One sequence's sampler for the plain chain (no penalties, no grammar,
    temperature above 0), seeded like the request."""

    __slots__ = ("_params", "_rng", "_scratch")

    def __init__(self, params: SamplingParams) -> None:
        self._params = params
        self._rng = np.random.default_rng(None if params.seed is None else params.seed & 0xFFFFFFFF)
        self._scratch = np.empty(0, dtype=np.float32)

    def __call__(self, logits: np.ndarray) -> int:
        if len(self._scratch) != len(logits):
            self._scratch = np.empty(len(logits), dtype=np.float32)
        kept = candidates(logits, self._params, self._scratch)
        u = float(self._rng.random())
        if kept is not None:
            ids, probs = kept
            return int(
                ids[min(int(np.searchsorted(np.cumsum(probs), u, side="right")), len(ids) - 1)]
            )
        # The whole vocabulary at the temperature, in two stages: the tokens near
        # the peak (nearly all the mass), else the rest.
        peak = float(logits.max())
        weights = np.subtract(logits, np.float32(peak), out=self._scratch)
        np.multiply(weights, np.float32(1.0 / self._params.temperature), out=weights)
        np.exp(weights, out=weights)
        total = float(weights.sum())
        floor = math.exp(-_FIRST_WINDOW)
        near = np.flatnonzero(weights >= floor)
        near_mass = float(weights[near].sum())
        target = u * total
        if target < near_mass or len(near) == len(logits):
            pool = near
        else:
            target -= near_mass
            pool = np.flatnonzero(weights < floor)
        running = np.cumsum(weights[pool], dtype=np.float64)
        return int(pool[min(int(np.searchsorted(running, target, side="right")), len(pool) - 1)])


def takes_draw(params: SamplingParams) -> bool:
    """Whether :class:`Draw` samples this request (else llama.cpp's chain does)."""
    return (
        params.temperature > 0.0
        and params.grammar is None
        and params.repetition_penalty == 1.0
        and params.frequency_penalty == 0.0
        and params.presence_penalty == 0.0
    )
