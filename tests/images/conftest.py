"""The locally built image model, staged once.

The build (about 570 MB, seeded, so always the same bytes) is kept under
``.pytest_cache/tiny-sd`` across runs, made under a lock so two workers never write it
at once, and hard-linked into the session's shared models dir with its card.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from skulk_daemon.models.image_demo import TINY_IMAGE_MODEL_ID, install_tiny_image_model
from skulk_daemon.models.tiny_sd import build

TINY = str(TINY_IMAGE_MODEL_ID)


@pytest.fixture(scope="session")
def tiny_image_model(request: pytest.FixtureRequest, shared_models_dir: Path) -> str:
    cache = request.config.rootpath / ".pytest_cache" / "tiny-sd"
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build(cache)
        install_tiny_image_model(shared_models_dir, built=cache)
    return TINY
