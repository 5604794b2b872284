"""Find the models installed on this node from their card sidecars."""

from __future__ import annotations

import logging
from pathlib import Path

from skulk_core.models.catalog import InstalledModel
from skulk_daemon.models.demo import DEMO_MODEL_ID, current_demo, install_demo_model
from skulk_daemon.models.sidecar import SIDECAR_DIR, SIDECAR_NAME, SidecarError, read_sidecar

log = logging.getLogger(__name__)


def load_installed_models(models_dir: Path) -> list[InstalledModel]:
    """Every usable installed model under ``models_dir``, installing the demo if due.

    The demo model is installed when its package is importable and no installed
    card already carries its id. A bad sidecar, or one whose bytes are missing,
    is logged and skipped; it never stops the node.
    """
    installed = [current_demo(model) for model in scan_installed_models(models_dir)]
    if all(model.card.model_id != DEMO_MODEL_ID for model in installed):
        demo = install_demo_model(models_dir)
        if demo is not None:
            installed.append(demo)
    return installed


def scan_installed_models(models_dir: Path) -> list[InstalledModel]:
    """Read ``models_dir/*/.skulk/installed-card.json``, in directory-name order."""
    found: list[InstalledModel] = []
    for path in sorted(models_dir.glob(f"*/{SIDECAR_DIR}/{SIDECAR_NAME}")):
        model_dir = path.parent.parent
        try:
            record = read_sidecar(path)
        except (OSError, SidecarError) as exc:
            log.warning("skipping model in %s: unreadable card record (%s)", model_dir, exc)
            continue
        card = record.card
        if card.gguf_file is not None and not _inside_file(model_dir, card.gguf_file):
            log.warning(
                "skipping %s in %s: its file %s is missing",
                card.model_id,
                model_dir,
                card.gguf_file,
            )
            continue
        found.append(
            InstalledModel(card=card, location=str(model_dir), installed_at=record.installed_at)
        )
    return found


def _inside_file(model_dir: Path, relative: str) -> bool:
    """Whether ``relative`` names an existing file that stays inside ``model_dir``."""
    root = model_dir.resolve()
    target = (model_dir / relative).resolve()
    return target.is_relative_to(root) and target.is_file()
