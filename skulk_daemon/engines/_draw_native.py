"""The sampled draw in C where it is built: :class:`Chain`.

:class:`Chain` is the whole draw for one request's sampling parameters: the
tokens llama.cpp's top-k, top-p, min-p and temperature keep, and the pick, one
call a token (``skulk_chain``/``skulk_draw`` in ``_draw_kernel.c``).

``_draw_kernel.c`` is built by ``hatch_build.py`` at install. Without it,
:data:`NATIVE` is false, :meth:`Chain.create` answers ``None`` and
``_llama_draw`` computes the same in numpy (its float32 exp is scalar on hosts
without AVX-512: four to five times slower).
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from typing import Final

import numpy as np

log = logging.getLogger(__name__)

LIBRARY: Final = Path(__file__).with_name("_draw_kernel.so")


class _ChainParams(ctypes.Structure):
    """``chain_params`` in ``_draw_kernel.c``."""

    _fields_ = [
        ("top_k", ctypes.c_int64),
        ("top_p", ctypes.c_double),
        ("min_p", ctypes.c_double),
        ("temperature", ctypes.c_double),
        ("first_gap", ctypes.c_double),
        ("widest_gap", ctypes.c_double),
        ("sum_tolerance", ctypes.c_double),
    ]


def _load() -> ctypes.CDLL | None:
    if not LIBRARY.is_file():
        return None
    try:
        lib = ctypes.CDLL(str(LIBRARY))
    except OSError as exc:
        log.warning("the draw kernel %s does not load (%s); numpy is used", LIBRARY.name, exc)
        return None
    for name, restype in (("skulk_chain", ctypes.c_int64), ("skulk_draw", ctypes.c_int32)):
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int64,
            ctypes.POINTER(_ChainParams),
            *([ctypes.c_double] if name == "skulk_draw" else []),
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
    return lib


_LIB: Final = _load()
NATIVE: Final = _LIB is not None


def _contiguous(logits: np.ndarray) -> np.ndarray:
    if logits.dtype != np.float32 or not logits.flags.c_contiguous:
        return np.ascontiguousarray(logits, dtype=np.float32)
    return logits


class Chain:
    """One request's chain in C, with its buffers (for one vocabulary size).

    ``top_k`` 0, ``top_p`` 1 and ``min_p`` 0 are off; the gaps and tolerance are
    ``_llama_draw``'s (how far below the peak the first window reaches, past which
    gap the window is the whole vocabulary, and the normaliser's error bound)."""

    __slots__ = ("_addresses", "_ids", "_lib", "_params", "_probs", "_work")

    def __init__(self, lib: ctypes.CDLL, params: _ChainParams) -> None:
        self._lib = lib
        self._params = params
        self._ids = np.empty(0, dtype=np.int32)
        self._probs = np.empty(0, dtype=np.float64)
        self._work = np.empty(0, dtype=np.int64)  # (float logit, int32 id) pairs
        self._addresses = (0, 0, 0)

    @classmethod
    def create(
        cls,
        *,
        top_k: int,
        top_p: float,
        min_p: float,
        temperature: float,
        first_gap: float,
        widest_gap: float,
        sum_tolerance: float,
    ) -> Chain | None:
        """The chain, or ``None`` where the kernel is not built."""
        if _LIB is None:
            return None
        return cls(
            _LIB,
            _ChainParams(top_k, top_p, min_p, temperature, first_gap, widest_gap, sum_tolerance),
        )

    def _buffers(self, n: int) -> tuple[int, int, int]:
        """The addresses of ids, probs and work, sized for ``n`` (kept: reading an
        array's address costs microseconds, a token's budget is a hundred)."""
        if len(self._ids) != n:
            self._ids = np.empty(n, dtype=np.int32)
            self._probs = np.empty(n, dtype=np.float64)
            self._work = np.empty(n, dtype=np.int64)
            self._addresses = (
                self._ids.ctypes.data,
                self._probs.ctypes.data,
                self._work.ctypes.data,
            )
        return self._addresses

    def keep(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The kept tokens by descending logit and their probabilities (copies);
        ``None`` when the chain keeps the whole vocabulary."""
        logits = _contiguous(logits)
        count = self._lib.skulk_chain(
            logits.ctypes.data, len(logits), ctypes.byref(self._params), *self._buffers(len(logits))
        )
        if count == 0:
            return None
        return self._ids[:count].copy(), self._probs[:count].copy()

    def draw(self, logits: np.ndarray, u: float) -> int:
        """The token for the uniform draw ``u`` in [0, 1)."""
        logits = _contiguous(logits)
        return self.draw_at(logits.ctypes.data, len(logits), u)

    def draw_at(self, logits: int | ctypes._Pointer[ctypes.c_float], n: int, u: float) -> int:
        """:meth:`draw` over ``n`` float32 logits at a pointer or address (llama.cpp's
        row, with no array around it)."""
        return int(
            self._lib.skulk_draw(logits, n, ctypes.byref(self._params), u, *self._buffers(n))
        )
