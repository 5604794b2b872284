"""The built-in ``vad@1.0.0`` provider: voice activity detection as a bidirectional stream.

Every production API registers :class:`VadProvider` as a first-party provider. A caller
opens a stream with the detector settings (the sample rate is required; aggressiveness,
classifier frame, minimum speech, silence hangover, preroll and maximum utterance are
optional and bounded), sends ordered mono PCM16 as inline ``audio/pcm`` media
(``pcm_s16le``, the opened sample rate, one channel, any whole number of samples per
chunk), and receives ``speech_started`` / ``speech_stopped`` chunks whose times sit on
classifier-frame boundaries, in milliseconds and in samples from the start of input.
When the caller completes its input, an utterance still open is stopped at the end of
the last whole frame and the ``completed`` terminal carries a short summary.

A chunk whose media does not match the opening (another rate, stereo, an odd byte
count, another codec, or no audio at all) fails that call alone with
``invalid_payload``. The provider has no model dependency and keeps nothing after a
call: the detector (at most one partial frame of audio) lives only inside the handler.
The frame logic itself is :mod:`skulk_daemon.providers.vad_detector`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityError,
    CapabilityStreamFrame,
    InlineMediaAttachment,
    JsonObject,
)
from skulk_daemon.capabilities.frames import OutputFrames
from skulk_daemon.providers.vad_detector import (
    AGGRESSIVENESS_RANGE,
    BYTES_PER_SAMPLE,
    FRAME_MS_CHOICES,
    HANGOVER_MS_RANGE,
    MAX_UTTERANCE_MS_RANGE,
    MIN_SPEECH_MS_RANGE,
    PREROLL_MS_RANGE,
    SAMPLE_RATES,
    SpeechStarted,
    VadDetector,
    VadEvent,
    VadSettings,
    VadSettingsError,
)

VAD_ID: Final = "vad"
VAD_VERSION: Final = "1.0.0"
MEDIA_TYPE: Final = "audio/pcm"
CODEC: Final = "pcm_s16le"
OFFLOAD_BYTES: Final = 32 * 1024
"""Chunks at least this large are classified on a worker thread (WebRTC VAD takes
about 15 ms per MiB), so a large chunk never stalls the API node's event loop."""


def _bounded(low_high: tuple[int, int], default: int, description: str) -> JsonObject:
    low, high = low_high
    return {
        "type": "integer",
        "minimum": low,
        "maximum": high,
        "default": default,
        "description": description,
    }


_DEFAULTS: Final = VadSettings(sample_rate=SAMPLE_RATES[1])

OPEN_SCHEMA: Final[JsonObject] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["sample_rate"],
    "properties": {
        "sample_rate": {
            "type": "integer",
            "enum": list(SAMPLE_RATES),
            "description": "Hz of the mono PCM16 the caller will send.",
        },
        "aggressiveness": _bounded(
            AGGRESSIVENESS_RANGE,
            _DEFAULTS.aggressiveness,
            "WebRTC VAD mode: 0 lets the most through as speech, 3 is strictest.",
        ),
        "frame_ms": {
            "type": "integer",
            "enum": list(FRAME_MS_CHOICES),
            "default": _DEFAULTS.frame_ms,
            "description": "Classifier frame; every reported time is a multiple of it.",
        },
        "min_speech_ms": _bounded(
            MIN_SPEECH_MS_RANGE,
            _DEFAULTS.min_speech_ms,
            "Speech must last this long (rounded up to frames) to start an utterance.",
        ),
        "hangover_ms": _bounded(
            HANGOVER_MS_RANGE,
            _DEFAULTS.hangover_ms,
            "Silence that must follow speech (rounded up to frames) before it stops; "
            "shorter pauses are bridged.",
        ),
        "preroll_ms": _bounded(
            PREROLL_MS_RANGE,
            _DEFAULTS.preroll_ms,
            "Move each reported start this much earlier (rounded up to frames), never "
            "before the input or the previous utterance's end.",
        ),
        "max_utterance_ms": _bounded(
            MAX_UTTERANCE_MS_RANGE,
            _DEFAULTS.max_utterance_ms,
            "An utterance this long (rounded down to frames) is stopped there.",
        ),
    },
}

INPUT_CHUNK_SCHEMA: Final[JsonObject] = {
    "type": "object",
    "additionalProperties": False,
    "description": "Optional metadata of the chunk's inline audio/pcm media; when given "
    "it must match the media and the opening.",
    "properties": {
        "format": {"const": CODEC},
        "sample_rate": {"type": "integer", "enum": list(SAMPLE_RATES)},
        "channels": {"const": 1},
    },
}

_OFFSET: Final[JsonObject] = {"type": "integer", "minimum": 0}


def _event_schema(event: str, fields: dict[str, JsonObject]) -> JsonObject:
    properties: dict[str, object] = {"event": {"const": event}, **fields}
    return {
        "type": "object",
        "additionalProperties": False,
        "required": sorted(properties),
        "properties": properties,
    }


_COMMON: Final[dict[str, JsonObject]] = {
    "utterance": _OFFSET,
    "start_ms": _OFFSET,
    "start_sample": _OFFSET,
    "decided_ms": _OFFSET,
    "decided_sample": _OFFSET,
}

OUTPUT_CHUNK_SCHEMA: Final[JsonObject] = {
    "oneOf": [
        _event_schema("speech_started", {**_COMMON, "onset_ms": _OFFSET, "onset_sample": _OFFSET}),
        _event_schema(
            "speech_stopped",
            {
                **_COMMON,
                "end_ms": _OFFSET,
                "end_sample": _OFFSET,
                "duration_ms": _OFFSET,
                "reason": {"enum": ["silence", "max_utterance", "end_of_input"]},
            },
        ),
    ]
}

