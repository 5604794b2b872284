"""The manager's release actions end to end: a real manager process trusting only the
test CA, the loopback HTTPS feed with a bearer, source configuration with its fences,
metadata inspection, journaled download and offline staging, activation of what was
staged; and the refusals: rollback at the source, a tampered artifact, the protocol
window, a manager killed mid-install. The feed token never leaves its protected file."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from skulk_core.plugins.answers import (
    CatalogInstalled,
    CatalogReview,
    ReleaseReview,
    SourceStatus,
)
from skulk_core.plugins.canonical import canonical_json
from skulk_core.plugins.errors import protocol_sentence
from skulk_daemon.api.plugin_releases import InstallStatus
from skulk_host.plugin_manager.protocol import InstallOperation
from tests.plugins.answer_shapes import answered
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
TOKEN = "feed-bearer-token-which-must-never-leak-77"


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Feed]:
    served = Feed(tls_dir=tmp_path_factory.mktemp("tls"), token=TOKEN)
    yield served
    served.close()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Wheel]:
    base = tmp_path_factory.mktemp("wheels")
    return {n: build_wheel(base / str(n), version=f"1.0.{n}") for n in (1, 2)}


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory, feed: Feed) -> Iterator[Manager]:
    base = tmp_path_factory.mktemp("mgr")
    ca = base / "feed-ca.pem"
    ca.write_bytes(feed.ca_pem)
    running = Manager(base / "root", "--tls-ca", str(ca)).start()
    yield running
    running.kill()


def publish(feed: Feed, wheel: Wheel, sequence: int, **fields: Any) -> None:
    document = release_document(
        ACME, [wheel], sequence=sequence, version=f"1.0.{sequence}", **fields
    )
    feed.publish("release.json", ACME.sign(document))
    feed.publish_wheel(wheel)


def op(n: int) -> str:
    return f"{n:032x}"


def ok(answer: dict[str, Any]) -> Any:
    assert answer["ok"], answer
    return answer["result"]


def refused(answer: dict[str, Any], fragment: str) -> dict[str, Any]:
    assert answer["ok"] is False, answer
    assert fragment in answer["error"]["message"], answer
    error: dict[str, Any] = answer["error"]
    return error


def configure(manager: Manager, plugin_id: str, feed: Feed, **fields: Any) -> dict[str, Any]:
    request = {
        "expected_revision": 0,
        "base_url": feed.base_url,
        "trust": trust_document(ACME),
        "token": TOKEN,
        **fields,
    }
    return manager(action="configure_source", plugin_id=plugin_id, request=request)


def install_and_wait(
    manager: Manager, plugin_id: str, operation_id: str, digest: str, revision: int
) -> dict[str, Any]:
    request = {
        "operation_id": operation_id,
        "runtime_digest": digest,
        "expected_source_revision": revision,
    }
    assert (
        ok(manager(action="install", plugin_id=plugin_id, request=request))["state"] == "accepted"
    )
    deadline = time.monotonic() + 60
    while True:
        status = ok(manager(action="install_status", plugin_id=plugin_id))
        assert answered(status, InstallStatus)
        operation = status["operation"]
        if operation["state"] in ("staged", "recovery_required"):
            assert answered(operation, InstallOperation)
            return dict(operation)
        assert time.monotonic() < deadline, operation
        time.sleep(0.1)


def test_configure_inspect_install_and_activate(
    manager: Manager, feed: Feed, wheels: dict[int, Wheel]
) -> None:
    ok(manager(action="register", plugin_id="managed.feed"))
    assert ok(manager(action="source_status", plugin_id="managed.feed"))["configured"] is False
    refused(configure(manager, "managed.feed", feed, trust=None), "needs the publisher trust")
    refused(configure(manager, "managed.feed", feed, base_url="http://127.0.0.1/feed/"), "https://")
    status = ok(configure(manager, "managed.feed", feed))
    assert answered(status, SourceStatus)
    assert (
        status["revision"],
        status["configured"],
        status["credential_ready"],
        status["trust_revision"],
    ) == (1, True, True, 1)
    publish(feed, wheels[1], 1)
    feed.requests.clear()
    review = ok(manager(action="inspect_release", plugin_id="managed.feed"))
    assert answered(review, ReleaseReview)
    assert (review["sequence"], review["source_revision"], review["artifact_bytes"]) == (
        1,
        1,
        wheels[1].size,
    )
    assert feed.requests == [("release.json", True)]  # metadata only, with the bearer
    staged = install_and_wait(manager, "managed.feed", op(1), review["runtime_digest"], 1)
    assert (staged["state"], staged["downloaded_bytes"], staged["error_code"]) == (
        "staged",
        wheels[1].size,
        None,
    )
    # The same request reads the retained operation; changed intent is refused.
    same = {
        "operation_id": op(1),
        "runtime_digest": review["runtime_digest"],
        "expected_source_revision": 1,
    }
    assert (
        ok(manager(action="install", plugin_id="managed.feed", request=same))["state"] == "staged"
    )
    refused(
        manager(
            action="install",
            plugin_id="managed.feed",
            request={**same, "expected_source_revision": 0},
        ),
        "another request",
    )
    # Staging is preparation; activation is its own consent, over the staged digest.
    submit = {
        "operation_id": op(2),
        "action": "activate",
        "expected_revision": 0,
        "runtime_digest": review["runtime_digest"],
    }
    ok(manager(action="submit", plugin_id="managed.feed", request=submit))
    deadline = time.monotonic() + 30
    while ok(manager(action="get", plugin_id="managed.feed"))["selection_revision"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert (
        ok(manager(action="get", plugin_id="managed.feed"))["selected_digest"]
        == review["runtime_digest"]
    )
    # An older release at the source is a rollback, refused before any transfer.
    publish(feed, wheels[2], 2)
    newer = ok(manager(action="inspect_release", plugin_id="managed.feed"))
    assert (
        install_and_wait(manager, "managed.feed", op(3), newer["runtime_digest"], 1)["state"]
        == "staged"
    )
    publish(feed, wheels[1], 1)
    feed.requests.clear()
    refused(
        manager(action="inspect_release", plugin_id="managed.feed"),
        "rollback is refused before any transfer",
    )
    assert {name for name, _ in feed.requests} == {"release.json"}
    # The token is nowhere but its protected file: not in answers, records or the log.
    root = manager.root
    holders = [p for p in root.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert [p.parent.name for p in holders] == ["credentials"]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in holders)
    assert TOKEN not in manager.log


def test_source_fences_and_trust_monotonicity(manager: Manager, feed: Feed) -> None:
    ok(manager(action="register", plugin_id="managed.fences"))
    ok(configure(manager, "managed.fences", feed, trust=trust_document(ACME, revision=2)))
    update = {"expected_revision": 1}
    refused(
        manager(
            action="configure_source",
            plugin_id="managed.fences",
            request={**update, "expected_revision": 0},
        ),
        "not the source revision 1",
    )
    other = Publisher("other")
    refused(
        manager(
            action="configure_source",
            plugin_id="managed.fences",
            request={**update, "trust": trust_document(ACME, other, revision=2)},
        ),
        "already held with other contents",
    )
    refused(
        manager(
            action="configure_source",
            plugin_id="managed.fences",
            request={**update, "trust": trust_document(ACME, revision=1)},
        ),
        "restored older trust",
    )
    refused(
        manager(
            action="configure_source",
            plugin_id="managed.fences",
            request={**update, "trust": trust_document(ACME, revision=3, expires_at=NOW - DAY)},
        ),
        "expired",
    )
    moved = {**update, "base_url": feed.base_url.replace("/feed/", "/elsewhere/")}
    refused(
        manager(action="configure_source", plugin_id="managed.fences", request=moved),
        "needs the credential again",
    )
    cleared = ok(
        manager(
            action="configure_source",
            plugin_id="managed.fences",
            request={**moved, "clear_token": True},
        )
    )
    assert (cleared["revision"], cleared["credential_reference"], cleared["credential_ready"]) == (
        2,
        None,
        False,
    )
    refused(
        manager(
            action="configure_source",
            plugin_id="managed.fences",
            request={"expected_revision": 2, "token": "t", "clear_token": True},
        ),
        "exclude each other",
    )


def test_install_refusals(manager: Manager, feed: Feed, wheels: dict[int, Wheel]) -> None:
    ok(manager(action="register", plugin_id="managed.refuse"))
    ok(configure(manager, "managed.refuse", feed))
    request = {"operation_id": op(10), "runtime_digest": "a" * 64, "expected_source_revision": 1}
    refused(
        manager(action="install", plugin_id="managed.refuse", request=request),
        "Inspect the release first",
    )
    refused(
        manager(
            action="install",
            plugin_id="managed.refuse",
            request={**request, "expected_source_revision": 7},
        ),
        "not the source revision 1",
    )
    # A verified release outside the window: the named error with its three facts.
    publish(feed, wheels[1], 1, protocol=3)
    error = manager(action="inspect_release", plugin_id="managed.refuse")["error"]
    assert {k: error[k] for k in ("code", "kind", "offered", "accepted")} == {
        "code": "release_protocol_unsupported",
        "kind": "release",
        "offered": 3,
        "accepted": [1],
    }
    assert set(error) == {"code", "kind", "offered", "accepted"}  # nothing else
    sentence = protocol_sentence(error["kind"], error["offered"], tuple(error["accepted"]))
    assert sentence.endswith("update Skulk on this host, or choose a release published for it.")
    # A tampered artifact: inspected fine, then refused in transfer, nothing staged.
    publish(feed, wheels[1], 1)
    review = ok(manager(action="inspect_release", plugin_id="managed.refuse"))
    feed.publish(wheels[1].path.name, wheels[1].path.read_bytes()[:-1] + b"X")
    failed = install_and_wait(manager, "managed.refuse", op(11), review["runtime_digest"], 1)
    assert (failed["state"], failed["error_code"]) == ("recovery_required", "download_failed")
    assert not (manager.root / "installations" / "managed.refuse" / "generations").exists()
    feed.publish_wheel(wheels[1])


def test_a_manager_killed_mid_install_leaves_it_for_explicit_recovery(
    manager: Manager, feed: Feed, wheels: dict[int, Wheel]
) -> None:
    ok(manager(action="register", plugin_id="managed.killed"))
    ok(configure(manager, "managed.killed", feed))
    publish(feed, wheels[1], 1)
    review = ok(manager(action="inspect_release", plugin_id="managed.killed"))
    fence = manager.root / "installations" / "managed.killed" / "fence.lock"
    fd = os.open(fence, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another installer holds the fence: staging waits
    try:
        request = {
            "operation_id": op(20),
            "runtime_digest": review["runtime_digest"],
            "expected_source_revision": 1,
        }
        ok(manager(action="install", plugin_id="managed.killed", request=request))
        deadline = time.monotonic() + 30
        while (
            ok(manager(action="install_status", plugin_id="managed.killed"))["operation"][
                "downloaded_bytes"
            ]
            == 0
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        manager.kill()
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    manager.start()
    operation = ok(manager(action="install_status", plugin_id="managed.killed"))["operation"]
    assert (operation["state"], operation["error_code"]) == (
        "recovery_required",
        "installation_interrupted",
    )
    time.sleep(0.5)
    assert (
        ok(manager(action="install_status", plugin_id="managed.killed"))["operation"]["state"]
        == "recovery_required"
    )
    assert not (manager.root / "installations" / "managed.killed" / "generations").exists()
    assert json.dumps(operation).count(TOKEN) == 0
    # Only an explicit recovery retries it, for the same digest, under the current source.
    recover = {"action": "recover_install", "plugin_id": "managed.killed", "operation_id": op(20)}
    refused(manager(**recover, expected_source_revision=9), "not the source revision 1")
    retried = ok(manager(**recover, expected_source_revision=1))
    assert (retried["attempt"], retried["attempt_source_revision"]) == (1, 1)
    deadline = time.monotonic() + 60
    while True:
        state = ok(manager(action="install_status", plugin_id="managed.killed"))["operation"]
        if state["state"] == "staged":
            break
        assert state["state"] != "recovery_required" and time.monotonic() < deadline, state
        time.sleep(0.1)
    assert state["request"]["runtime_digest"] == review["runtime_digest"]
    # Recovering what is staged changes nothing.
    assert ok(manager(**recover, expected_source_revision=1))["attempt"] == 1


def test_the_catalog_is_read_for_discovery_only(
    manager: Manager, feed: Feed, wheels: dict[int, Wheel]
) -> None:
    assert ok(manager(action="catalog_status"))["configured"] is False
    refused(manager(action="read_catalog"), "No catalog is configured")
    setup = {
        "expected_revision": 0,
        "base_url": feed.base_url,
        "trust": trust_document(ACME),
        "token": TOKEN,
    }
    status = ok(manager(action="configure_catalog", request=setup))
    assert answered(status, SourceStatus)
    assert (status["revision"], status["configured"], status["credential_ready"]) == (1, True, True)
    release = release_document(ACME, [wheels[2]], sequence=2, version="1.0.2")
    digest = hashlib.sha256(canonical_json(release)).hexdigest()
    entry = catalog_entry(release, digest, feed.base_url)
    feed.publish("catalog.json", ACME.sign(catalog_document(ACME, [entry], revision=3)))
    feed.requests.clear()
    review = ok(manager(action="read_catalog"))
    assert answered(review, CatalogReview)
    assert (review["publisher"], review["revision"], review["window"]) == ("acme", 3, [1])
    (listed,) = review["entries"]
    assert (
        listed["bundle_id"],
        listed["sequence"],
        listed["release_digest"],
        listed["matches_host"],
    ) == ("acme.tiny", 2, digest, True)
    assert feed.base_url not in json.dumps(review) and TOKEN not in json.dumps(review)
    assert feed.requests == [("catalog.json", True)]  # reading installs (and fetches) nothing else
    feed.publish("catalog.json", ACME.sign(catalog_document(ACME, [entry], revision=2)))
    refused(manager(action="read_catalog"), "older than the one the host already accepted")
    feed.gzipped.add("catalog.json")
    try:
        refused(
            manager(action="read_catalog"),
            "The catalog address sent catalog.json with a gzip encoding",
        )
    finally:
        feed.gzipped.discard("catalog.json")
    moved = {"expected_revision": 1, "base_url": feed.base_url.replace("/feed/", "/other/")}
    refused(manager(action="configure_catalog", request=moved), "moved without its credential")


def test_installing_from_a_listing_binds_the_source_and_checks_the_record(
    manager: Manager, feed: Feed, wheels: dict[int, Wheel]
) -> None:
    def listed(sequence: int, revision: int, served: int | None = None) -> str:
        documents = {
            n: release_document(ACME, [wheels[min(n, 2)]], sequence=n, version=f"1.0.{n}")
            for n in (1, 2, 3)
        }
        listing = documents[sequence]
        digest = hashlib.sha256(canonical_json(listing)).hexdigest()
        entry = catalog_entry(listing, digest, feed.base_url)
        feed.publish("catalog.json", ACME.sign(catalog_document(ACME, [entry], revision=revision)))
        feed.publish("release.json", ACME.sign(documents[served or sequence]))
        feed.publish_wheel(wheels[min(served or sequence, 2)])
        return str(ok(manager(action="read_catalog"))["catalog_sha256"])

    reviewed = listed(2, revision=10)
    bound = ok(
        manager(
            action="install_from_catalog",
            catalog_sha256=reviewed,
            bundle_id="acme.tiny",
            sequence=2,
        )
    )
    assert answered(bound, CatalogInstalled)
    plugin_id = bound["plugin_id"]
    assert plugin_id.startswith("managed.") and bound["listing"]["sequence"] == 2
    assert bound["source"]["credential_ready"] is True  # the catalog's own origin: its credential
    assert bound["review"]["runtime_digest"] == bound["listing"]["release_digest"]
    staged = install_and_wait(
        manager, plugin_id, op(30), bound["review"]["runtime_digest"], bound["source"]["revision"]
    )
    assert staged["state"] == "staged"
    # A listing a later read superseded, one the host never held, or one whose feed
    # serves another record, is refused.
    newer = listed(2, revision=11)
    superseded = {"action": "install_from_catalog", "bundle_id": "acme.tiny", "sequence": 2}
    refused(manager(**superseded, catalog_sha256=reviewed), "superseded")
    refused(manager(**superseded, catalog_sha256="f" * 64), "no longer holds that listing")
    assert newer != reviewed
    mismatched = listed(3, revision=12, served=2)
    refused(
        manager(
            action="install_from_catalog",
            catalog_sha256=mismatched,
            bundle_id="acme.tiny",
            sequence=3,
        ),
        "not the record the listing names",
    )
    # An existing installation never goes back through a listing.
    older = listed(1, revision=13)
    refused(
        manager(
            action="install_from_catalog",
            catalog_sha256=older,
            bundle_id="acme.tiny",
            sequence=1,
            plugin_id=plugin_id,
        ),
        "already accepted sequence 2",
    )
