"""A video request checked against its card's declared contract: mode derivation,
duration, canvas, attachments and engine settings. Pure: a refusal is a
:class:`~skulk_core.media.jobs.JobRefused` with the spec's status."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Final

from skulk_core.media.jobs import JobRefused
from skulk_core.media.video_wire import Attachment, VideoRequest, VideoSpec
from skulk_core.models.media_cards import VideoCard, VideoMode

MAX_PROMPT_CHARS: Final = 8000
MAX_ATTACHMENTS: Final = 16
MAX_UPLOAD_BYTES: Final = 256 * 1024 * 1024
"""All attachments of one request together (413 beyond)."""
MAX_KEYFRAMES: Final = 8
MAX_STYLES: Final = 4
MAX_SEED: Final = 2**32 - 1
MAX_STEPS: Final = 200
SHIFT_BOUNDS: Final = (0.01, 100.0)
LORA_STRENGTH_BOUNDS: Final = (0.0, 2.0)
REFERENCE_FIDELITIES: Final = ("match", "max")
CONTROL_ROLES: Final = frozenset({"control", "mask", "source_video"})
MEDIA_PREFIXES: Final = ("image/", "video/", "audio/")
_SIZE: Final = re.compile(r"^([1-9][0-9]{0,4})x([1-9][0-9]{0,4})$")
_RATIO: Final = re.compile(r"^([1-9][0-9]{0,2}):([1-9][0-9]{0,2})$")


def _bad(message: str, code: str = "invalid_request") -> JobRefused:
    return JobRefused(400, message, code)


def check_upload(attachments: Sequence[Attachment]) -> None:
    """The request-wide bounds: 16 parts and 256 MiB (413), media content types (400)."""
    if len(attachments) > MAX_ATTACHMENTS:
        raise JobRefused(413, f"at most {MAX_ATTACHMENTS} attachments per request", "too_large")
    if sum(part.size for part in attachments) > MAX_UPLOAD_BYTES:
        raise JobRefused(413, "attachments exceed 256 MiB per request", "too_large")
    for part in attachments:
        if not part.content_type.startswith(MEDIA_PREFIXES):
            raise _bad(
                f"the {part.role} part must be image/*, video/* or audio/*, "
                f"not {part.content_type or 'untyped'}"
            )


def derive_mode(attachments: Sequence[Attachment]) -> VideoMode:
    """References make ref2va; keyframes alone (first, last, timed) make fl2va; none
    make t2va. Control, mask and source parts never decide the mode."""
    roles = {part.role for part in attachments}
    if "reference" in roles:
        return "ref2va"
    if roles & {"first_frame", "last_frame", "keyframe"}:
        return "fl2va"
    return "t2va"


def _seconds(request: VideoRequest, card: VideoCard) -> int:
    raw = request.seconds
    if raw is None:
        return card.min_seconds
    if isinstance(raw, str):
        if not raw.strip().isdigit():
            raise _bad(f"seconds must be an integer, not {raw!r}", "invalid_seconds")
        raw = int(raw.strip())
    if not card.min_seconds <= raw <= card.max_seconds:
        raise _bad(
            f"seconds must be {card.min_seconds} to {card.max_seconds} for this model",
            "invalid_seconds",
        )
    return raw


def _snap(value: float, multiple: int) -> int:
    return max(multiple, round(value / multiple) * multiple)


def _canvas(request: VideoRequest, card: VideoCard) -> tuple[int, int]:
    grid = card.canvas_multiple
    if request.size is not None:
        match = _SIZE.match(request.size)
        if match is None:
            raise _bad(f"size must be WIDTHxHEIGHT, not {request.size!r}", "invalid_size")
        width, height = int(match[1]), int(match[2])
        if width % grid or height % grid:
            raise _bad(f"size must be a multiple of {grid} on each side", "invalid_size")
        if width * height > card.max_pixels:
            raise _bad(f"size exceeds this model's {card.max_pixels} pixels", "invalid_size")
        return width, height
    ratio = request.aspect_ratio or (card.aspect_ratios[0] if card.aspect_ratios else "16:9")
    match = _RATIO.match(ratio)
    if match is None:
        raise _bad(f"aspect_ratio must be W:H, not {ratio!r}", "invalid_aspect_ratio")
    across, down = int(match[1]), int(match[2])
    short = float(card.default_short_edge)
    wide, tall = (
        (short * across / down, short) if across >= down else (short, short * down / across)
    )
    scale = min(1.0, math.sqrt(card.max_pixels / (wide * tall)))
    return _snap(wide * scale, grid), _snap(tall * scale, grid)


def _frame_count(seconds: int, card: VideoCard) -> int:
    """Frames for ``seconds``, on the card's frame grid (``multiple * k + offset``)."""
    frames = seconds * card.fps
    multiple = card.frame_grid_multiple
    k = max(1, math.ceil((frames - card.frame_grid_offset) / multiple))
    return k * multiple + card.frame_grid_offset


def _choice(
    name: str, value: str | None, offered: Sequence[str], default: str | None
) -> str | None:
    if value is None:
        return default
    if value not in offered:
        listed = ", ".join(offered) or "none"
        raise _bad(f"{name} {value!r} is not offered by this model (offered: {listed})")
    return value


