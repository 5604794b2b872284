"""Model cards: what Skulk knows about a model before it loads a byte of it.

The wire shape is the one ``POST /models/add-card`` takes (camelCase). Cards are
immutable values; the catalog merges them by source precedence.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec

from skulk_core.ids import ModelId


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
