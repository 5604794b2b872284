"""The registry client against a real TUF repository served on loopback: python-tuf's
refusals become status facts, and the last verified catalog outlives them for 30 days."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skulk_core.config import RegistryConfig
from skulk_core.registry.publish import Lifetimes, build_repository
from skulk_daemon.registry.client import (
    MAX_CACHE_AGE_SECONDS,
    RegistryClient,
    RegistryState,
)
from skulk_daemon.registry.refusals import RefusalReason
from tests.registry.repository import Repository, Server, card

DAY = 24 * 3600.0


class Clock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@dataclass
class Setup:
    repo: Repository
    server: Server
    client: RegistryClient
    clock: Clock
    data_dir: Path
    root_path: Path

    def new_client(self, **environ: str) -> RegistryClient:
        return RegistryClient(
            lambda: RegistryConfig(url=self.server.url, root=str(self.root_path)),
            self.data_dir,
            clock=self.clock,
            environ=environ,
        )


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    repo = Repository(tmp_path / "repo")
    repo.publish([card("org/a"), card("org/b")], version=1)
    root_path = tmp_path / "root.json"
    assert repo.root is not None
    root_path.write_bytes(repo.root)
    server = Server(repo.directory)
    server.start()
    clock = Clock()
    made = Setup(repo, server, None, clock, tmp_path / "data", root_path)  # type: ignore[arg-type]
    made.client = made.new_client()
    assert made.client.refresh() is None
    try:
        yield made
    finally:
        server.stop()


def _ids(client: RegistryClient) -> list[str]:
    catalog = client.current()
    assert catalog is not None
    return [c.model_id for c in catalog.cards]


def test_a_valid_repository_is_verified(setup: Setup) -> None:
    status = setup.client.status()
    assert status.state is RegistryState.CURRENT
    assert status.source_url == setup.server.url
    assert status.card_count == 2 and status.snapshot_id is not None
    assert status.last_refusal is None and status.verified_age_seconds is not None
    assert _ids(setup.client) == ["org/a", "org/b"]
    setup.repo.publish([card("org/a"), card("org/c")], version=2)
    assert setup.client.refresh() is None
    assert _ids(setup.client) == ["org/a", "org/c"]


def _keeps_v1(setup: Setup, reason: RefusalReason) -> None:
    before = setup.client.status().snapshot_id
    assert setup.client.refresh() is reason
    status = setup.client.status()
    assert status.state is RegistryState.CACHED
    assert status.last_refusal is not None and status.last_refusal.reason is reason
    assert status.snapshot_id == before
    assert _ids(setup.client) == ["org/a", "org/b"]


@pytest.mark.parametrize("role", ["timestamp", "snapshot", "targets"])
def test_expired_metadata_is_refused_and_the_verified_catalog_kept(
    setup: Setup, caplog: pytest.LogCaptureFixture, role: str
) -> None:
    expired = Lifetimes(**{role: timedelta(days=-1)})
    setup.repo.publish([card("org/evil")], version=2, lifetimes=expired)
    with caplog.at_level(logging.WARNING, "skulk_daemon.registry.client"):
        _keeps_v1(setup, RefusalReason.EXPIRED)
    assert "registry refresh refused (expired)" in caplog.text
    assert "freeze" in caplog.text


def test_a_tampered_target_is_refused(setup: Setup) -> None:
    setup.repo.publish([card("org/a"), card("org/c")], version=2)
    target = setup.repo.target_for(version=2)
    target.write_bytes(target.read_bytes().replace(b"org/c", b"org/x"))
    _keeps_v1(setup, RefusalReason.TAMPERED)


@pytest.mark.parametrize("name", ["timestamp.json", "2.snapshot.json", "2.targets.json"])
def test_tampered_metadata_is_refused(setup: Setup, name: str) -> None:
    setup.repo.publish([card("org/a"), card("org/c")], version=2)
    path = setup.repo.directory / "metadata" / name
    document = json.loads(path.read_bytes())
    document["signed"]["expires"] = "2099-01-01T00:00:00Z"  # not what was signed
    path.write_text(json.dumps(document))
    _keeps_v1(setup, RefusalReason.TAMPERED)
    refusal = setup.client.status().last_refusal
    assert refusal is not None and "not signed by trusted keys" in refusal.message


def test_a_rolled_back_repository_is_refused(setup: Setup) -> None:
    old = setup.repo.snapshot_state()
    setup.repo.publish([card("org/a"), card("org/c")], version=2)
    assert setup.client.refresh() is None
    setup.server.directory = old  # the repository serves its version-1 state again
    assert setup.client.refresh() is RefusalReason.ROLLBACK
    assert _ids(setup.client) == ["org/a", "org/c"]


@pytest.mark.parametrize(("snapshot", "targets"), [(2, 2), (None, 2)])
def test_newer_metadata_naming_older_versions_is_refused(
    setup: Setup, snapshot: int | None, targets: int
) -> None:
    setup.repo.publish([card("org/a"), card("org/c")], version=3)
    assert setup.client.refresh() is None
    # A new timestamp (version 4) pointing back at snapshot version 2, or a new
    # snapshot (version 4) pointing back at targets version 2.
    setup.repo.publish(
        [card("org/evil")], version=4, snapshot_version=snapshot, targets_version=targets
    )
    assert setup.client.refresh() is RefusalReason.ROLLBACK
    assert _ids(setup.client) == ["org/a", "org/c"]


def test_an_unreachable_repository_keeps_the_catalog_for_30_days(setup: Setup) -> None:
    setup.server.stop()
    setup.clock.offset = 29 * DAY
    _keeps_v1(setup, RefusalReason.UNREACHABLE)
    # A restarted node reads the verified catalog back from disk, without the network.
    restarted = setup.new_client()
    assert _ids(restarted) == ["org/a", "org/b"]
    assert restarted.status().state is RegistryState.CACHED
    setup.clock.offset = MAX_CACHE_AGE_SECONDS + DAY
    assert setup.client.current() is None
    assert restarted.current() is None
    status = setup.client.status()
    assert status.state is RegistryState.EXPIRED
    assert status.snapshot_id is None and status.card_count == 0


def test_offline_skips_the_network_and_the_registry_catalog(setup: Setup) -> None:
    setup.repo.publish([card("org/a"), card("org/c")], version=2)
    offline = setup.new_client(SKULK_OFFLINE="true")
    assert offline.refresh() is None
    assert offline.current() is None
    status = offline.status()
    assert status.state is RegistryState.OFFLINE and status.offline
    assert status.last_attempt_at is None
    # It never fetched: the shared trusted metadata still holds version 1.
    assert setup.client.refresh() is None
    assert _ids(setup.client) == ["org/a", "org/c"]


def test_a_missing_trusted_root_and_a_bad_catalog_are_refusals(setup: Setup) -> None:
    no_root = RegistryClient(
        lambda: RegistryConfig(url=setup.server.url), setup.data_dir.parent / "other"
    )
    assert no_root.refresh() is RefusalReason.NO_TRUSTED_ROOT
    reason = no_root.status().last_refusal
    assert reason is not None and "registry.root" in reason.message
    # A catalog target signed by the right keys that is not a catalog Skulk accepts.
    files = build_repository(
        b'{"format": "nope"}', setup.repo.keys, version=2, now=datetime.now(UTC),
        root=setup.repo.root,
    )  # fmt: skip
    for relative, data in files.items():
        (setup.repo.directory / relative).write_bytes(data)
    _keeps_v1(setup, RefusalReason.INVALID_CATALOG)


def test_unconfigured_means_no_registry(tmp_path: Path) -> None:
    client = RegistryClient(RegistryConfig, tmp_path)
    assert client.refresh() is None and client.current() is None
    assert client.status().state is RegistryState.UNCONFIGURED
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_the_loop_refreshes_at_once_then_at_most_once_a_minute(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = setup.new_client()
    calls: list[float] = []
    monkeypatch.setattr(client, "refresh", lambda: calls.append(time.monotonic()))

    async def serve_briefly() -> float:
        stop = asyncio.Event()
        task = asyncio.create_task(client.run(stop))
        await asyncio.sleep(1.5)
        stop.set()
        stopped = time.monotonic()
        await task
        return time.monotonic() - stopped

    assert asyncio.run(serve_briefly()) < 0.5  # the stop ends the wait at once
    assert len(calls) == 1
