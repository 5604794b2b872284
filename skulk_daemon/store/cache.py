"""A node's copies staged from the store: their markers, their eviction.

A staged copy is a model directory under the node's models dir holding a manifest,
a card record and the ``.skulk/staged-from-store`` marker; ``.skulk/last-use`` holds
the Unix time it was last staged or launched. Evicting a copy removes its directory
as one unit (records first, so it leaves every scan before its bytes go), drops it
from this node's installed models and reports it ``deleted`` in State.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from pathlib import Path
from typing import Final

from skulk_core.ids import ModelId, new_command_id
from skulk_core.models.catalog import InstalledModel
from skulk_core.state.commands import ReportDownloadProgress
from skulk_core.state.state import DownloadProgress
from skulk_core.store.eviction import StagedCopy
from skulk_daemon.hub.download import DELETED
from skulk_daemon.hub.manifest import read_manifest
from skulk_daemon.models.sidecar import SIDECAR_DIR
from skulk_daemon.node.node import Node
from skulk_host.fsutil import atomic_write

STAGED_MARKER: Final = "staged-from-store"
LAST_USE_MARKER: Final = "last-use"
MARKER_MODE: Final = 0o644


def mark_staged(model_dir: Path, at: float) -> None:
    atomic_write(model_dir / SIDECAR_DIR / STAGED_MARKER, b"", mode=MARKER_MODE)
    mark_used(model_dir, at)


def mark_used(model_dir: Path, at: float) -> None:
    """Record a launch from ``model_dir``: a staged copy's eviction order, and every
    artifact's last use in ``GET /store/storage``. Only a directory that already keeps
    Skulk's records gets the marker (a read-only root silently keeps none)."""
    if not (model_dir / SIDECAR_DIR).is_dir():
        return
    with contextlib.suppress(OSError):
        atomic_write(
            model_dir / SIDECAR_DIR / LAST_USE_MARKER, f"{at:.3f}\n".encode(), mode=MARKER_MODE
        )


def is_staged(model_dir: Path) -> bool:
    return (model_dir / SIDECAR_DIR / STAGED_MARKER).is_file()


def last_used(model_dir: Path, fallback: float) -> float:
    try:
        return float((model_dir / SIDECAR_DIR / LAST_USE_MARKER).read_text().strip())
    except (OSError, ValueError):
        return fallback


def in_use(node: Node) -> set[ModelId]:
    return {i.shard_assignments.model_id for i in node.state.instances.values()}


def staged_models(models_dir: Path, models: list[InstalledModel]) -> list[InstalledModel]:
    """The ``models`` that are copies staged from the store under ``models_dir``
    (reads the disk: call off the loop)."""
    root = models_dir.resolve()
    found: list[InstalledModel] = []
    for model in models:
        location = Path(model.location).resolve()
        if location.parent == root and is_staged(location) and read_manifest(location):
            found.append(model)
    return found


def staged_copies(staged: list[InstalledModel], busy: set[ModelId]) -> list[StagedCopy]:
    """The planner's view of :func:`staged_models` (reads the disk: call off the loop)."""
    copies: list[StagedCopy] = []
    for model in staged:
        location = Path(model.location)
        manifest = read_manifest(location)
        size = 0 if manifest is None else sum(f.size for f in manifest.files)
        copies.append(
            StagedCopy(
                model_id=model.card.model_id,
                size_bytes=size,
                last_used=last_used(location, float(model.installed_at)),
                in_use=model.card.model_id in busy,
            )
        )
    return copies


def remove_model_dir(location: Path) -> None:
    """The records first (the model leaves every scan), then the bytes."""
    shutil.rmtree(location / SIDECAR_DIR, ignore_errors=True)
    shutil.rmtree(location, ignore_errors=True)


async def evict_copy(node: Node, model: InstalledModel) -> None:
    """Drop one staged copy: from the installed models now, from disk, from State."""
    node.installed_models[:] = [m for m in node.installed_models if m is not model]
    await asyncio.to_thread(remove_model_dir, Path(model.location))
    report_deleted(node, model.card.model_id)


def report_deleted(node: Node, model_id: ModelId) -> None:
    """This node holds no copy of ``model_id`` any more (unless another copy stays,
    as the store host's own copy does beside a staged one)."""
    if any(m.card.model_id == model_id for m in node.installed_models):
        return
    node.report(
        ReportDownloadProgress(
            command_id=new_command_id(),
            node_id=node.node_id,
            progress=DownloadProgress(model_id=model_id, status=DELETED),
        )
    )


def now() -> float:
    return time.time()
