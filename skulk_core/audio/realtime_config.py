"""A realtime session's configuration and how ``session.update`` may change it (pure).

The input is fixed (mono PCM16 at 24 kHz, the model named by the URL); an update may
only confirm it. ``turn_detection`` may be ``null`` or a bounded ``server_vad``;
``response`` may select the response participant. Noise reduction, language hints and
a different model or codec are refused with a reason naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import msgspec

from skulk_core.audio.realtime_events import (
    INPUT_SAMPLE_RATE,
    MAX_OUTPUT_TOKENS_RANGE,
    AudioFormat,
    BetaSessionPatch,
    ResponseConfig,
    ServerVadConfig,
    SessionPatch,
    TranscriptionConfig,
)
from skulk_core.audio.realtime_turns import ServerVad, TurnSettingsError


@dataclass(frozen=True, slots=True)
class SessionConfig:
    model: str
    turn_detection: ServerVad | None = None
    response: ResponseConfig | None = None


@dataclass(frozen=True, slots=True)
class ConfigRefusal:
    code: str
    message: str
    param: str


def _format(found: AudioFormat) -> ConfigRefusal | None:
    if found.rate != INPUT_SAMPLE_RATE:
        return ConfigRefusal(
            "unsupported_audio_format",
            f"the input format is fixed: audio/pcm at {INPUT_SAMPLE_RATE} Hz",
            "session.audio.input.format",
        )
    return None


def _transcription(
    config: SessionConfig, found: TranscriptionConfig, param: str
) -> ConfigRefusal | None:
    if not isinstance(found.model, msgspec.UnsetType) and found.model != config.model:
        return ConfigRefusal(
            "model_change_unsupported",
            f"this session transcribes with {config.model} (chosen by the URL); the model "
            "cannot change",
            f"{param}.model",
        )
    for name in ("language", "prompt"):
        value = getattr(found, name)
        if not isinstance(value, msgspec.UnsetType) and value is not None:
            return ConfigRefusal(
                "unsupported_field",
                f"{name} hints are not supported by the realtime edge",
                f"{param}.{name}",
            )
    return None


def _turns(found: ServerVadConfig | None, param: str) -> ServerVad | ConfigRefusal | None:
    if found is None:
        return None
    values = {
        name: value
        for name in (
            "aggressiveness",
            "prefix_padding_ms",
            "silence_duration_ms",
            "minimum_speech_ms",
            "maximum_utterance_ms",
        )
        if not isinstance(value := getattr(found, name), msgspec.UnsetType)
    }
    try:
        return ServerVad(**values)
    except TurnSettingsError as exc:
        return ConfigRefusal("invalid_turn_detection", str(exc), param)


def _noise(found: object, param: str) -> ConfigRefusal | None:
    if isinstance(found, msgspec.UnsetType) or found is None:
        return None
    return ConfigRefusal("unsupported_field", "noise reduction is not supported", param)


def _response(found: ResponseConfig) -> ConfigRefusal | None:
    low, high = MAX_OUTPUT_TOKENS_RANGE
    if not low <= found.max_output_tokens <= high:
        return ConfigRefusal(
            "invalid_response",
            f"response.max_output_tokens must be between {low} and {high}",
            "session.response.max_output_tokens",
        )
    if not found.model:
        return ConfigRefusal(
            "invalid_response", "response.model is required", "session.response.model"
        )
    return None


def apply_update(config: SessionConfig, patch: SessionPatch) -> SessionConfig | ConfigRefusal:
    updated = config
    audio = patch.audio
    if not isinstance(audio, msgspec.UnsetType) and not isinstance(audio.input, msgspec.UnsetType):
        found = audio.input
        param = "session.audio.input"
        if not isinstance(found.format, msgspec.UnsetType):
            refusal = _format(found.format)
            if refusal is not None:
                return refusal
        if not isinstance(found.transcription, msgspec.UnsetType):
            refusal = _transcription(config, found.transcription, f"{param}.transcription")
            if refusal is not None:
                return refusal
        refusal = _noise(found.noise_reduction, f"{param}.noise_reduction")
        if refusal is not None:
            return refusal
        if not isinstance(found.turn_detection, msgspec.UnsetType):
            turns = _turns(found.turn_detection, f"{param}.turn_detection")
            if isinstance(turns, ConfigRefusal):
                return turns
            updated = replace(updated, turn_detection=turns)
    if not isinstance(patch.response, msgspec.UnsetType):
        if patch.response is not None:
            refusal = _response(patch.response)
            if refusal is not None:
                return refusal
        updated = replace(updated, response=patch.response)
    return updated


def apply_beta_update(
    config: SessionConfig, patch: BetaSessionPatch
) -> SessionConfig | ConfigRefusal:
    """``transcription_session.update`` (the earlier beta's field names)."""
    updated = config
    transcription = patch.input_audio_transcription
    if not isinstance(transcription, msgspec.UnsetType) and transcription is not None:
        refusal = _transcription(config, transcription, "session.input_audio_transcription")
        if refusal is not None:
            return refusal
    refusal = _noise(patch.input_audio_noise_reduction, "session.input_audio_noise_reduction")
    if refusal is not None:
        return refusal
    if not isinstance(patch.turn_detection, msgspec.UnsetType):
        turns = _turns(patch.turn_detection, "session.turn_detection")
        if isinstance(turns, ConfigRefusal):
            return turns
        updated = replace(updated, turn_detection=turns)
    return updated
