"""The generation contracts a video or music card declares (``video`` / ``music`` on
``GET /v1/models``), with the spec's field names.

A request is validated against these declarations before anything is dispatched;
nothing here is inferred from weights."""

from __future__ import annotations

from typing import Literal

import msgspec

VideoMode = Literal["t2va", "fl2va", "ref2va"]


class ReferenceLimits(msgspec.Struct, frozen=True, kw_only=True):
    """How many reference parts of each kind a ref2va render takes."""

    images: int = 0
    videos: int = 0
    audio: int = 0


class VideoCard(msgspec.Struct, frozen=True, kw_only=True):
    """A video card's declared contract. Settings the engine does not offer (adapters,
    styles, guides, a ControlNet) are empty, so a request naming one is refused."""

    modes: tuple[VideoMode, ...]
    min_seconds: int
    max_seconds: int
    fps: int
    frame_grid_multiple: int = 1
    frame_grid_offset: int = 0
    canvas_multiple: int = 16
    default_short_edge: int
    max_pixels: int
    aspect_ratios: tuple[str, ...] = ("16:9", "9:16", "1:1")
    audio_output: bool = True
    audio_sample_rate: int | None = None
    audio_channels: int | None = None
    default_steps: int = 1
    reference_limits: ReferenceLimits = ReferenceLimits()
    samplers: tuple[str, ...] = ()
    default_sampler: str | None = None
    schedulers: tuple[str, ...] = ()
    default_scheduler: str | None = None
    codecs: tuple[str, ...] = ()
    default_codec: str | None = None
    adapters: tuple[str, ...] = ()
    styles: tuple[str, ...] = ()


class MusicCard(msgspec.Struct, frozen=True, kw_only=True):
    """A text-to-music card's declared contract."""

    family: str
    lyrics: Literal["optional", "required", "unsupported"] = "optional"
    min_seconds: int = 1
    max_seconds: int = 120
    output_format: Literal["wav"] = "wav"
    sample_rate: int | None = None
    channels: int | None = None
