"""Signed documents a hostile feed serves: each refused, nothing staged, what was held kept.

A real manager process trusting only the test CA of a loopback HTTPS feed
(``tests/plugins/kit.py``). One installation holds release sequence 2, staged and
activated. The feed then serves release records that are expired, revoked by the
host's trust, rolled back (sequence 1), signed with another key under the trusted
publisher's name, or tampered with after signing; and catalogs that are expired,
wrong-key, tampered or rolled back. Each is refused with its documented reason before
any artifact moves; the selection, the staged generations and the accepted catalog
stay as they were.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from skulk_core.plugins.canonical import canonical_json
from tests.plugins.kit import (
    DAY,
    NOW,
    Feed,
    Publisher,
    Wheel,
    build_wheel,
    catalog_document,
    catalog_entry,
    release_document,
    trust_document,
)
from tests.plugins.manager_process import Manager

ACME = Publisher("acme")
IMPOSTOR = Publisher("acme")  # the trusted name, another key
PLUGIN = "managed.held"


@dataclass(frozen=True)
class Attack:
    name: str
    reason: str | None
    """The typed refusal (``None`` where the manager's own check words it)."""
    says: str


@dataclass(frozen=True)
class Held:
    digest: str
    generations: frozenset[str]


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Feed]:
    served = Feed(tls_dir=tmp_path_factory.mktemp("tls"))
    yield served
    served.close()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Wheel]:
    base = tmp_path_factory.mktemp("wheels")
    return {n: build_wheel(base / str(n), version=f"1.0.{n}") for n in (1, 2, 3, 4)}


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory, feed: Feed) -> Iterator[Manager]:
    base = tmp_path_factory.mktemp("mgr")
    ca = base / "feed-ca.pem"
    ca.write_bytes(feed.ca_pem)
    running = Manager(base / "root", "--tls-ca", str(ca)).start()
    yield running
    running.kill()


def ok(answer: dict[str, Any]) -> Any:
    assert answer["ok"], answer
    return answer["result"]


def release(sequence: int, wheels: dict[int, Wheel], **fields: Any) -> dict[str, Any]:
    return release_document(
        ACME, [wheels[sequence]], sequence=sequence, version=f"1.0.{sequence}", **fields
    )


def serve(feed: Feed, raw: bytes, wheel: Wheel) -> None:
    feed.publish("release.json", raw)
    feed.publish_wheel(wheel)


