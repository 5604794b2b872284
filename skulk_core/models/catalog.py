"""The catalog: every model this node can name, merged from its sources.

Precedence, lowest first: cards installed beside bytes on this node, the signed
registry's verified catalog (``skulk_core.registry``; empty when there is none), then
the operator's custom cards, which always win. An entry remembers which
source supplied its card and whether this node holds the bytes for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum

import msgspec

from skulk_core.ids import ModelId
from skulk_core.models.advisories import Advisory, affecting
from skulk_core.models.cards import ModelCard


class CatalogSource(StrEnum):
    INSTALLED = "installed"
    REGISTRY = "registry"
    CUSTOM = "custom"


class InstalledModel(msgspec.Struct, frozen=True, kw_only=True):
    """A card recorded beside model bytes on this node.

    ``location`` is the model's directory; a GGUF card's file is
    ``location / card.gguf_file``. ``installed_at`` is Unix seconds (0 if unknown).
    """

    card: ModelCard
    location: str
    installed_at: int = 0


class CatalogEntry(msgspec.Struct, frozen=True, kw_only=True):
    """The effective card for one alias, and what stands behind it."""

    card: ModelCard
    catalog_source: CatalogSource
    installed: bool
    location: str | None = None
    installed_at: int = 0
    # The card recorded with the bytes, when they are present (its identity is the
    # active installed generation even when a newer card describes the alias).
    installed_card: ModelCard | None = None
    # The current signed card for the alias, when the registry has one.
    registry_card: ModelCard | None = None
    # Signed advisories naming the installed or the current card.
    advisories: tuple[Advisory, ...] = ()

    @property
    def model_id(self) -> ModelId:
        return self.card.model_id


class Catalog(msgspec.Struct, frozen=True, kw_only=True):
    by_id: dict[ModelId, CatalogEntry]

    def get(self, model_id: str) -> CatalogEntry | None:
        return self.by_id.get(ModelId(model_id))

    def entries(self) -> list[CatalogEntry]:
        """Every entry, sorted by model id."""
        return [self.by_id[key] for key in sorted(self.by_id)]

    def __len__(self) -> int:
        return len(self.by_id)

    def __contains__(self, model_id: object) -> bool:
        return model_id in self.by_id


def build_catalog(
    installed: Sequence[InstalledModel],
    custom: Mapping[ModelId, ModelCard],
    registry: Sequence[ModelCard] = (),
    advisories: Sequence[Advisory] = (),
) -> Catalog:
    """Merge installed < registry < custom cards into one catalog.

    When two installed records name the same id, the first one wins (callers pass
    them in a stable order).
    """
    entries: dict[ModelId, CatalogEntry] = {}
    for model in installed:
        if model.card.model_id in entries:
            continue
        entries[model.card.model_id] = CatalogEntry(
            card=model.card,
            catalog_source=_installed_source(model.card),
            installed=True,
            location=model.location,
            installed_at=model.installed_at,
            installed_card=model.card,
        )
    for card in registry:
        entries[card.model_id] = _with_registry_card(entries.get(card.model_id), card)
    for model_id, card in custom.items():
        entries[model_id] = _with_custom_card(entries.get(model_id), card)
    if advisories:
        for model_id, entry in entries.items():
            found = affecting(advisories, entry.installed_card, entry.registry_card)
            if found:
                entries[model_id] = msgspec.structs.replace(entry, advisories=found)
    return Catalog(by_id=entries)


def _installed_source(card: ModelCard) -> CatalogSource:
    return CatalogSource.REGISTRY if card.registry_card_id else CatalogSource.INSTALLED


def _with_registry_card(prior: CatalogEntry | None, card: ModelCard) -> CatalogEntry:
    installed = prior.installed_card if prior is not None else None
    if prior is None or installed is None or installed.qualification_only:
        # A retained qualification record never claims a signed generation.
        return CatalogEntry(
            card=card, catalog_source=CatalogSource.REGISTRY, installed=False, registry_card=card
        )
    if installed.registry_card_id and installed.registry_card_id == card.registry_card_id:
        # The same signed generation: current verified metadata refreshes the
        # retained sidecar's without reinstalling the weights.
        return msgspec.structs.replace(
            prior, card=card, catalog_source=CatalogSource.REGISTRY, registry_card=card
        )
    # A different generation: the installed card stays the one that launches here.
    return msgspec.structs.replace(prior, registry_card=card)


def _with_custom_card(prior: CatalogEntry | None, card: ModelCard) -> CatalogEntry:
    registry_card = prior.registry_card if prior is not None else None
    if (
        prior is not None
        and prior.installed_card is not None
        and same_artifact(prior.installed_card, card)
    ):
        # The override describes the bytes already here: still installed.
        return msgspec.structs.replace(prior, card=card, catalog_source=CatalogSource.CUSTOM)
    # Different (or no) bytes: the override names an artifact this node lacks.
    return CatalogEntry(
        card=card,
        catalog_source=CatalogSource.CUSTOM,
        installed=False,
        registry_card=registry_card,
    )


def same_artifact(a: ModelCard, b: ModelCard) -> bool:
    """Whether two cards name the same bytes (repository, revision and file)."""
    return (
        a.source_repository == b.source_repository
        and a.source_revision == b.source_revision
        and a.gguf_file == b.gguf_file
    )