SUMMARY_SCHEMA: Final[JsonObject] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["utterances", "samples_received", "samples_classified"],
    "properties": {
        "utterances": _OFFSET,
        "samples_received": _OFFSET,
        "samples_classified": _OFFSET,
    },
}

VAD_DESCRIPTOR: Final = CapabilityDescriptor(
    id=VAD_ID,
    version=VAD_VERSION,
    title="Voice activity detection",
    description=(
        "Finds where speech starts and stops in a live audio stream (WebRTC VAD). Open "
        "with {'sample_rate': 8000|16000|32000|48000} plus optional settings, then send "
        "chunks whose media is inline audio/pcm, codec pcm_s16le, that sample_rate, "
        "channels 1 (any whole number of samples per chunk), then complete the input. "
        "Output chunks are {'event': 'speech_started' | 'speech_stopped', ...} with "
        "times in milliseconds and samples from the start of input, on classifier-frame "
        "boundaries; 'decided_*' says how much input had been heard when the event was "
        "known. The completed frame summarises the call. No audio is kept."
    ),
    input_schema=OPEN_SCHEMA,
    output_schema=SUMMARY_SCHEMA,
    io_mode="bidirectional",
    input_chunk_schema=INPUT_CHUNK_SCHEMA,
    output_chunk_schema=OUTPUT_CHUNK_SCHEMA,
)


def event_payload(settings: VadSettings, event: VadEvent) -> JsonObject:
    """The wire form of one detector event (see ``OUTPUT_CHUNK_SCHEMA``)."""
    ms = settings.to_ms
    common: JsonObject = {
        "utterance": event.utterance,
        "start_ms": ms(event.start_sample),
        "start_sample": event.start_sample,
        "decided_ms": ms(event.decided_sample),
        "decided_sample": event.decided_sample,
    }
    if isinstance(event, SpeechStarted):
        return {
            "event": "speech_started",
            **common,
            "onset_ms": ms(event.onset_sample),
            "onset_sample": event.onset_sample,
        }
    return {
        "event": "speech_stopped",
        **common,
        "end_ms": ms(event.end_sample),
        "end_sample": event.end_sample,
        "duration_ms": ms(event.end_sample) - ms(event.start_sample),
        "reason": event.reason,
    }


def media_mismatch(settings: VadSettings, item: CapabilityStreamFrame) -> str | None:
    """Why a caller chunk is not mono PCM16 at the opened rate, or ``None``."""
    media = item.media
    if not isinstance(media, InlineMediaAttachment):
        return "each chunk carries its audio as inline audio/pcm media"
    if media.media_type != MEDIA_TYPE or media.codec != CODEC:
        return (
            f"audio must be {MEDIA_TYPE} with codec {CODEC}, not {media.media_type} {media.codec}"
        )
    meta = item.payload or {}
    rates = {media.sample_rate, meta.get("sample_rate", settings.sample_rate)}
    if rates != {settings.sample_rate}:
        return f"audio must be at the opened {settings.sample_rate} Hz, not {media.sample_rate}"
    if media.channels != 1:
        return f"audio must be mono (channels 1), not {media.channels} channels"
    if len(media.data) % BYTES_PER_SAMPLE:
        return f"{len(media.data)} bytes is not a whole number of 16-bit samples"
    return None


class VadProvider:
    """The first-party ``vad@1.0.0`` provider (no I/O at construction, no state between
    calls). Registered with ``CapabilityService.register_extension(..., builtin=True)``."""

    name = "skulk.vad"

    def capabilities(self) -> list[CapabilityDescriptor]:
        return [VAD_DESCRIPTOR]

    async def handle_input_stream(
        self,
        context: object,
        call: CapabilityCall,
        input_frames: AsyncIterator[CapabilityStreamFrame],
    ) -> AsyncIterator[CapabilityStreamFrame]:
        out = OutputFrames(call.call_id)

        try:
            # The fabric validated the payload against OPEN_SCHEMA; this is the same
            # bound checked again so the detector never runs outside it.
            settings = VadSettings.from_payload(call.payload)
        except VadSettingsError as exc:
            yield out("failed", error=CapabilityError(code="invalid_payload", message=str(exc)))
            return
        detector = VadDetector(settings)
        utterances = 0
        try:
            async for item in input_frames:
                if item.kind == "started":
                    continue
                if item.kind != "chunk":
                    break  # the caller's completed: end of input
                problem = media_mismatch(settings, item)
                if problem is not None:
                    error = CapabilityError(code="invalid_payload", message=problem)
                    yield out("failed", error=error)
                    return
                assert isinstance(item.media, InlineMediaAttachment)
                data = item.media.data
                if len(data) >= OFFLOAD_BYTES:
                    # NOTE: the detector is only ever touched by one feed at a time:
                    # this handler awaits each feed before reading the next chunk.
                    events = await asyncio.to_thread(detector.feed, data)
                else:
                    events = detector.feed(data)
                for event in events:
                    utterances += isinstance(event, SpeechStarted)
                    yield out("chunk", event_payload(settings, event))
            for event in detector.finish():
                yield out("chunk", event_payload(settings, event))
            summary: JsonObject = {
                "utterances": utterances,
                "samples_received": detector.bytes_received // BYTES_PER_SAMPLE,
                "samples_classified": detector.samples_classified,
            }
            yield out("completed", summary)
        finally:
            detector.close()
