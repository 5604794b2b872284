"""Model cards: what Skulk knows about a model before it loads a byte of it.

The wire shape is the one ``POST /models/add-card`` takes (camelCase). Cards are
immutable values; the catalog merges them by source precedence.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

import msgspec

from skulk_core.ids import ModelId
from skulk_core.models.media_cards import MusicCard, VideoCard


class Memory(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    in_bytes: int

    @classmethod
    def from_gb(cls, gb: float) -> Memory:
        return cls(in_bytes=int(gb * 1024**3))

    @property
    def in_gb(self) -> float:
        return self.in_bytes / 1024**3


class ModelLicense(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Operator-facing license facts. Informational; nothing is enforced."""

    name: str
    url: str | None = None
    spdx_id: str | None = None
    notice: str | None = None
    display_name: str | None = None


class ModelTask(StrEnum):
    TEXT_GENERATION = "TextGeneration"
    TEXT_EMBEDDING = "TextEmbedding"
    TEXT_TO_SPEECH = "TextToSpeech"
    SPEECH_TO_TEXT = "SpeechToText"
    TEXT_TO_IMAGE = "TextToImage"
    IMAGE_TO_IMAGE = "ImageToImage"
    TEXT_TO_VIDEO = "TextToVideo"
    TEXT_TO_MUSIC = "TextToMusic"


class ModelKind(StrEnum):
    """How a text model was trained to be prompted.

    ``instruct`` models answer turns through their chat template; ``base`` models
    continue text, so they are served with no template: a chat request's turns reach
    them as plain text (as Ollama's ``{{ .Prompt }}`` template does).
    """

    INSTRUCT = "instruct"
    BASE = "base"


class AudioVoice(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One stable voice a speech card declares (``GET /v1/audio/voices``)."""

    id: str
    name: str
    kind: Literal["builtin", "reference"] = "builtin"
    preferred_languages: tuple[str, ...] = ()


class AudioCard(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A speech card's declared ``audio`` metadata, with the spec's field names.

    ``kind`` is ``"tts"`` (speech synthesis) or ``"stt"`` (speech to text). Nothing
    here is inferred: a flag is true only where the card's engine was validated."""

    kind: Literal["tts", "stt"]
    response_formats: tuple[str, ...] = ()
    default_response_format: str | None = None
    supports_streaming: bool = False
    supports_realtime: bool = False
    supports_translation: bool = False
    supports_voice_listing: bool = False
    supports_reference_audio: bool = False
    reference_audio_note: str | None = None
    """Why the card's engine cannot condition on reference audio, when it cannot: shown
    in ``/v1/models`` and named by the 400 that refuses an upload."""
    voices: tuple[AudioVoice, ...] = ()
    default_voice: str | None = None
    sample_rates: tuple[int, ...] = ()


class ArtifactRole(StrEnum):
    """What an artifact is to the card that owns it (``artifact_role``)."""

    BASE = "base"
    VISION_WEIGHTS = "vision_weights"
    MTP_SIDECAR = "mtp_sidecar"
    ASSISTANT = "assistant"
    SERVED_DRAFT = "served_draft"
    VLLM_DRAFT = "vllm_draft"
    VIDEO_COMPANION = "video_companion"


class BundleFile(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One required file of a v2 card's artifact bundle (path relative to the root)."""

    path: str
    size: int


class ArtifactBundle(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """A v2 card's exact file bundle: its repository-relative root, required files and
    immutable content-derived ``bundle_id`` (``skulk_core.registry.bundles``)."""

    bundle_id: str
    files: tuple[BundleFile, ...]
    root: str = ""


class CompanionArtifact(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True
):
    """A companion the owning card declares (a draft, vision weights, ...): only a
    download naming exactly this repository, revision, file and role is its companion."""

    role: ArtifactRole
    source_repository: str
    source_revision: str
    gguf_file: str | None = None
    model_id: str | None = None
    """The companion's own alias, when the declaration fixes one."""


class ModelCard(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """One model, as the catalog knows it.

    Geometry fields (``n_layers``, ``num_key_value_heads``, ``head_dim``) drive the
    placement planner's memory arithmetic; for GGUF models they are read from the
    file header, never guessed.
    """

    model_id: ModelId
    storage_size: Memory
    n_layers: int
    tasks: tuple[ModelTask, ...] = (ModelTask.TEXT_GENERATION,)
    hidden_size: int | None = None
    supports_tensor: bool = False
    source_repository: str | None = None
    source_revision: str | None = None
    gguf_file: str | None = None
    architecture: str | None = None
    context_length: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    chat_template: str | None = None
    model_kind: ModelKind = ModelKind.INSTRUCT
    """``base`` cards are served without their chat template (see :func:`served_kind`).
    The default keeps every card written before the field existed as it was (and, left
    out of the wire form, its digest)."""
    # The strings a chat template may reference as ``bos_token``/``eos_token``. The
    # engine adds the BOS token itself when the rendered prompt does not start with it.
    bos_token: str | None = None
    eos_token: str | None = None
    capabilities: tuple[str, ...] = ()
    compatible_backends: tuple[str, ...] = ()
    base_model: str | None = None
    quantization: str | None = None
    display_name: str | None = None
    is_custom: bool = False
    qualification_only: bool = False
    num_attention_heads: int | None = None
    license: ModelLicense | None = None
    # Signed-registry identity. Only registry cards carry these; ``POST
    # /models/add-card`` strips them, and ``registry_snapshot_id`` is the one field
    # the card digest leaves out (a new snapshot does not change the card).
    registry_card_id: str | None = None
    registry_snapshot_id: str | None = None
    registry_provenance: str | None = None
    # Speech cards (TextToSpeech, SpeechToText) declare their audio contract here.
    audio: AudioCard | None = None
    # Registry v2: the exact file bundle, and the companions this card owns. Absent
    # from v1 cards (their digests, and so their registry_card_id, do not change).
    artifact_bundle: ArtifactBundle | None = None
    companions: tuple[CompanionArtifact, ...] = ()
    # Media job cards (TextToVideo, TextToMusic) declare their generation contract here.
    video: VideoCard | None = None
    music: MusicCard | None = None


def served_kind(card: ModelCard) -> ModelKind:
    """How the card is served: ``base`` when it says so or has no chat template to
    answer turns with (its prompt is then the turns' plain text either way)."""
    if card.model_kind == ModelKind.BASE or card.chat_template is None:
        return ModelKind.BASE
    return ModelKind.INSTRUCT


def is_directory_card(card: ModelCard) -> bool:
    """Whether the card's engine loads its model directory rather than one GGUF file
    (speech, image, video and music cards)."""
    tasks = card.tasks
    images = ModelTask.TEXT_TO_IMAGE in tasks or ModelTask.IMAGE_TO_IMAGE in tasks
    media = card.audio is not None or card.video is not None or card.music is not None
    return media or (images and ModelTask.TEXT_GENERATION not in tasks)
