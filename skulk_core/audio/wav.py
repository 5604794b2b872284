"""RIFF/WAVE framing of mono signed 16-bit little-endian PCM."""

from __future__ import annotations

import struct
from typing import Final

from skulk_core.audio.formats import PCM_CHANNELS

_BITS: Final = 16
_HEADER: Final = struct.Struct("<4sI4s4sIHHIIHH4sI")
WAV_HEADER_BYTES: Final = _HEADER.size


def wav_bytes(pcm: bytes, sample_rate: int, channels: int = PCM_CHANNELS) -> bytes:
    """A complete WAV file holding ``pcm`` (16-bit little-endian samples)."""
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    if len(pcm) % (2 * channels):
        raise ValueError("PCM data is not a whole number of 16-bit frames")
    block_align = channels * _BITS // 8
    header = _HEADER.pack(
        b"RIFF",
        36 + len(pcm),
        b"WAVE",
        b"fmt ",
        16,
        1,  # PCM
        channels,
        sample_rate,
        sample_rate * block_align,
        block_align,
        _BITS,
        b"data",
        len(pcm),
    )
    return header + pcm
