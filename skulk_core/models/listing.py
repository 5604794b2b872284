"""The ``/v1/models`` item: one catalog entry as clients see it (snake_case).

Everything here derives from the catalog entry; nothing is looked up. Fields the
spec keeps for compatibility (``remote_code_*``) carry the spec's fixed values.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from skulk_core.models.advisories import Advisory
from skulk_core.models.card_digest import card_digest
from skulk_core.models.cards import ModelCard, ModelKind, ModelTask, served_kind
from skulk_core.models.catalog import CatalogEntry, CatalogSource
from skulk_core.models.media_cards import MusicCard, VideoCard
from skulk_core.models.signed_identity import (
    current_registry_identity,
    installed_verification,
    update_available,
)

OWNED_BY: Final = "skulk"

# Tasks name what a model does; capabilities are the labels clients filter on.
TASK_CAPABILITIES: Final[dict[ModelTask, str]] = {
    ModelTask.TEXT_GENERATION: "text",
    ModelTask.TEXT_EMBEDDING: "embedding",
    ModelTask.TEXT_TO_SPEECH: "tts",
    ModelTask.SPEECH_TO_TEXT: "stt",
    ModelTask.TEXT_TO_IMAGE: "image",
    ModelTask.IMAGE_TO_IMAGE: "image",
    ModelTask.TEXT_TO_VIDEO: "video",
    ModelTask.TEXT_TO_MUSIC: "music",
}
# Capabilities that also become UI badges (``tags``), in badge order.
TAG_CAPABILITIES: Final = ("vision", "thinking", "embedding", "tts", "stt", "optiq")


class ResolvedCapabilities(msgspec.Struct, frozen=True, kw_only=True):
    supports_thinking: bool
    supports_thinking_toggle: bool
    supports_vision: bool
    supports_tools: bool
    supports_speech_synthesis: bool
    supports_transcription: bool
    supports_speech_translation: bool
    supports_audio_output: bool
    supports_realtime_audio: bool
    audio_response_formats: tuple[str, ...]


class AudioInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Declared speech metadata; empty for models that neither speak nor listen."""

    kind: Literal["tts", "stt"] | None = None
    response_formats: tuple[str, ...] = ()
    supports_streaming: bool = False
    supports_realtime: bool = False
    voices: tuple[str, ...] = ()
    default_voice: str | None = None
    supports_voice_selection: bool = False
    supports_reference_audio: bool = False
    reference_audio_note: str | None = None
    """Why the model cannot condition on reference audio (null where it can or the
    card does not say)."""
    supports_translation: bool = False
    sample_rates: tuple[int, ...] = ()


class RuntimeInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Speculative-decoding companions; ModelCard declares none yet, so all null."""

    mtp_sidecar_repo: str | None = None
    mtp_sidecar_revision: str | None = None
    assistant_model_repo: str | None = None
    assistant_model_revision: str | None = None
    served_spec_draft_repo: str | None = None
    served_spec_draft_revision: str | None = None
    vllm_spec_draft_repo: str | None = None
    vllm_spec_draft_revision: str | None = None


class LicenseInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    url: str | None
    spdx_id: str | None
    notice: str | None
    display_name: str | None


class ModelListItem(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    name: str
    capabilities: tuple[str, ...]
    tags: tuple[str, ...]
    tasks: tuple[str, ...]
    model_kind: ModelKind | None
    """How a text model is served: ``instruct`` (its chat template answers turns) or
    ``base`` (it continues text: use ``/v1/completions``; chat turns reach it as plain
    text). ``None`` for models that generate no text."""
    supports_tensor: bool
    base_model: str | None
    artifact_repository: str
    artifact_file: str | None
    source_revision: str | None
    catalog_source: CatalogSource
    registry_card_id: str | None
    registry_snapshot_id: str | None
    registry_provenance: str | None
    installed: bool
    active_installed_identity: str | None
    installed_verification: str | None
    current_registry_identity: str | None
    update_available: bool
    advisories: tuple[Advisory, ...]
    remote_code_approval_required: bool
    remote_code_trust_identity: str | None
    remote_code_approved_for_cluster: bool
    remote_code_approved_on_this_node: bool
    remote_code_automatically_trusted: bool
    audio: AudioInfo
    music: MusicCard | None
    """The text-to-music contract (family, lyric rule, seconds, wav); null otherwise."""
    video: VideoCard | None
    """The declared video generation contract; null for non-video cards."""
    license: LicenseInfo | None
    resolved_capabilities: ResolvedCapabilities
    runtime: RuntimeInfo
    context_length: int | None
    storage_size_bytes: int
    architecture: str | None
    quantization: str | None
    card_digest: str
    system_role: str | None = None
    """``"steward"`` on the intelligent fabric's virtual model entry (``skulk/steward``),
    absent on every ordinary model."""


class ModelList(msgspec.Struct, frozen=True, kw_only=True):
    object: Literal["list"] = "list"
    data: tuple[ModelListItem, ...]


ENGINE_REFERENCE_AUDIO_NOTES: Final[dict[str, str]] = {
    # NOTE: ``skulk_core.placement.backends.BACKEND_ONNXRUNTIME`` (Piper's engine),
    # spelled out because placement imports this package.
    "onnxruntime": (
        "the Piper engine synthesizes only the voice its model was trained as; it has no "
        "speaker encoder and cannot condition on reference audio"
    ),
}
"""Why a speech engine cannot condition on reference audio, by its backend tag: the
answer for a card installed before it said so itself."""


def reference_audio_note(card: ModelCard) -> str | None:
    """Why ``card`` cannot condition on reference audio: its own note, else its
    engine's; None for a card that declares reference audio or names neither."""
    audio = card.audio
    if audio is None or audio.kind != "tts" or audio.supports_reference_audio:
        return None
    if audio.reference_audio_note:
        return audio.reference_audio_note
    for backend in card.compatible_backends:
        if backend in ENGINE_REFERENCE_AUDIO_NOTES:
            return ENGINE_REFERENCE_AUDIO_NOTES[backend]
    return None


