"""The seeded synthetic music engine (``SKULK_TEST_MUSIC_ENGINE=1``, the bundled
``foxlight/test-music`` card): no real CPU text-to-music engine installs from PyPI here
without a multi-gigabyte download, so this engine stands behind the same seam a real
one would (``runner/media_mode.py``) and writes a real WAV through the whole pipeline.

The piece is a seeded arpeggio (the prompt and seed choose the key and the pattern),
16-bit stereo PCM, rendered in one-second blocks so progress and cancellation land
between blocks."""

from __future__ import annotations

import hashlib
import time
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

import numpy as np

from skulk_core.media.music_wire import MUSIC_FILE, MusicSpec
from skulk_daemon.engines.test_media_format import MUSIC_CHANNELS as CHANNELS
from skulk_daemon.engines.test_media_format import MUSIC_SAMPLE_RATE as SAMPLE_RATE

ENGINE_NAME: Final = "skulk-test-music"
BLOCK_DELAY_ENV: Final = "SKULK_TEST_MUSIC_BLOCK_SECONDS"
"""Optional seconds each one-second block takes at least (for tests that cancel)."""

Stage = Literal["encoding", "sampling", "decoding", "muxing"]
Report = Callable[[int, Stage], None]


class ComposeCancelled(Exception):
    pass


def compose(
    spec: MusicSpec,
    output_dir: Path,
    report: Report,
    cancelled: Callable[[], bool],
    *,
    block_delay: float = 0.0,
) -> Path:
    """Write ``music.wav`` (exactly ``spec.seconds`` long) into ``output_dir``."""
    digest = hashlib.sha256(f"{spec.seed}\0{spec.prompt}\0{spec.lyrics or ''}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    report(2, "encoding")
    root = 110.0 * 2 ** (rng.integers(0, 12) / 12)
    pattern = rng.choice([0, 3, 4, 7, 10, 12], size=8)
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / MUSIC_FILE
    note_len = SAMPLE_RATE // 4
    with wave.open(str(path), "wb") as out:
        out.setnchannels(CHANNELS)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        for second in range(spec.seconds):
            if cancelled():
                raise ComposeCancelled
            t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
            block = np.zeros(SAMPLE_RATE, dtype=np.float64)
            for beat in range(4):
                step = int(pattern[(second * 4 + beat) % len(pattern)])
                pitch = root * 2 ** (step / 12)
                span = slice(beat * note_len, (beat + 1) * note_len)
                envelope = np.exp(-np.arange(note_len) / (note_len / 3))
                block[span] = np.sin(2 * np.pi * pitch * t[span]) * envelope
            left = (block * 9000).astype(np.int16)
            right = (np.roll(block, 200) * 9000).astype(np.int16)
            out.writeframes(np.stack([left, right], axis=1).tobytes())
            if block_delay:
                time.sleep(block_delay)
            report(5 + int(90 * (second + 1) / spec.seconds), "sampling")
    report(97, "muxing")
    return path
