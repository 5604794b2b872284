"""The locally built image model (:mod:`skulk_daemon.models.tiny_sd`), installed as a card.

``install_tiny_image_model`` writes the model into ``<models dir>/local--sdxs-tiny-random``
(built there, or hard-linked from a directory that already holds a build, as the test
suite's session stage does) and records its card beside it, so the node lists it like
any installed model once ``SKULK_ENABLE_IMAGE_MODELS=true``. Its pictures are noise:
it exists to exercise the whole image path where no real weights can be downloaded.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Final

from skulk_core.ids import ModelId
from skulk_core.models.cards import Memory, ModelCard, ModelTask
from skulk_core.models.catalog import InstalledModel
from skulk_core.placement.backends import BACKEND_SD_CPP
from skulk_daemon.models.sidecar import model_dir_name, write_sidecar
from skulk_daemon.models.tiny_sd import MODEL_FILE, TAESD_FILE, build

TINY_IMAGE_MODEL_ID: Final = ModelId("local/sdxs-tiny-random")


def tiny_image_card(size_bytes: int) -> ModelCard:
    return ModelCard(
        model_id=TINY_IMAGE_MODEL_ID,
        storage_size=Memory(in_bytes=size_bytes),
        n_layers=1,
        tasks=(ModelTask.TEXT_TO_IMAGE, ModelTask.IMAGE_TO_IMAGE),
        architecture="skulk-test-sdxs",
        compatible_backends=(BACKEND_SD_CPP,),
        quantization="q4_0",
        display_name="SDXS-512 layout, random weights (image pipeline test model)",
    )


def install_tiny_image_model(models_dir: Path, built: Path | None = None) -> InstalledModel:
    """Install the test image model into ``models_dir`` (``built``: a directory holding
    a finished build to link from, instead of building again)."""
    target = models_dir / model_dir_name(TINY_IMAGE_MODEL_ID)
    target.mkdir(parents=True, exist_ok=True)
    if built is None:
        build(target)
    else:
        for name in (MODEL_FILE, TAESD_FILE):
            if not (target / name).exists():
                _link_or_copy(built / name, target / name)
    size = sum((target / name).stat().st_size for name in (MODEL_FILE, TAESD_FILE))
    card = tiny_image_card(size)
    installed_at = int(time.time())
    write_sidecar(target, card, installed_at)
    return InstalledModel(card=card, location=str(target), installed_at=installed_at)


def _link_or_copy(source: Path, destination: Path) -> None:
    partial = destination.with_name(destination.name + ".partial")
    try:
        os.link(source, partial)
    except OSError:
        shutil.copyfile(source, partial)
    os.replace(partial, destination)


def main(argv: list[str] | None = None) -> int:
    """``python -m skulk_daemon.models.image_demo MODELS_DIR``: build and install it."""
    import sys  # noqa: PLC0415

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m skulk_daemon.models.image_demo MODELS_DIR", file=sys.stderr)
        return 2
    installed = install_tiny_image_model(Path(args[0]).expanduser())
    print(f"installed {installed.card.model_id} in {installed.location}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