def card_capabilities(card: ModelCard) -> tuple[str, ...]:
    """Functional capabilities: those implied by the tasks, then the declared ones."""
    found = [TASK_CAPABILITIES[task] for task in card.tasks] + list(card.capabilities)
    return tuple(dict.fromkeys(found))


def card_tags(card: ModelCard) -> tuple[str, ...]:
    capabilities = card_capabilities(card)
    tags: list[str] = [tag for tag in TAG_CAPABILITIES if tag in capabilities]
    if card.supports_tensor:
        tags.append("tensor")
    return tuple(tags)


def resolved_capabilities(card: ModelCard) -> ResolvedCapabilities:
    capabilities = card_capabilities(card)
    speaks = ModelTask.TEXT_TO_SPEECH in card.tasks
    toggle = "thinking_toggle" in capabilities
    return ResolvedCapabilities(
        supports_thinking=toggle or "thinking" in capabilities,
        supports_thinking_toggle=toggle,
        supports_vision="vision" in capabilities,
        supports_tools="tools" in capabilities,
        supports_speech_synthesis=speaks,
        supports_transcription=ModelTask.SPEECH_TO_TEXT in card.tasks,
        supports_speech_translation=card.audio is not None and card.audio.supports_translation,
        supports_audio_output=speaks,
        supports_realtime_audio=card.audio is not None and card.audio.supports_realtime,
        audio_response_formats=card.audio.response_formats if card.audio and speaks else (),
    )


def _audio(card: ModelCard) -> AudioInfo:
    declared = card.audio
    if declared is not None:
        return AudioInfo(
            kind=declared.kind,
            response_formats=declared.response_formats,
            supports_streaming=declared.supports_streaming,
            supports_realtime=declared.supports_realtime,
            voices=tuple(voice.id for voice in declared.voices),
            default_voice=declared.default_voice,
            supports_voice_selection=bool(declared.voices),
            supports_reference_audio=declared.supports_reference_audio,
            reference_audio_note=reference_audio_note(card),
            supports_translation=declared.supports_translation,
            sample_rates=declared.sample_rates,
        )
    if ModelTask.TEXT_TO_SPEECH in card.tasks:
        return AudioInfo(kind="tts")
    if ModelTask.SPEECH_TO_TEXT in card.tasks:
        return AudioInfo(kind="stt")
    return AudioInfo()


def model_list_item(entry: CatalogEntry) -> ModelListItem:
    """Render one catalog entry as a ``/v1/models`` item."""
    card = entry.card
    license_ = card.license
    installed = entry.installed_card if entry.installed else None
    verification = installed_verification(entry)
    return ModelListItem(
        id=card.model_id,
        created=entry.installed_at if entry.installed else 0,
        owned_by=OWNED_BY,
        name=card.display_name or card.model_id,
        capabilities=card_capabilities(card),
        tags=card_tags(card),
        tasks=tuple(task.value for task in card.tasks),
        model_kind=served_kind(card) if ModelTask.TEXT_GENERATION in card.tasks else None,
        supports_tensor=card.supports_tensor,
        base_model=card.base_model,
        artifact_repository=card.source_repository or card.model_id,
        artifact_file=card.gguf_file,
        source_revision=card.source_revision,
        catalog_source=entry.catalog_source,
        registry_card_id=card.registry_card_id,
        registry_snapshot_id=card.registry_snapshot_id,
        registry_provenance=card.registry_provenance,
        installed=entry.installed,
        active_installed_identity=None if installed is None else _identity(installed),
        installed_verification=None if verification is None else verification.value,
        current_registry_identity=current_registry_identity(entry),
        update_available=update_available(entry),
        advisories=entry.advisories,
        remote_code_approval_required=False,
        remote_code_trust_identity=None,
        remote_code_approved_for_cluster=False,
        remote_code_approved_on_this_node=False,
        # Every catalog card was authorized by publication, explicit addition or
        # the release that installed it.
        remote_code_automatically_trusted=True,
        audio=_audio(card),
        music=card.music,
        video=card.video,
        license=None
        if license_ is None
        else LicenseInfo(
            name=license_.name,
            url=license_.url,
            spdx_id=license_.spdx_id,
            notice=license_.notice,
            display_name=license_.display_name,
        ),
        resolved_capabilities=resolved_capabilities(card),
        runtime=RuntimeInfo(),
        context_length=card.context_length,
        storage_size_bytes=card.storage_size.in_bytes,
        architecture=card.architecture,
        quantization=card.quantization,
        card_digest=card_digest(card),
    )


def _identity(card: ModelCard) -> str:
    """The durable identity of an installed generation: its signed id, else its digest."""
    return card.registry_card_id or f"sha256:{card_digest(card)}"
