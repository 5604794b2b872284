"""Image model cards (``TextToImage``/``ImageToImage``) and when the catalog shows them.

As the spec says, image cards are hidden from the catalog (``/v1/models``, placement
previews, the dashboard) unless the node runs with ``SKULK_ENABLE_IMAGE_MODELS=true``;
a hidden card cannot be placed or asked for images (404, as an unknown model).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from skulk_core.models.cards import ModelCard, ModelTask
from skulk_core.models.catalog import Catalog

ENABLE_IMAGE_MODELS_ENV: Final = "SKULK_ENABLE_IMAGE_MODELS"
DEFAULT_CANVAS: Final = (512, 512)
NATIVE_CANVAS: Final[dict[str, tuple[int, int]]] = {
    "sdxl": (1024, 1024),
    "sd3": (1024, 1024),
    "flux": (1024, 1024),
    "sd2": (768, 768),
    # The locally built test model has random weights, so no canvas suits it better
    # than another: the smallest its UNet takes keeps a CPU render to seconds.
    "skulk-test-sdxs": (64, 64),
}
"""What ``size: auto`` renders at, by card ``architecture`` (else 512x512)."""
IMAGE_TASKS: Final = frozenset({ModelTask.TEXT_TO_IMAGE, ModelTask.IMAGE_TO_IMAGE})


def is_image_card(card: ModelCard) -> bool:
    return bool(IMAGE_TASKS.intersection(card.tasks))


def native_canvas(card: ModelCard) -> tuple[int, int]:
    """The canvas ``size: auto`` renders at for ``card``."""
    return NATIVE_CANVAS.get((card.architecture or "").lower(), DEFAULT_CANVAS)


def image_models_enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(ENABLE_IMAGE_MODELS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def visible_catalog(catalog: Catalog, environ: Mapping[str, str]) -> Catalog:
    """``catalog`` as this node shows it: without image cards unless they are enabled."""
    if image_models_enabled(environ) or not any(
        is_image_card(entry.card) for entry in catalog.by_id.values()
    ):
        return catalog
    return Catalog(
        by_id={
            model_id: entry
            for model_id, entry in catalog.by_id.items()
            if not is_image_card(entry.card)
        }
    )
