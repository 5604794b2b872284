"""The catalog target format and the merge rules: pure, no I/O."""

from __future__ import annotations

import msgspec
import pytest

from skulk_core.config import ConfigError, parse_config, trust_changes
from skulk_core.ids import ModelId
from skulk_core.models.advisories import Advisory, Severity
from skulk_core.models.card_digest import card_digest
from skulk_core.models.catalog import CatalogSource, InstalledModel, build_catalog
from skulk_core.models.listing import model_list_item
from skulk_core.registry.format import (
    MAX_CATALOG_BYTES,
    CatalogRejectedError,
    Provenance,
    encode_catalog,
    parse_catalog,
    registry_card_id,
)
from tests.registry.repository import card


def _document() -> dict[str, object]:
    raw = encode_catalog([(card("org/a"), Provenance.FOXLIGHT), (card("org/b"), Provenance.AGENT)])
    document: dict[str, object] = msgspec.json.decode(raw)
    return document


def test_identities_derive_from_content_and_are_stamped_on_the_cards() -> None:
    a, b = card("org/a"), card("org/b")
    parsed = parse_catalog(encode_catalog([(a, Provenance.FOXLIGHT), (b, Provenance.AGENT)]))
    assert [c.model_id for c in parsed.cards] == ["org/a", "org/b"]
    first = parsed.cards[0]
    assert first.registry_card_id == f"card_{card_digest(a)}" == registry_card_id(a)
    assert first.registry_snapshot_id == parsed.snapshot_id
    assert parsed.snapshot_id.startswith("snap_")
    assert first.registry_provenance == "foxlight"
    # Any change of content is a new identity; the same content is the same one.
    assert registry_card_id(msgspec.structs.replace(a, context_length=4096)) != (
        first.registry_card_id
    )
    again = parse_catalog(encode_catalog([(b, Provenance.AGENT), (a, Provenance.FOXLIGHT)]))
    assert again.snapshot_id == parsed.snapshot_id


def _refused(document: dict[str, object]) -> str:
    with pytest.raises(CatalogRejectedError) as caught:
        parse_catalog(msgspec.json.encode(document))
    return str(caught.value)


def test_a_card_id_that_its_content_does_not_derive_is_refused() -> None:
    document = _document()
    cards = document["cards"]
    assert isinstance(cards, list)
    cards[0]["card"]["contextLength"] = 9999
    assert "claims identity" in _refused(document)


def test_a_snapshot_id_that_does_not_match_the_content_is_refused() -> None:
    document = _document()
    document["snapshot_id"] = "snap_" + "0" * 64
    assert "snapshot_id" in _refused(document)


def test_every_card_is_checked_like_a_custom_card() -> None:
    bad = card("org/c", source_revision="main")
    with pytest.raises(CatalogRejectedError, match="40-character"):
        encode_catalog([(bad, Provenance.COMMUNITY)])
    with pytest.raises(CatalogRejectedError, match="more than once"):
        encode_catalog([(card("org/a"), Provenance.COMMUNITY)] * 2)
    claimed = card("org/d", registry_card_id="card_x")
    with pytest.raises(CatalogRejectedError, match="registry_"):
        encode_catalog([(claimed, Provenance.COMMUNITY)])


def test_malformed_and_oversized_documents_are_refused() -> None:
    with pytest.raises(CatalogRejectedError, match="not valid JSON"):
        parse_catalog(b"{")
    with pytest.raises(CatalogRejectedError, match="malformed"):
        parse_catalog(b'{"format": "other", "snapshot_id": "x", "cards": []}')
    with pytest.raises(CatalogRejectedError, match="at most"):
        parse_catalog(b" " * (MAX_CATALOG_BYTES + 1))
    document = _document()
    document["advisories"] = [
        {"id": "SKA-1", "severity": "high", "summary": "s", "card_ids": ["not-a-card"]}
    ]
    assert "not a card id" in _refused(document)


def test_a_custom_card_overrides_the_registry_card_of_the_same_id() -> None:
    signed = parse_catalog(encode_catalog([(card("org/a"), Provenance.COMMUNITY)]))
    custom = msgspec.structs.replace(card("org/a", context_length=512), is_custom=True)
    catalog = build_catalog([], {ModelId("org/a"): custom}, signed.cards)
    entry = catalog.get("org/a")
    assert entry is not None
    item = model_list_item(entry)
    assert item.catalog_source is CatalogSource.CUSTOM
    assert item.context_length == 512
    assert item.registry_card_id is None and item.registry_provenance is None
    assert item.current_registry_identity == signed.cards[0].registry_card_id
    assert item.installed_verification == "custom"


def test_an_older_signed_install_sees_the_update_and_its_advisory() -> None:
    old = parse_catalog(encode_catalog([(card("org/a"), Provenance.COMMUNITY)])).cards[0]
    advisory = Advisory(
        id="SKA-2026-1",
        severity=Severity.HIGH,
        summary="the old quant mis-tokenises",
        card_ids=(str(old.registry_card_id),),
    )
    new = parse_catalog(
        encode_catalog([(card("org/a", context_length=4096), Provenance.COMMUNITY)], [advisory])
    )
    installed = InstalledModel(card=old, location="/models/a", installed_at=1)
    entry = build_catalog([installed], {}, new.cards, new.advisories).get("org/a")
    assert entry is not None
    item = model_list_item(entry)
    assert item.installed and item.installed_verification == "registry_verified"
    assert item.registry_card_id == old.registry_card_id
    assert item.current_registry_identity == new.cards[0].registry_card_id
    assert item.update_available
    assert [a.id for a in item.advisories] == ["SKA-2026-1"]
    # The same signed generation installed: current metadata, no update, no advisory.
    current = InstalledModel(card=new.cards[0], location="/models/a", installed_at=1)
    same = build_catalog([current], {}, new.cards, new.advisories).get("org/a")
    assert same is not None
    listed = model_list_item(same)
    assert listed.catalog_source is CatalogSource.REGISTRY
    assert not listed.update_available and listed.advisories == ()


@pytest.mark.parametrize(
    "url", ["https://user:secret@registry.example/", "ftp://registry.example", "https://h/?t=1"]
)
def test_a_registry_url_with_credentials_or_another_scheme_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match=r"registry\.url"):
        parse_config({"registry": {"url": url}})


def test_the_registry_source_is_a_trust_key() -> None:
    current = parse_config({"registry": {"url": "https://registry.example/skulk"}})
    moved = parse_config({"registry": {"url": "https://elsewhere.example/", "root": "/r.json"}})
    assert trust_changes(current, moved) == ["registry.url", "registry.root"]
