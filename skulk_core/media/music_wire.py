"""The music job family: the request, its validation against a card's ``music``
contract, and the music object every route answers with."""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from skulk_core.media.jobs import JobError, JobRefused, JobStatus
from skulk_core.models.media_cards import MusicCard

MUSIC_CONTENT_TYPE: Final = "audio/wav"
MUSIC_FILE: Final = "music.wav"
"""What a music job's runner writes (the test engine and the service agree on it)."""
MAX_MUSIC_SECONDS: Final = 120
"""The global ceiling on a music job's length, whatever the card allows."""
MAX_PROMPT_CHARS: Final = 8000
MAX_LYRICS_CHARS: Final = 20_000
MAX_SEED: Final = 4_294_967_295
MAX_MUSIC_BYTES: Final = 64 * 1024 * 1024
"""A WAV past this fails the job instead of being truncated."""


class MusicRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/music``; unknown fields are refused (422)."""

    model: str
    prompt: str
    seconds: int
    lyrics: str | None = None
    seed: int | None = None


class MusicSpec(msgspec.Struct, frozen=True, kw_only=True):
    prompt: str
    lyrics: str | None
    seconds: int
    seed: int


class MusicOutput(msgspec.Struct, frozen=True, kw_only=True):
    """Measured from the stored WAV."""

    duration_seconds: float
    sample_rate: int
    channels: int
    size_bytes: int
    sha256: str
    content_type: str = MUSIC_CONTENT_TYPE


class MusicStats(msgspec.Struct, frozen=True, kw_only=True):
    total_generation_time: float
    seed: int
    engine: str


class MusicObject(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["music"] = "music"
    model: str
    prompt: str
    lyrics: str | None
    seconds: int
    seed: int | None
    status: JobStatus
    progress: int
    created_at: int
    completed_at: int | None
    expires_at: int | None
    error: JobError | None
    output: MusicOutput | None
    stats: MusicStats | None


class MusicList(msgspec.Struct, frozen=True, kw_only=True):
    object: Literal["list"] = "list"
    data: tuple[MusicObject, ...]
    first_id: str | None
    last_id: str | None
    has_more: bool


class MusicDeleted(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["music.deleted"] = "music.deleted"
    deleted: bool = True


def _unprocessable(message: str, code: str = "invalid_request") -> JobRefused:
    return JobRefused(422, message, code)


def music_spec(request: MusicRequest, card: MusicCard, seed: int) -> MusicSpec:
    """The job ``request`` asks for on ``card`` (``seed`` is used when it gives none).
    Raises :class:`JobRefused` (422) for blank or oversized text, a missing or
    unsupported lyric, a length outside the card's range or the 120-second ceiling, or
    a seed outside 0..2^32-1."""
    if not request.prompt.strip():
        raise _unprocessable("prompt must not be blank")
    if len(request.prompt) > MAX_PROMPT_CHARS:
        raise _unprocessable(f"prompt is longer than {MAX_PROMPT_CHARS} characters")
    lyrics = request.lyrics
    if lyrics is not None:
        if not lyrics.strip():
            raise _unprocessable("lyrics must not be blank when supplied")
        if len(lyrics) > MAX_LYRICS_CHARS:
            raise _unprocessable(f"lyrics are longer than {MAX_LYRICS_CHARS} characters")
        if card.lyrics == "unsupported":
            raise _unprocessable(f"the {card.family} model takes no lyrics")
    elif card.lyrics == "required":
        raise _unprocessable(f"the {card.family} model requires lyrics")
    ceiling = min(card.max_seconds, MAX_MUSIC_SECONDS)
    if not card.min_seconds <= request.seconds <= ceiling:
        raise _unprocessable(
            f"seconds must be {card.min_seconds} to {ceiling} for this model",
            "invalid_seconds",
        )
    if request.seed is not None and not 0 <= request.seed <= MAX_SEED:
        raise _unprocessable(f"seed must be 0 to {MAX_SEED}")
    return MusicSpec(
        prompt=request.prompt,
        lyrics=lyrics,
        seconds=request.seconds,
        seed=seed if request.seed is None else request.seed,
    )
