"""The speech wire's formats, media types and bounds, as the spec names them."""

from __future__ import annotations

from typing import Final, Literal, get_args

SpeechFormat = Literal["mp3", "wav", "flac", "ogg", "opus", "pcm"]
SPEECH_FORMATS: Final[tuple[SpeechFormat, ...]] = get_args(SpeechFormat)
SPEECH_MEDIA_TYPES: Final[dict[SpeechFormat, str]] = {
    "mp3": "audio/mpeg",
    "wav": "audio/wav",
    "flac": "audio/flac",
    "ogg": "audio/ogg",
    "opus": "audio/opus",
    "pcm": "audio/pcm",
}
DEFAULT_SPEECH_FORMAT: Final[SpeechFormat] = "mp3"
"""What a request that names no format gets when the card declares no default."""
STREAMING_SPEECH_FORMATS: Final[tuple[SpeechFormat, ...]] = ("mp3", "pcm")

TranscriptFormat = Literal["json", "text", "verbose_json", "srt", "vtt", "ndjson"]
TRANSCRIPT_FORMATS: Final[tuple[TranscriptFormat, ...]] = get_args(TranscriptFormat)
TRANSCRIPT_MEDIA_TYPES: Final[dict[TranscriptFormat, str]] = {
    "json": "application/json",
    "text": "text/plain",
    "verbose_json": "application/json",
    "srt": "application/x-subrip",
    "vtt": "text/vtt",
    "ndjson": "application/x-ndjson",
}

MAX_AUDIO_UPLOAD_BYTES: Final = 25 * 1024 * 1024
"""The largest audio upload (transcription, translation, reference audio)."""
MAX_SPEECH_INPUT_CHARS: Final = 4096
"""The longest text one speech request synthesizes (OpenAI's own bound)."""
MIN_SPEED: Final = 0.25
MAX_SPEED: Final = 4.0
"""The speaking-speed multipliers accepted (OpenAI's range)."""

PCM_SAMPLE_FORMAT: Final = "s16le"
PCM_CHANNELS: Final = 1
HEADER_SAMPLE_RATE: Final = "X-Audio-Sample-Rate"
HEADER_CHANNELS: Final = "X-Audio-Channels"
HEADER_SAMPLE_FORMAT: Final = "X-Audio-Sample-Format"


def pcm_headers(sample_rate: int) -> dict[str, str]:
    """The framing headers of a raw PCM body: mono signed 16-bit little-endian."""
    return {
        HEADER_SAMPLE_RATE: str(sample_rate),
        HEADER_CHANNELS: str(PCM_CHANNELS),
        HEADER_SAMPLE_FORMAT: PCM_SAMPLE_FORMAT,
    }


def pcm_seconds(pcm_bytes: int, sample_rate: int) -> float:
    """How long ``pcm_bytes`` of mono 16-bit PCM plays."""
    return pcm_bytes / (2 * PCM_CHANNELS * sample_rate)
