"""Incremental rational resampling of mono PCM16 (pure numpy, no codec).

A :class:`Resampler` converts audio that arrives in pieces of any size: it keeps the
filter's history between calls, so how the input was split never changes the output
(the same samples come out, in the same order, as one call over the whole input). A
windowed-sinc polyphase filter (Kaiser window) band-limits to 95 % of the lower
Nyquist frequency before decimation. Used by the realtime edge (24 kHz → 16 kHz for
WebRTC VAD) and by ``stt.realtime`` (any 8-96 kHz input → Whisper's 16 kHz).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

TAPS_PER_PHASE: Final = 24
KAISER_BETA: Final = 8.0
BAND: Final = 0.95
PCM16_SCALE: Final = 32768.0


def pcm16_to_float(pcm: bytes) -> npt.NDArray[np.float32]:
    """Little-endian signed 16-bit samples as float32 in [-1, 1)."""
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / PCM16_SCALE


def float_to_pcm16(samples: npt.NDArray[np.float32]) -> bytes:
    scaled = np.clip(np.rint(samples * PCM16_SCALE), -32768, 32767)
    return bytes(scaled.astype("<i2").tobytes())


class Resampler:
    """``source_rate`` → ``target_rate`` over a stream of float32 (or PCM16) pieces."""

    def __init__(self, source_rate: int, target_rate: int) -> None:
        if source_rate <= 0 or target_rate <= 0:
            raise ValueError("sample rates must be positive")
        g = math.gcd(source_rate, target_rate)
        self.up = target_rate // g
        self.down = source_rate // g
        self.identity = self.up == self.down
        taps = TAPS_PER_PHASE * max(1, math.ceil(self.down / self.up))
        length = taps * self.up
        cutoff = BAND * min(1.0 / self.up, 1.0 / self.down)
        centre = (length - 1) / 2
        n = np.arange(length, dtype=np.float64) - centre
        prototype = cutoff * np.sinc(cutoff * n) * np.kaiser(length, KAISER_BETA) * self.up
        # H[p, t] = h[p + up * t]: the taps that produce an output of phase p.
        self._bank = prototype.reshape(taps, self.up).T.astype(np.float32)
        self._taps = taps
        self._history = np.zeros(taps - 1, dtype=np.float32)
        self._received = 0
        self._next_out = 0

    def feed(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The output samples this input completes (possibly none)."""
        if self.identity:
            return samples.astype(np.float32, copy=False)
        buffer = np.concatenate([self._history, samples.astype(np.float32, copy=False)])
        buffer_start = self._received - len(self._history)
        self._received += len(samples)
        # Output k needs input up to index (k * down) // up.
        last = (self._received * self.up - 1) // self.down  # largest k with input
        count = last + 1 - self._next_out
        self._history = buffer[-(self._taps - 1) :] if self._taps > 1 else buffer[:0]
        if count <= 0:
            return np.zeros(0, dtype=np.float32)
        ks = np.arange(self._next_out, last + 1, dtype=np.int64)
        self._next_out = last + 1
        positions = ks * self.down
        phases = positions % self.up
        newest = positions // self.up - buffer_start
        index = newest[:, None] - np.arange(self._taps, dtype=np.int64)[None, :]
        # Before the first input sample the signal is silence (the zero history).
        index = np.maximum(index, 0)
        out: npt.NDArray[np.float32] = np.einsum(
            "kt,kt->k", self._bank[phases], buffer[index]
        ).astype(np.float32)
        return out

    def feed_pcm16(self, pcm: bytes) -> bytes:
        if self.identity:
            return pcm
        return float_to_pcm16(self.feed(pcm16_to_float(pcm)))
