"""How ``configure_source`` changes an installation's release source, decided without
touching the disk: the revision fence, initial setup, and the credential rules."""

from __future__ import annotations

import pytest

from skulk_core.plugins.errors import PluginRefusal
from skulk_core.plugins.trust import PublisherTrust
from skulk_host.plugin_manager.protocol import SourceUpdate
from skulk_host.plugin_manager.source_record import SourceRecord, next_source

NOW = 1_800_000_000
TRUST = PublisherTrust(revision=1, expires_at=NOW + 3600, publishers={})
SET_UP = SourceRecord(
    revision=3,
    base_url="https://feed.example/acme/",
    trust=TRUST,
    credential_reference="old",
)


def _next(current: SourceRecord, update: SourceUpdate, installing: bool = False) -> SourceRecord:
    return next_source(current, update, installing=installing, now=NOW, new_reference="new")


def _refused(current: SourceRecord, update: SourceUpdate, installing: bool = False) -> str:
    with pytest.raises(PluginRefusal) as refused:
        _next(current, update, installing)
    return refused.value.reason


def test_a_stale_revision_or_a_running_install_is_refused() -> None:
    assert _refused(SET_UP, SourceUpdate(expected_revision=2)) == "malformed"
    assert _refused(SET_UP, SourceUpdate(expected_revision=3), installing=True) == "malformed"


def test_initial_setup_needs_the_directory_and_the_trust() -> None:
    assert _refused(SourceRecord(), SourceUpdate(expected_revision=0)) == "source_invalid"
    update = SourceUpdate(expected_revision=0, base_url="https://feed.example/acme/")
    assert _refused(SourceRecord(), update) == "source_invalid"


def test_an_update_bumps_the_revision_and_keeps_what_it_omits() -> None:
    record = _next(SET_UP, SourceUpdate(expected_revision=3, metadata_filename="r.json"))
    assert record.revision == 4
    assert (record.base_url, record.trust) == (SET_UP.base_url, TRUST)
    assert record.metadata_filename == "r.json"
    assert record.credential_reference == "old"


def test_a_new_token_gets_the_new_reference_and_clear_token_drops_it() -> None:
    assert _next(SET_UP, SourceUpdate(expected_revision=3, token="t")).credential_reference == "new"
    cleared = _next(SET_UP, SourceUpdate(expected_revision=3, clear_token=True))
    assert cleared.credential_reference is None


def test_moving_a_credential_bearing_source_needs_the_credential_again() -> None:
    moved = SourceUpdate(expected_revision=3, base_url="https://other.example/acme/")
    assert _refused(SET_UP, moved) == "source_invalid"
    again = SourceUpdate(expected_revision=3, base_url="https://other.example/acme/", token="t")
    assert _next(SET_UP, again).base_url == "https://other.example/acme/"
