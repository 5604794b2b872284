"""Operator-supplied cards (``POST /models/add-card``): checked and normalised.

An added card keeps its pinned artifact contract but never its claims to a signed
identity: it becomes an unsigned custom card whatever the body said.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from skulk_core.models.cards import ModelCard
from skulk_core.models.requirements import MAX_MODEL_ID_CHARS

# A full Git commit id, as Hugging Face reports it: 40 lowercase hex digits.
SOURCE_REVISION_PATTERN: Final = re.compile(r"[0-9a-f]{40}")


class CardRejectedError(ValueError):
    """The card cannot be accepted as a custom card; the message says why."""


def normalize_custom_card(card: ModelCard, *, qualification_only: bool = False) -> ModelCard:
    """Validate ``card`` and force unsigned custom-card semantics on it.

    ``is_custom`` becomes true, every ``registry_*`` identity is removed, and
    ``qualification_only`` is set only for service-bearer installs.
    """
    if not 1 <= len(card.model_id) <= MAX_MODEL_ID_CHARS:
        raise CardRejectedError(f"modelId must be 1 to {MAX_MODEL_ID_CHARS} characters")
    revision = card.source_revision
    if revision is None or SOURCE_REVISION_PATTERN.fullmatch(revision) is None:
        raise CardRejectedError(
            "sourceRevision must be a full 40-character lowercase hexadecimal commit id"
        )
    if card.storage_size.in_bytes < 0:
        raise CardRejectedError("storageSize.inBytes must not be negative")
    if card.n_layers < 1:
        raise CardRejectedError("nLayers must be at least 1")
    for name, value in _optional_geometry(card):
        if value is not None and value < 1:
            raise CardRejectedError(f"{name} must be at least 1 when given")
    if not card.tasks:
        raise CardRejectedError("tasks must name at least one task")
    return msgspec.structs.replace(
        card,
        is_custom=True,
        qualification_only=qualification_only,
        registry_card_id=None,
        registry_snapshot_id=None,
        registry_provenance=None,
    )


def _optional_geometry(card: ModelCard) -> tuple[tuple[str, int | None], ...]:
    return (
        ("hiddenSize", card.hidden_size),
        ("contextLength", card.context_length),
        ("numKeyValueHeads", card.num_key_value_heads),
        ("headDim", card.head_dim),
        ("numAttentionHeads", card.num_attention_heads),
    )
