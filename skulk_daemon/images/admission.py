"""What an image request asks for, checked against the spec's bounds (pure).

Every refusal is a 400 naming the field, except an edit image over 24 MiB (413).
A request with no seed gets one here, before it is dispatched, so every image of it
(image ``i`` renders with ``seed + i``) is reproducible wherever it runs.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Final

from skulk_daemon.errors import ApiError
from skulk_daemon.errors import bad_request as _bad
from skulk_daemon.images.protocol import (
    AUTO_SIZE,
    IMAGE_SIZES,
    INPUT_FIDELITIES,
    MAX_EDIT_IMAGE_BYTES,
    MAX_GUIDANCE,
    MAX_IMAGES,
    MAX_PARTIAL_IMAGES,
    MAX_PROMPT_CHARS,
    MAX_SEED,
    MAX_STEPS,
    MIN_GUIDANCE,
    MIN_STEPS,
    OUTPUT_FORMATS,
    QUALITIES,
    RESPONSE_FORMATS,
    ImageGenerationRequest,
)

QUALITY_STEPS: Final = {"low": 4, "medium": 12, "high": 24}
"""Sampling steps by ``quality`` when ``num_inference_steps`` is not given."""
DEFAULT_GUIDANCE: Final = 5.0
FIDELITY_STRENGTH: Final = {"low": 0.75, "high": 0.45}
"""How far an edit may move from its input: ``input_fidelity: high`` keeps more of it."""
JPEG_QUALITY: Final = 90


@dataclass(frozen=True, slots=True)
class ImagePlan:
    """A checked request: what to render and how to answer."""

    model: str
    prompt: str
    negative_prompt: str
    count: int
    width: int
    height: int
    size: str
    quality: str
    output_format: str
    compression: int
    response_format: str
    stream: bool
    partial_images: int
    seed: int
    steps: int
    guidance: float
    init_image: bytes | None = None
    strength: float = 0.75
    auto_size: bool = False
    """``size: auto``: the service renders at the card's native canvas instead."""


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise _bad(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def plan_images(
    body: ImageGenerationRequest,
    *,
    edit_image: bytes | None = None,
    editing: bool = False,
    input_fidelity: str | None = None,
    bench: bool = False,
) -> ImagePlan:
    if not body.model:
        raise _bad("model is required")
    if not body.prompt or not body.prompt.strip():
        raise _bad("prompt is required")
    if len(body.prompt) > MAX_PROMPT_CHARS:
        raise _bad(f"prompt holds {len(body.prompt)} characters; at most {MAX_PROMPT_CHARS}")
    if not 1 <= body.n <= MAX_IMAGES:
        raise _bad(f"n must be between 1 and {MAX_IMAGES}, got {body.n}")
    size = _choice("size", body.size, IMAGE_SIZES)
    width, height = AUTO_SIZE if size == "auto" else (int(x) for x in size.split("x"))
    quality = _choice("quality", body.quality, QUALITIES)
    output_format = _choice("output_format", body.output_format, OUTPUT_FORMATS)
    response_format = _choice("response_format", body.response_format, RESPONSE_FORMATS)
    if body.output_compression is not None and not 0 <= body.output_compression <= 100:
        raise _bad("output_compression must be between 0 and 100")
    if not 0 <= body.partial_images <= MAX_PARTIAL_IMAGES:
        raise _bad(f"partial_images must be between 0 and {MAX_PARTIAL_IMAGES}")
    stream = body.stream and not bench
    if body.partial_images and not stream and not bench:
        raise _bad("partial_images needs stream=true")
    advanced = body.advanced_params
    seed = steps = sync = None
    guidance = negative = None
    if advanced is not None:
        seed, steps, guidance = advanced.seed, advanced.num_inference_steps, advanced.guidance
        negative, sync = advanced.negative_prompt, advanced.num_sync_steps
    if seed is not None and not 0 <= seed <= MAX_SEED - body.n:
        raise _bad(f"advanced_params.seed must be between 0 and {MAX_SEED - body.n}")
    if steps is not None and not MIN_STEPS <= steps <= MAX_STEPS:
        raise _bad(
            f"advanced_params.num_inference_steps must be between {MIN_STEPS} and {MAX_STEPS}"
        )
    if sync is not None and not MIN_STEPS <= sync <= MAX_STEPS:
        raise _bad(f"advanced_params.num_sync_steps must be between {MIN_STEPS} and {MAX_STEPS}")
    if guidance is not None and not MIN_GUIDANCE <= guidance <= MAX_GUIDANCE:
        raise _bad(f"advanced_params.guidance must be between {MIN_GUIDANCE} and {MAX_GUIDANCE}")
    strength = 0.75
    if editing:
        if edit_image is None:
            raise _bad("image is required: upload the picture to edit as a file")
        if len(edit_image) > MAX_EDIT_IMAGE_BYTES:
            raise ApiError(
                413,
                f"the image upload holds {len(edit_image)} bytes; at most "
                f"{MAX_EDIT_IMAGE_BYTES} (24 MiB) are accepted",
                code="upload_too_large",
            )
        if not edit_image:
            raise _bad("image is empty")
        fidelity = _choice("input_fidelity", input_fidelity or "low", INPUT_FIDELITIES)
        strength = FIDELITY_STRENGTH[fidelity]
    return ImagePlan(
        model=body.model,
        prompt=body.prompt,
        negative_prompt=negative or "",
        count=body.n,
        width=width,
        height=height,
        size=f"{width}x{height}",
        quality=quality,
        output_format=output_format,
        compression=JPEG_QUALITY if body.output_compression is None else body.output_compression,
        response_format=response_format,
        stream=stream,
        partial_images=body.partial_images if stream else 0,
        seed=secrets.randbelow(2**31) if seed is None else seed,
        steps=QUALITY_STEPS[quality] if steps is None else steps,
        guidance=DEFAULT_GUIDANCE if guidance is None else guidance,
        init_image=edit_image if editing else None,
        strength=strength,
        auto_size=size == "auto",
    )