@pytest.fixture(scope="module")
def held(manager: Manager, feed: Feed, wheels: dict[int, Wheel]) -> Held:
    """Sequence 2 inspected, staged and activated through the feed."""
    ok(manager(action="register", plugin_id=PLUGIN))
    source = {"expected_revision": 0, "base_url": feed.base_url, "trust": trust_document(ACME)}
    ok(manager(action="configure_source", plugin_id=PLUGIN, request=source))
    serve(feed, ACME.sign(release(2, wheels)), wheels[2])
    review = ok(manager(action="inspect_release", plugin_id=PLUGIN))
    request = {
        "operation_id": "1" * 32,
        "runtime_digest": review["runtime_digest"],
        "expected_source_revision": 1,
    }
    assert ok(manager(action="install", plugin_id=PLUGIN, request=request))["state"] == "accepted"
    deadline = time.monotonic() + 60
    while ok(manager(action="install_status", plugin_id=PLUGIN))["operation"]["state"] != "staged":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    activate = {
        "operation_id": "2" * 32,
        "action": "activate",
        "expected_revision": 0,
        "runtime_digest": review["runtime_digest"],
    }
    ok(manager(action="submit", plugin_id=PLUGIN, request=activate))
    deadline = time.monotonic() + 30
    while (
        ok(manager(action="get", plugin_id=PLUGIN))["selected_digest"] != review["runtime_digest"]
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return Held(digest=review["runtime_digest"], generations=generations(manager))


def generations(manager: Manager) -> frozenset[str]:
    folder = manager.root / "installations" / PLUGIN / "generations"
    return frozenset(p.name for p in folder.iterdir()) if folder.is_dir() else frozenset()


def tampered(raw: bytes) -> bytes:
    """The served envelope with one signed claim changed after signing."""
    envelope = json.loads(raw)
    envelope["signed"]["permissions"] = ["network:loopback", "network:any"]
    return json.dumps(envelope).encode()


def attack_release(name: str, manager: Manager, wheels: dict[int, Wheel]) -> tuple[bytes, Wheel]:
    if name == "expired":
        old = release(3, wheels, expires_at=NOW - DAY, created_at=NOW - 2 * DAY)
        return ACME.sign(old), wheels[3]
    if name == "revoked":
        # The owner's newer trust revokes the artifact of sequence 4; the feed serves it.
        status = ok(manager(action="source_status", plugin_id=PLUGIN))
        trust = trust_document(
            ACME, revision=status["trust_revision"] + 1, revoked_artifacts=(wheels[4].sha256,)
        )
        update = {"expected_revision": status["revision"], "trust": trust}
        ok(manager(action="configure_source", plugin_id=PLUGIN, request=update))
        return ACME.sign(release(4, wheels)), wheels[4]
    if name == "rolled-back":
        return ACME.sign(release(1, wheels)), wheels[1]
    if name == "wrong-key":
        return IMPOSTOR.sign(release(3, wheels)), wheels[3]
    assert name == "tampered"
    return tampered(ACME.sign(release(3, wheels))), wheels[3]


SIGNATURE = "does not match publisher acme's trusted key"


@pytest.mark.parametrize(
    "attack",
    [
        Attack("expired", "document_expired", "outside its validity period"),
        Attack("revoked", "artifact_revoked", "revokes this release"),
        Attack("rolled-back", None, "rollback is refused before any transfer"),
        Attack("wrong-key", "signature_mismatch", SIGNATURE),
        Attack("tampered", "signature_mismatch", SIGNATURE),
    ],
    ids=lambda attack: attack.name,
)
def test_a_bad_release_record_is_refused_and_the_held_release_stays(
    manager: Manager, feed: Feed, wheels: dict[int, Wheel], held: Held, attack: Attack
) -> None:
    raw, wheel = attack_release(attack.name, manager, wheels)
    serve(feed, raw, wheel)
    feed.requests.clear()
    answer = manager(action="inspect_release", plugin_id=PLUGIN)
    assert answer["ok"] is False, answer
    assert attack.says in answer["error"]["message"], answer
    if attack.reason is not None:
        assert answer["error"]["reason"] == attack.reason, answer
    assert [name for name, _ in feed.requests] == ["release.json"]  # no artifact moved
    # Nothing staged for it, and an install of what it names is refused.
    digest = hashlib.sha256(canonical_json(json.loads(raw)["signed"])).hexdigest()
    request = {"operation_id": "9" * 32, "runtime_digest": digest, "expected_source_revision": 1}
    assert manager(action="install", plugin_id=PLUGIN, request=request)["ok"] is False
    assert generations(manager) == held.generations
    got = ok(manager(action="get", plugin_id=PLUGIN))
    assert (got["selected_digest"], got["selection_revision"]) == (held.digest, 1)
    assert {name for name, _ in feed.requests} == {"release.json"}


@pytest.fixture(scope="module")
def accepted_catalog(manager: Manager, feed: Feed, wheels: dict[int, Wheel]) -> str:
    """A catalog at revision 5 read and accepted: the floor the attacks run against."""
    setup = {"expected_revision": 0, "base_url": feed.base_url, "trust": trust_document(ACME)}
    ok(manager(action="configure_catalog", request=setup))
    feed.publish("catalog.json", ACME.sign(catalog(wheels, revision=5)))
    return str(ok(manager(action="read_catalog"))["catalog_sha256"])


def catalog(wheels: dict[int, Wheel], **fields: Any) -> dict[str, Any]:
    listed = release(2, wheels)
    digest = hashlib.sha256(canonical_json(listed)).hexdigest()
    return catalog_document(
        ACME, [catalog_entry(listed, digest, "https://127.0.0.1/feed/")], **fields
    )


@pytest.mark.parametrize(
    "attack",
    [
        Attack("expired", "document_expired", "outside its validity period"),
        Attack("rolled-back", None, "older than the one the host already accepted"),
        Attack("wrong-key", "signature_mismatch", SIGNATURE),
        Attack("tampered", "signature_mismatch", SIGNATURE),
    ],
    ids=lambda attack: attack.name,
)
def test_a_bad_catalog_is_refused_and_the_accepted_one_stays(
    manager: Manager, feed: Feed, wheels: dict[int, Wheel], accepted_catalog: str, attack: Attack
) -> None:
    served = {
        "expired": lambda: ACME.sign(
            catalog(wheels, revision=6, expires_at=NOW - DAY, created_at=NOW - 2 * DAY)
        ),
        "rolled-back": lambda: ACME.sign(catalog(wheels, revision=4)),
        "wrong-key": lambda: IMPOSTOR.sign(catalog(wheels, revision=6)),
        "tampered": lambda: tampered(ACME.sign(catalog(wheels, revision=6))),
    }[attack.name]()
    feed.publish("catalog.json", served)
    answer = manager(action="read_catalog")
    assert answer["ok"] is False, answer
    assert attack.says in answer["error"]["message"], answer
    if attack.reason is not None:
        assert answer["error"]["reason"] == attack.reason, answer
    # The accepted catalog is still the floor: serving it again reads as before.
    feed.publish("catalog.json", ACME.sign(catalog(wheels, revision=5)))
    assert ok(manager(action="read_catalog"))["catalog_sha256"] == accepted_catalog
