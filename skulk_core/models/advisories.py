"""Signed advisories: warn-only security notices naming exact card generations.

The registry signs them into ``catalog.json`` (:mod:`skulk_core.registry.format`);
the model catalog reads which ones affect an entry's installed or current card.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Final

import msgspec

from skulk_core.models.cards import ModelCard

ADVISORY_ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
MAX_ADVISORY_CARDS: Final = 4096
"""An advisory names at most as many cards as one catalog holds."""


class Severity(StrEnum):
    LOW = "low"
    MODERATE = "moderate"
    HIGH = "high"
    CRITICAL = "critical"


class Advisory(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A signed, warn-only security notice about exact card generations."""

    id: Annotated[str, msgspec.Meta(pattern=ADVISORY_ID_PATTERN)]
    severity: Severity
    summary: Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]
    card_ids: Annotated[tuple[str, ...], msgspec.Meta(min_length=1, max_length=MAX_ADVISORY_CARDS)]
    url: Annotated[str, msgspec.Meta(max_length=2048)] | None = None


def affecting(advisories: Sequence[Advisory], *cards: ModelCard | None) -> tuple[Advisory, ...]:
    """The advisories naming any of ``cards``' signed identities, in id order."""
    ids = {card.registry_card_id for card in cards if card is not None and card.registry_card_id}
    return tuple(a for a in advisories if ids.intersection(a.card_ids))
