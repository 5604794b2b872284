"""The store registry's standing of a stored generation against the signed registry,
and the cache inventory's coverage states (pure: ``skulk_core.store.currency``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from skulk_core.ids import ModelId, NodeId
from skulk_core.models.advisories import Advisory, Severity
from skulk_core.models.cards import Memory, ModelCard
from skulk_core.store.currency import STALE_READING_SECONDS, Coverage, coverage, currency

A, B = NodeId("a"), NodeId("b")
NOW = datetime(2026, 1, 1, tzinfo=UTC)
CURRENT = "card_" + "c" * 64
OLDER = "card_" + "a" * 64


def card(card_id: str | None) -> ModelCard:
    return ModelCard(
        model_id=ModelId("org/model"),
        storage_size=Memory(in_bytes=1),
        n_layers=1,
        registry_card_id=card_id,
    )


def advisory(card_id: str) -> Advisory:
    return Advisory(
        id="SKULK-2026-0001", severity=Severity.HIGH, summary="bad", card_ids=(card_id,)
    )


def test_a_generation_under_the_current_card_is_current() -> None:
    standing = currency(CURRENT, card(CURRENT), [])
    assert standing.current_registry_identity == CURRENT
    assert not standing.installed_not_current and not standing.update_available


def test_an_older_custom_or_legacy_generation_has_an_update() -> None:
    for installed in (OLDER, None):
        standing = currency(installed, card(CURRENT), [])
        assert standing.installed_not_current and standing.update_available


def test_without_a_current_signed_card_nothing_is_current_and_nothing_updates() -> None:
    standing = currency(OLDER, None, [])
    assert standing.current_registry_identity is None
    assert standing.installed_not_current and not standing.update_available


def test_advisories_name_the_installed_or_the_current_card_only() -> None:
    found = currency(OLDER, card(CURRENT), [advisory(OLDER), advisory("card_" + "f" * 64)])
    assert [a.card_ids for a in found.advisories] == [(OLDER,)]


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def test_every_fresh_reading_is_current() -> None:
    readings = {A: ago(1), B: ago(2)}
    assert coverage([A, B], readings, {}, NOW) == Coverage.CURRENT


def test_a_newly_live_node_without_a_reading_is_syncing() -> None:
    assert coverage([A, B], {A: ago(1)}, {B: ago(1)}, NOW) == Coverage.SYNCING


def test_a_stale_reading_or_one_missing_after_convergence_is_degraded() -> None:
    stale = {A: ago(1), B: ago(STALE_READING_SECONDS + 1)}
    assert coverage([A, B], stale, {}, NOW) == Coverage.DEGRADED
    gone = {B: ago(STALE_READING_SECONDS + 30)}
    assert coverage([A, B], {A: ago(1)}, gone, NOW) == Coverage.DEGRADED


def test_no_reading_at_all_is_unavailable() -> None:
    assert coverage([A], {}, {A: ago(1)}, NOW) == Coverage.UNAVAILABLE
    assert coverage([A], {NodeId("other"): ago(1)}, {}, NOW) == Coverage.UNAVAILABLE
