"""The signed catalog target: one JSON document of cards, its parsing and its checks.

The registry publishes ``catalog.json`` as a TUF target. It holds every card with its
immutable, content-derived ``registry_card_id`` (``card_`` + the SHA-256 card digest of
the card with its registry identity cleared), the audited provenance of each card, the
signed advisories, and a ``snapshot_id`` derived from all of that. :func:`parse_catalog`
recomputes both identities, so a document whose ids do not match its content is refused
even when its signature is good.

Every card is checked as a custom card would be (``POST /models/add-card``): a signed
card pins the same immutable artifact contract.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Final, Literal

import msgspec

from skulk_core.models.advisories import Advisory
from skulk_core.models.card_digest import card_digest
from skulk_core.models.cards import ModelCard
from skulk_core.models.custom_cards import CardRejectedError, normalize_custom_card
from skulk_core.registry.bundles import bundle_problem

CATALOG_TARGET: Final = "catalog.json"
"""The TUF target name the catalog is published under."""
CATALOG_FORMAT: Final = "skulk.registry.catalog/v1"
MAX_CATALOG_BYTES: Final = 16 * 1024 * 1024
MAX_CARDS: Final = 4096
MAX_ADVISORIES: Final = 1024
CARD_ID_PATTERN: Final = re.compile(r"card_[0-9a-f]{64}")
SNAPSHOT_ID_PATTERN: Final = re.compile(r"snap_[0-9a-f]{64}")


class Provenance(StrEnum):
    """The audited origin of a signed card (``registry_provenance``)."""

    FOXLIGHT = "foxlight"
    AGENT = "agent"
    COMMUNITY = "community"


class SignedCard(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    registry_card_id: str
    provenance: Provenance
    card: ModelCard


class CatalogDocument(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The wire form of ``catalog.json``."""

    format: Literal["skulk.registry.catalog/v1"]
    snapshot_id: str
    cards: Annotated[tuple[SignedCard, ...], msgspec.Meta(max_length=MAX_CARDS)]
    advisories: Annotated[tuple[Advisory, ...], msgspec.Meta(max_length=MAX_ADVISORIES)] = ()


class VerifiedCatalog(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed, checked catalog: cards stamped with their signed identity."""

    snapshot_id: str
    cards: tuple[ModelCard, ...]
    advisories: tuple[Advisory, ...] = ()


class CatalogRejectedError(ValueError):
    """The catalog document cannot be used; the message says why."""


def unsigned(card: ModelCard) -> ModelCard:
    """``card`` with every registry identity and local marker cleared."""
    return msgspec.structs.replace(
        card,
        registry_card_id=None,
        registry_snapshot_id=None,
        registry_provenance=None,
        is_custom=False,
        qualification_only=False,
    )


def registry_card_id(card: ModelCard) -> str:
    """The immutable, content-derived identity of ``card``'s signed generation."""
    return f"card_{card_digest(unsigned(card))}"


def snapshot_id(cards: Sequence[SignedCard], advisories: Sequence[Advisory]) -> str:
    """The identity of one catalog's content: its card ids, provenance and advisories."""
    document = {
        "cards": sorted([c.registry_card_id, c.provenance.value] for c in cards),
        "advisories": sorted(
            (msgspec.to_builtins(a) for a in advisories), key=lambda a: str(a["id"])
        ),
    }
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return f"snap_{hashlib.sha256(canonical.encode('ascii')).hexdigest()}"


def check_card(card: ModelCard) -> None:
    """Refuse a card that could not be added as a custom card, or that already claims
    an identity (the document's envelope carries it)."""
    if card.registry_card_id or card.registry_snapshot_id or card.registry_provenance:
        raise CatalogRejectedError(
            f"card {card.model_id!r} carries registry_* fields inside the card; the catalog "
            "envelope holds its identity"
        )
    if card.is_custom or card.qualification_only:
        raise CatalogRejectedError(
            f"card {card.model_id!r} is marked custom or qualification_only; a signed card is "
            "neither"
        )
    try:
        normalize_custom_card(card)
    except CardRejectedError as exc:
        raise CatalogRejectedError(f"card {card.model_id!r}: {exc}") from None
    if card.artifact_bundle is not None:
        problem = bundle_problem(card.artifact_bundle)
        if problem is not None:
            raise CatalogRejectedError(f"card {card.model_id!r}: {problem}")


def encode_catalog(
    cards: Sequence[tuple[ModelCard, Provenance]], advisories: Sequence[Advisory] = ()
) -> bytes:
    """The ``catalog.json`` bytes for ``cards``: identities computed, everything checked
    (what a publisher signs; :func:`parse_catalog` accepts exactly this)."""
    signed = []
    for card, provenance in cards:
        check_card(card)
        signed.append(
            SignedCard(registry_card_id=registry_card_id(card), provenance=provenance, card=card)
        )
    signed.sort(key=lambda c: (c.card.model_id, c.registry_card_id))
    document = CatalogDocument(
        format=CATALOG_FORMAT,
        snapshot_id=snapshot_id(signed, advisories),
        cards=tuple(signed),
        advisories=tuple(sorted(advisories, key=lambda a: a.id)),
    )
    raw = msgspec.json.encode(document, order="deterministic")
    _check(document, len(raw))
    return raw


def parse_catalog(raw: bytes) -> VerifiedCatalog:
    """Parse and check a catalog document; its cards come back stamped with their
    ``registry_card_id``, ``registry_snapshot_id`` and ``registry_provenance``."""
    if len(raw) > MAX_CATALOG_BYTES:
        raise CatalogRejectedError(
            f"the catalog is {len(raw)} bytes; at most {MAX_CATALOG_BYTES} are accepted"
        )
    try:
        document = msgspec.json.decode(raw, type=CatalogDocument)
    except msgspec.ValidationError as exc:
        raise CatalogRejectedError(f"the catalog is malformed: {exc}") from None
    except msgspec.DecodeError as exc:
        raise CatalogRejectedError(f"the catalog is not valid JSON: {exc}") from None
    _check(document, len(raw))
    return VerifiedCatalog(
        snapshot_id=document.snapshot_id,
        cards=tuple(
            msgspec.structs.replace(
                signed.card,
                registry_card_id=signed.registry_card_id,
                registry_snapshot_id=document.snapshot_id,
                registry_provenance=signed.provenance.value,
            )
            for signed in document.cards
        ),
        advisories=document.advisories,
    )


def _check(document: CatalogDocument, size: int) -> None:
    if size > MAX_CATALOG_BYTES:
        raise CatalogRejectedError(
            f"the catalog is {size} bytes; at most {MAX_CATALOG_BYTES} are accepted"
        )
    seen: set[str] = set()
    for signed in document.cards:
        card = signed.card
        check_card(card)
        if card.model_id in seen:
            raise CatalogRejectedError(f"card {card.model_id!r} appears more than once")
        seen.add(card.model_id)
        expected = registry_card_id(card)
        if signed.registry_card_id != expected:
            raise CatalogRejectedError(
                f"card {card.model_id!r} claims identity {signed.registry_card_id!r} but its "
                f"content derives {expected!r}"
            )
    for advisory in document.advisories:
        for card_id in advisory.card_ids:
            if CARD_ID_PATTERN.fullmatch(card_id) is None:
                raise CatalogRejectedError(
                    f"advisory {advisory.id!r} names {card_id!r}, which is not a card id"
                )
    if SNAPSHOT_ID_PATTERN.fullmatch(document.snapshot_id) is None or document.snapshot_id != (
        snapshot_id(document.cards, document.advisories)
    ):
        raise CatalogRejectedError("the catalog's snapshot_id does not match its content")
