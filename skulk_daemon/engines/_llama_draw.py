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
keeps (one pass over the logits, widened only when it must be),
applies the chain's rules to it in the chain's order (top-k, top-p, min-p, then
the temperature) and :class:`Draw` picks from the result with its own seeded
generator. The kept tokens and their probabilities are llama.cpp's (a test
compares them with llama.cpp's own samplers); the random stream is numpy's, so
a seed reproduces Skulk's draws, not llama.cpp's. Penalties and grammars keep
llama.cpp's chain (see :mod:`_llama_sampling`).

Where the C kernel is built, all of it (the chain and the pick) is one call a
token into :class:`_draw_native.Chain`; the numpy code here is the fallback and
the reference the tests hold both to.
"""

from __future__ import annotations

import ctypes
import math
from typing import Final

import numpy as np

from skulk_core.chat.generation import SamplingParams
from skulk_daemon.engines import _draw_native

_FIRST_WINDOW: Final = 8.0
"""Nats below the peak the first window reaches (measured on Gemma 3: about 100
tokens holding 97 % of the mass); each retry doubles it."""
_WIDEST_WINDOW: Final = 128.0
"""Past this the window is the whole vocabulary."""
_SUM_TOLERANCE: Final = 1e-6
"""The normaliser's relative error bound (float32 terms: the kernel measures within
3.2e-7 of a float64 sum on Gemma 3's logits; ``test_llama_draw`` holds it to this).
Top-p counts against the normaliser raised by it, so its nucleus never falls short."""


def _window(logits: np.ndarray, floor: float) -> np.ndarray:
    """Ids of the tokens whose logit is at least ``floor``, ascending."""
    return np.flatnonzero(logits >= np.float32(floor))


def _exp_sum(logits: np.ndarray, peak: float, scale: float = 1.0) -> float:
    """``sum(exp((logits - peak) * scale))``: the softmax normaliser at the inverse
    temperature ``scale``, float32 terms summed in float64 (as the kernel does)."""
    weights = np.subtract(logits, np.float32(peak), dtype=np.float32)
    if scale != 1.0:
        np.multiply(weights, np.float32(scale), out=weights)
    np.exp(weights, out=weights)
    return float(weights.sum(dtype=np.float64))


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


def _nucleus_window(
    logits: np.ndarray, peak: float, top_p: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """Ids of a window whose mass reaches ``top_p`` by descending logit, their
    weights ``exp(logit - peak)``, and the normaliser (the whole vocabulary's
    ``sum(exp(logit - peak))``, the draw's costliest pass, raised by its error bound)."""
    total = _exp_sum(logits, peak) * (1.0 + _SUM_TOLERANCE)
    ids = _window(logits, peak - _FIRST_WINDOW)
    gap = _FIRST_WINDOW
    while True:
        weights = np.exp(logits[ids].astype(np.float64) - peak)
        if float(weights.sum()) / total >= top_p:
            break
        gap *= 2.0
        if gap > _WIDEST_WINDOW:
            ids = np.arange(len(logits))
            weights = np.exp(logits.astype(np.float64) - peak)
            break
        ids = _window(logits, peak - gap)
    order = np.argsort(-logits[ids], kind="stable")
    return ids[order], weights[order], total


def _cut_top_p(weights: np.ndarray, total: float, top_p: float) -> int:
    """How many of the sorted candidates top-p keeps (at least one): up to and
    including the first whose running mass reaches ``top_p``."""
    reached = np.flatnonzero(np.cumsum(weights) / total >= top_p)
    return int(reached[0]) + 1 if len(reached) else len(weights)


def _native_chain(params: SamplingParams) -> _draw_native.Chain | None:
    return _draw_native.Chain.create(
        top_k=max(params.top_k, 0),
        top_p=min(params.top_p, 1.0),
        min_p=max(params.min_p, 0.0),
        temperature=params.temperature,
        first_gap=_FIRST_WINDOW,
        widest_gap=_WIDEST_WINDOW,
        sum_tolerance=_SUM_TOLERANCE,
    )


def candidates(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray] | None:
    """The tokens llama.cpp's top-k, top-p, min-p and temperature keep, by
    descending logit, and their probabilities at the temperature; ``None`` when
    the chain keeps the whole vocabulary (no truncation at all: see
    :meth:`Draw.__call__`)."""
    native = _native_chain(params)
    if native is not None:
        return native.keep(logits)
    return _numpy_candidates(logits, params)


def _numpy_candidates(
    logits: np.ndarray, params: SamplingParams
) -> tuple[np.ndarray, np.ndarray] | None:
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
        ids, weights, total = _nucleus_window(logits, peak, top_p)
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

    __slots__ = ("_native", "_params", "_rng")

    def __init__(self, params: SamplingParams) -> None:
        self._params = params
        self._rng = np.random.default_rng(None if params.seed is None else params.seed & 0xFFFFFFFF)
        self._native = _native_chain(params)

    def at(self, address: int, n_vocab: int) -> int:
        """The draw over llama.cpp's logits row at ``address`` (``n_vocab`` floats)."""
        if self._native is not None:
            return self._native.draw_at(address, n_vocab, float(self._rng.random()))
        row = (ctypes.c_float * n_vocab).from_address(address)
        return self(np.ctypeslib.as_array(row))

    def __call__(self, logits: np.ndarray) -> int:
        u = float(self._rng.random())
        if self._native is not None:
            return self._native.draw(logits, u)
        kept = _numpy_candidates(logits, self._params)
        if kept is not None:
            ids, probs = kept
            return int(
                ids[min(int(np.searchsorted(np.cumsum(probs), u, side="right")), len(ids) - 1)]
            )
        # The whole vocabulary at the temperature, in two stages: the tokens near
        # the peak (nearly all the mass), else the rest.
        peak = float(logits.max())
        inverse = 1.0 / self._params.temperature
        floor = peak - _FIRST_WINDOW * self._params.temperature
        total, near = _exp_sum(logits, peak, inverse), _window(logits, floor)
        near_weights = np.exp((logits[near].astype(np.float64) - peak) * inverse)
        running = np.cumsum(near_weights)
        target = u * total
        if target < running[-1] or len(near) == len(logits):
            pool = near
        else:
            # The rare second stage (a high temperature puts mass far from the peak).
            target -= running[-1]
            pool = np.flatnonzero(logits < np.float32(floor))
            running = np.cumsum(np.exp((logits[pool].astype(np.float64) - peak) * inverse))
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