def _attachments(
    attachments: Sequence[Attachment], mode: VideoMode, seconds: int, card: VideoCard
) -> None:
    roles = [part.role for part in attachments]
    for role in ("first_frame", "last_frame"):
        if roles.count(role) > 1:
            raise _bad(f"at most one {role} part")
    keyframes = [part for part in attachments if part.role == "keyframe"]
    if len(keyframes) > MAX_KEYFRAMES:
        raise _bad(f"at most {MAX_KEYFRAMES} keyframe parts")
    times = [part.at for part in keyframes]
    if any(at is None for at in times):
        raise _bad("every keyframe part needs a keyframe_at value, in the same order")
    if len(set(times)) != len(times):
        raise _bad("keyframes must be at distinct times")
    if any(at is not None and not 0 <= at <= seconds for at in times):
        raise _bad(f"keyframe_at must be 0 to the clip's {seconds} seconds")
    if CONTROL_ROLES & set(roles):
        raise _bad("this model has no ControlNet for control, mask or source_video parts")
    if mode != "ref2va" and "reference" in roles:
        raise _bad(f"reference parts need ref2va, not {mode}")
    if mode == "t2va" and roles:
        raise _bad("t2va takes no attachments")
    limits = card.reference_limits
    references = [part for part in attachments if part.role == "reference"]
    for kind, limit in (
        ("image/", limits.images),
        ("video/", limits.videos),
        ("audio/", limits.audio),
    ):
        count = sum(1 for part in references if part.content_type.startswith(kind))
        if count > limit:
            raise _bad(f"this model takes at most {limit} {kind.rstrip('/')} references")


def video_spec(
    request: VideoRequest, attachments: Sequence[Attachment], card: VideoCard, seed: int
) -> VideoSpec:
    """The render ``request`` asks for on ``card``; ``seed`` is used when it gives none."""
    check_upload(attachments)
    prompt = request.prompt
    if prompt is None or not prompt.strip():
        raise _bad("prompt is required")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise _bad(f"prompt is longer than {MAX_PROMPT_CHARS} characters")
    derived = derive_mode(attachments)
    if request.mode is not None and request.mode not in ("t2va", "fl2va", "ref2va"):
        raise _bad(f"mode must be t2va, fl2va or ref2va, not {request.mode!r}")
    mode: VideoMode = derived if request.mode is None else request.mode  # type: ignore[assignment]
    if mode not in card.modes:
        raise _bad(f"this model does not render {mode}", "video_mode_unavailable")
    seconds = _seconds(request, card)
    _attachments(attachments, mode, seconds, card)
    width, height = _canvas(request, card)
    if request.steps is not None and not 1 <= request.steps <= MAX_STEPS:
        raise _bad(f"steps must be 1 to {MAX_STEPS}")
    if request.seed is not None and not 0 <= request.seed <= MAX_SEED:
        raise _bad(f"seed must be 0 to {MAX_SEED}")
    if request.lora is not None and request.lora not in card.adapters:
        raise _bad(f"lora {request.lora!r} is not one of this model's adapters")
    if request.lora_strength is not None and not (
        LORA_STRENGTH_BOUNDS[0] <= request.lora_strength <= LORA_STRENGTH_BOUNDS[1]
    ):
        raise _bad("lora_strength must be 0.0 to 2.0")
    for name, shift in (("video_shift", request.video_shift), ("audio_shift", request.audio_shift)):
        if shift is not None and not SHIFT_BOUNDS[0] <= shift <= SHIFT_BOUNDS[1]:
            raise _bad(f"{name} must be 0.01 to 100")
    if request.reference_fidelity is not None:
        if mode != "ref2va":
            raise _bad("reference_fidelity applies to ref2va only")
        if request.reference_fidelity not in REFERENCE_FIDELITIES:
            raise _bad("reference_fidelity must be match or max")
    if len(request.styles) > MAX_STYLES:
        raise _bad(f"at most {MAX_STYLES} styles")
    for style in request.styles:
        if style not in card.styles:
            raise _bad(
                f"style {style!r} is not one of this model's: {', '.join(card.styles) or 'none'}"
            )
    control = (
        request.control_strength,
        request.control_start,
        request.control_end,
        request.control_kind,
    )
    if any(value is not None for value in control):
        raise _bad("control settings need a control or mask part")
    if request.audio and not card.audio_output:
        raise _bad("this model renders no audio track; send audio: false")
    return VideoSpec(
        prompt=prompt,
        mode=mode,
        seconds=seconds,
        size=request.size,
        width=width,
        height=height,
        fps=card.fps,
        frame_count=_frame_count(seconds, card),
        steps=request.steps or card.default_steps,
        seed=seed if request.seed is None else request.seed,
        audio=request.audio,
        sampler=_choice("sampler", request.sampler, card.samplers, card.default_sampler),
        scheduler=_choice("scheduler", request.scheduler, card.schedulers, card.default_scheduler),
        codec=_choice("codec", request.codec, card.codecs, card.default_codec),
        styles=request.styles,
        attachments=tuple(attachments),
    )
