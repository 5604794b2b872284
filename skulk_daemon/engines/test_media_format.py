"""What the test video and music engines' outputs carry, as their cards declare it.
Kept apart from ``test_video`` and ``test_music`` (PyAV, numpy) so the card catalogue
loads without them (issue 43)."""

from __future__ import annotations

from typing import Final

AUDIO_SAMPLE_RATE: Final = 16_000
"""The test video's audio track."""
AUDIO_CHANNELS: Final = 1
MUSIC_SAMPLE_RATE: Final = 22_050
"""The test music engine's WAV."""
MUSIC_CHANNELS: Final = 2
