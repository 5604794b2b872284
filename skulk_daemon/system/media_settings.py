"""The environment switches of the media job families (read when used, never cached,
so a test can start daemons with different settings from one process)."""

from __future__ import annotations

import os
from typing import Final

TEST_VIDEO_ENGINE_ENV: Final = "SKULK_TEST_VIDEO_ENGINE"
TEST_MUSIC_ENGINE_ENV: Final = "SKULK_TEST_MUSIC_ENGINE"
ENABLE_VIDEO_MODELS_ENV: Final = "SKULK_ENABLE_VIDEO_MODELS"
VIDEO_STORE_MAX_BYTES_ENV: Final = "SKULK_VIDEO_STORE_MAX_BYTES"
MUSIC_STORE_MAX_BYTES_ENV: Final = "SKULK_MUSIC_STORE_MAX_BYTES"
DEFAULT_VIDEO_STORE_MAX_BYTES: Final = 32 * 1024**3
DEFAULT_MUSIC_STORE_MAX_BYTES: Final = 4 * 1024**3
STORE_FREE_RESERVE_BYTES: Final = 1024**3
"""Free space a media store always leaves on its filesystem."""

BACKEND_TEST_VIDEO: Final = "skulk_test_video"
BACKEND_TEST_MUSIC: Final = "skulk_test_music"

_TRUE: Final = frozenset({"1", "true", "yes", "on"})


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def test_video_engine() -> bool:
    return _flag(TEST_VIDEO_ENGINE_ENV)


def test_music_engine() -> bool:
    return _flag(TEST_MUSIC_ENGINE_ENV)


def video_models_listed() -> bool:
    """Video cards appear in the catalog only with ``SKULK_ENABLE_VIDEO_MODELS=true``
    (or on a node running the test video engine, whose bundled card is the point)."""
    return _flag(ENABLE_VIDEO_MODELS_ENV) or test_video_engine()


def media_backends() -> tuple[str, ...]:
    """The media engines this node offers through telemetry."""
    offered = []
    if test_video_engine():
        offered.append(BACKEND_TEST_VIDEO)
    if test_music_engine():
        offered.append(BACKEND_TEST_MUSIC)
    return tuple(offered)


def store_cap(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        return default
    return value if value > 0 else default
