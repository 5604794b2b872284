"""The sampled draw's passes over the whole vocabulary, native where it is built.

Each is one pass over a float32 logits vector:

* :func:`exp_sum`: ``sum(exp((logits - shift) * scale))``, the softmax
  normaliser (``shift`` at least the largest logit, ``scale`` the inverse
  temperature);
* :func:`window`: the ids of the logits at or above a floor, ascending;
* :func:`exp_sum_window`: both in the same pass.

``_draw_kernel.c`` computes both with eight-lane vector loops (built by
``hatch_build.py`` at install). Without the library, :data:`NATIVE` is false and
numpy computes the same values: its float32 exp is scalar on hosts without
AVX-512, four to five times slower.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from typing import Final

import numpy as np

log = logging.getLogger(__name__)

LIBRARY: Final = Path(__file__).with_name("_draw_kernel.so")


def _load() -> ctypes.CDLL | None:
    if not LIBRARY.is_file():
        return None
    try:
        lib = ctypes.CDLL(str(LIBRARY))
    except OSError as exc:
        log.warning("the draw kernel %s does not load (%s); numpy is used", LIBRARY.name, exc)
        return None
    lib.skulk_exp_sum.restype = ctypes.c_double
    lib.skulk_exp_sum.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_float,
        ctypes.c_float,
        ctypes.c_float,
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.POINTER(ctypes.c_int64),
    ]
    lib.skulk_window.restype = ctypes.c_int64
    lib.skulk_window.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_float,
        ctypes.c_void_p,
        ctypes.c_int64,
    ]
    return lib


_LIB: Final = _load()
NATIVE: Final = _LIB is not None


def _contiguous(logits: np.ndarray) -> np.ndarray:
    if logits.dtype != np.float32 or not logits.flags.c_contiguous:
        return np.ascontiguousarray(logits, dtype=np.float32)
    return logits


def _ids_buffer(ids: np.ndarray | None, n: int) -> np.ndarray:
    return ids if ids is not None and len(ids) >= n else np.empty(n, dtype=np.int32)


def exp_sum(logits: np.ndarray, shift: float, scale: float = 1.0) -> float:
    """``sum(exp((logits - shift) * scale))`` for ``shift >= logits.max()``, ``scale > 0``."""
    logits = _contiguous(logits)
    if _LIB is not None:
        count = ctypes.c_int64()
        return float(
            _LIB.skulk_exp_sum(
                logits.ctypes.data, len(logits), shift, scale, 0.0, None, 0, ctypes.byref(count)
            )
        )
    weights = np.subtract(logits, np.float32(shift))
    if scale != 1.0:
        np.multiply(weights, np.float32(scale), out=weights)
    np.exp(weights, out=weights)
    return float(weights.sum(dtype=np.float64))


def window(logits: np.ndarray, floor: float, ids: np.ndarray | None = None) -> np.ndarray:
    """The ids of the logits ``>= floor``, ascending (int32). ``ids``: an int32 buffer
    the vocabulary's size to write into (the result is then a view of it)."""
    logits = _contiguous(logits)
    if _LIB is None:
        return np.flatnonzero(logits >= np.float32(floor)).astype(np.int32)
    ids = _ids_buffer(ids, len(logits))
    count = _LIB.skulk_window(logits.ctypes.data, len(logits), floor, ids.ctypes.data, len(ids))
    return ids[:count]


def exp_sum_window(
    logits: np.ndarray, shift: float, scale: float, floor: float, ids: np.ndarray | None = None
) -> tuple[float, np.ndarray]:
    """:func:`exp_sum` and :func:`window` of the same logits, in one pass."""
    logits = _contiguous(logits)
    if _LIB is None:
        return exp_sum(logits, shift, scale), window(logits, floor)
    ids = _ids_buffer(ids, len(logits))
    count = ctypes.c_int64()
    total = _LIB.skulk_exp_sum(
        logits.ctypes.data,
        len(logits),
        shift,
        scale,
        floor,
        ids.ctypes.data,
        len(ids),
        ctypes.byref(count),
    )
    return float(total), ids[: count.value]
