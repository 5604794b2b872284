"""The image routes' wire: requests, answers, stream events and the stored-image list.

Shaped as OpenAI's Images API is (``created`` + ``data``; ``image_generation.*`` and
``image_edit.*`` stream events), so the official SDKs read them, plus the spec's
``advanced_params``. Bounds are named here and enforced in
:mod:`skulk_daemon.images.admission`.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

IMAGE_SIZES: Final = (
    "auto",
    "512x512",
    "768x768",
    "1024x768",
    "768x1024",
    "1024x1024",
    "1024x1536",
    "1536x1024",
)
AUTO_SIZE: Final = (512, 512)
"""``size: auto``: 512x512, the canvas every stable-diffusion.cpp family renders."""
QUALITIES: Final = ("high", "medium", "low")
OUTPUT_FORMATS: Final = ("png", "jpeg", "webp")
RESPONSE_FORMATS: Final = ("b64_json", "url")
INPUT_FIDELITIES: Final = ("low", "high")
MEDIA_TYPES: Final = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}

MAX_IMAGES: Final = 10
"""``n``'s ceiling (OpenAI's)."""
MAX_PARTIAL_IMAGES: Final = 3
"""``partial_images``' ceiling per image (OpenAI's)."""
MAX_PROMPT_CHARS: Final = 32_000
MIN_STEPS: Final = 1
MAX_STEPS: Final = 100
MIN_GUIDANCE: Final = 1.0
MAX_GUIDANCE: Final = 20.0
MAX_SEED: Final = 2**32 - 1
MAX_EDIT_IMAGE_BYTES: Final = 24 * 1024 * 1024
"""The edit upload's bound (raw bytes); more is 413."""
MAX_EDIT_BODY_BYTES: Final = MAX_EDIT_IMAGE_BYTES + 8 * 1024 * 1024
"""The edit form's bound: the image, the other fields and the multipart framing, with
room to spare, so an oversized image is measured and refused by name (413)."""
MAX_GENERATION_BODY_BYTES: Final = 1024 * 1024


class AdvancedParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    seed: int | None = None
    num_inference_steps: int | None = None
    guidance: float | None = None
    negative_prompt: str | None = None
    num_sync_steps: int | None = None
    """Checked (1-100) for clients that pipeline a render across nodes; one runner
    renders each image here, so it changes nothing."""


class ImageGenerationRequest(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/images/generations`` (and the fields an edit form mirrors). Fields
    OpenAI's SDK may send that do not apply here (``background``, ``moderation``,
    ``style``, ``user``) are accepted and not read."""

    model: str = ""
    prompt: str = ""
    n: int = 1
    size: str = "auto"
    quality: str = "medium"
    output_format: str = "png"
    output_compression: int | None = None
    response_format: str = "b64_json"
    stream: bool = False
    partial_images: int = 0
    advanced_params: AdvancedParams | None = None
    background: str | None = None
    moderation: str | None = None
    style: str | None = None
    user: str | None = None


class ImageDatum(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    b64_json: str | None = None
    url: str | None = None


class ImagesResponse(msgspec.Struct, frozen=True, kw_only=True):
    created: int
    data: list[ImageDatum]
    output_format: str
    quality: str
    size: str
    seed: int
    """The first image's seed (image ``i`` used ``seed + i``): a request that sends it
    back in ``advanced_params`` renders the same pictures."""


class ImageGenerationStats(msgspec.Struct, frozen=True, kw_only=True):
    """What the serving runner measured (``POST /bench/images/*``)."""

    render_seconds: float
    seconds_per_step: float
    steps: int
    images: int
    model_load_seconds: float
    serving_batches: bool = False
    in_flight_at_admission: int = 0


class PartialImageEvent(msgspec.Struct, frozen=True, kw_only=True):
    """``image_generation.partial_image`` / ``image_edit.partial_image``."""

    type: str
    b64_json: str
    created_at: int
    size: str
    quality: str
    output_format: str
    partial_image_index: int
    image_index: int


class CompletedImageEvent(msgspec.Struct, frozen=True, kw_only=True):
    """``image_generation.completed`` / ``image_edit.completed``, one per image."""

    type: str
    b64_json: str
    created_at: int
    size: str
    quality: str
    output_format: str
    image_index: int


class StreamError(msgspec.Struct, frozen=True, kw_only=True):
    type: Literal["error"] = "error"
    error: dict[str, str]


class StoredImageEntry(msgspec.Struct, frozen=True, kw_only=True):
    image_id: str
    url: str
    content_type: str
    expires_at: int


class StoredImageList(msgspec.Struct, frozen=True, kw_only=True):
    object: Literal["list"] = "list"
    data: list[StoredImageEntry]
