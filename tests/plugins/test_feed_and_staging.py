"""Fetching from the HTTPS release directory and staging offline, for real: a loopback
feed with a test CA, a real wheel, ``uv`` installing offline into a separate venv,
the seal checked before the owner runs, and every attack these steps must refuse."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from skulk_core.plugins.canonical import canonical_json
from skulk_core.plugins.errors import PluginRefusal
from skulk_core.plugins.review import reviewed_catalog, reviewed_release
from skulk_core.plugins.trust import PublisherTrust, parse_trust
from skulk_core.plugins.verify import ReleaseFloor, VerifiedRelease, verify_release
from skulk_host.plugin_release.feed import FeedClient, FeedSource
from skulk_host.plugin_release.host import artifact_family, host_facts
from skulk_host.plugin_release.installers import PipInstaller, UvInstaller, default_installer
from skulk_host.plugin_release.source import download_release, inspect_release, read_catalog
from skulk_host.plugin_release.staging import Stager
from skulk_host.plugin_release.wheels import inspect_wheel
from tests.plugins.kit import (
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

REPO_ROOT = Path(__file__).resolve().parents[2]
ACME = Publisher("acme")
TOKEN = "feed-bearer-token-which-must-never-leak-42"
HOST = host_facts()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("wheels")


@pytest.fixture(scope="module")
def wheel(wheels: Path) -> Wheel:
    return build_wheel(wheels)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Feed]:
    feed = Feed(tls_dir=tmp_path_factory.mktemp("tls"))
    yield feed
    feed.close()


@pytest.fixture
def feed(served: Feed, wheel: Wheel) -> Feed:
    for table in (served.files, served.redirects, served.statuses, served.oversize):
        table.clear()
    served.gzipped.clear()
    served.requests.clear()
    served.token = None
    served.publish("release.json", ACME.sign(release_document(ACME, [wheel])))
    served.publish_wheel(wheel)
    return served


TRUST: PublisherTrust = parse_trust(trust_document(ACME))


def client(feed: Feed, token: str | None = None, tls: ssl.SSLContext | None = None) -> FeedClient:
    return FeedClient(FeedSource(feed.base_url, token), tls or feed.ssl_context)


def inspect(feed: Feed, floor: ReleaseFloor | None = None, **kw: Any) -> VerifiedRelease:
    with client(feed, **kw) as c:
        release, _ = inspect_release(c, "release.json", TRUST, HOST, floor)
    return release


def refusal(excinfo: pytest.ExceptionInfo[PluginRefusal]) -> str:
    assert TOKEN not in excinfo.value.message and "127.0.0.1" not in excinfo.value.message
    return excinfo.value.reason


# -- the feed ------------------------------------------------------------------------


def test_inspect_reads_only_metadata_then_download_checks_every_file(
    feed: Feed, wheel: Wheel, tmp_path: Path
) -> None:
    release = inspect(feed)
    assert feed.requests == [("release.json", False)]
    review = msgspec.to_builtins(reviewed_release(release, source_revision=1))
    assert (review["bundle_id"], review["sequence"], review["artifact_bytes"]) == (
        "acme.tiny",
        1,
        wheel.size,
    )
    assert review["permissions"] == ["network:loopback"] and feed.base_url not in json.dumps(review)
    with client(feed) as c:
        assert download_release(c, release, tmp_path) == wheel.size
        assert download_release(c, release, tmp_path) == 0  # cached and still matching
    assert hashlib.sha256((tmp_path / wheel.path.name).read_bytes()).hexdigest() == wheel.sha256
    assert [name for name, _ in feed.requests] == ["release.json", wheel.path.name]


def test_a_tampered_artifact_is_refused_and_leaves_nothing(
    feed: Feed, wheel: Wheel, tmp_path: Path
) -> None:
    release = inspect(feed)
    feed.publish(wheel.path.name, wheel.path.read_bytes()[:-1] + b"X")
    with client(feed) as c, pytest.raises(PluginRefusal) as caught:
        download_release(c, release, tmp_path)
    assert refusal(caught) == "digest_mismatch"
    assert list(tmp_path.iterdir()) == []


def test_an_artifact_over_its_signed_size_is_cut_off(
    feed: Feed, wheel: Wheel, tmp_path: Path
) -> None:
    release = inspect(feed)
    feed.oversize[wheel.path.name] = 10
    with client(feed) as c, pytest.raises(PluginRefusal) as caught:
        download_release(c, release, tmp_path)
    assert refusal(caught) == "size_mismatch"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target", ["release.json", "wheel"])
def test_a_redirect_is_refused_never_followed(
    feed: Feed, wheel: Wheel, tmp_path: Path, target: str
) -> None:
    name = wheel.path.name if target == "wheel" else "release.json"
    feed.redirects[name] = feed.base_url + "elsewhere.json"
    with pytest.raises(PluginRefusal, match="redirects are refused") as caught:
        release = inspect(feed)
        with client(feed) as c:
            download_release(c, release, tmp_path)
    assert refusal(caught) == "redirected"
    assert "elsewhere.json" not in [n for n, _ in feed.requests]


@pytest.mark.parametrize("target", ["release.json", "wheel"])
def test_a_compressed_response_is_refused(
    feed: Feed, wheel: Wheel, tmp_path: Path, target: str
) -> None:
    feed.gzipped.add(wheel.path.name if target == "wheel" else "release.json")
    with pytest.raises(PluginRefusal, match="gzip encoding") as caught:
        release = inspect(feed)
        with client(feed) as c:
            download_release(c, release, tmp_path)
    assert refusal(caught) == "encoded_response"


def test_oversized_metadata_and_bad_statuses_are_refused(feed: Feed) -> None:
    feed.publish("release.json", b" " * (128 * 1024 + 1))
    with pytest.raises(PluginRefusal) as large:
        inspect(feed)
    feed.statuses["release.json"] = 500
    with pytest.raises(PluginRefusal, match="HTTP 500") as status:
        inspect(feed)
    assert (refusal(large), refusal(status)) == ("too_large", "http_status")


def test_a_wrong_signature_or_a_rollback_is_refused_before_any_transfer(
    feed: Feed, wheel: Wheel
) -> None:
    impostor = Publisher("acme")
    feed.publish("release.json", impostor.sign(release_document(impostor, [wheel])))
    with pytest.raises(PluginRefusal) as signature:
        inspect(feed)
    feed.publish("release.json", ACME.sign(release_document(ACME, [wheel], sequence=1)))
    floor = ReleaseFloor(bundle_id="acme.tiny", sequence=2, runtime_digest="e" * 64)
    with pytest.raises(PluginRefusal, match="rollback is refused before any transfer") as rollback:
        inspect(feed, floor)
    assert (refusal(signature), refusal(rollback)) == ("signature_mismatch", "rollback")
    assert {name for name, _ in feed.requests} == {"release.json"}


def test_tls_trust_is_explicit_and_the_token_stays_in_its_header(feed: Feed) -> None:
    with pytest.raises(PluginRefusal, match="cannot be reached") as untrusted:
        inspect(feed, tls=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))  # no CA: not the feed's
    assert refusal(untrusted) == "unreachable"
    feed.token = TOKEN
    with pytest.raises(PluginRefusal, match="HTTP 401") as anonymous:
        inspect(feed)
    assert refusal(anonymous) == "http_status"
    assert inspect(feed, token=TOKEN).claims.bundle_id == "acme.tiny"
    assert feed.requests[-1] == ("release.json", True)
    assert TOKEN not in repr(FeedSource(feed.base_url, TOKEN))


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/feed/",
        "https://127.0.0.1/feed",
        "https://u:p@127.0.0.1/feed/",
        "https://h/f/?q=1",
    ],
)
def test_only_an_https_directory_is_a_source(url: str) -> None:
    with pytest.raises(PluginRefusal) as caught:
        FeedSource(url)
    assert caught.value.reason == "source_invalid"


# -- wheels --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"extra_members": {"../escape.py": b"x"}}, "escapes the archive"),
        ({"extra_members": {"/etc/cron.d/x": b"x"}}, "not a relative archive path"),
        ({"extra_members": {"tiny_owner\\..\\x.py": b"x"}}, "not a relative archive path"),
        ({"symlink_member": "tiny_owner/link"}, "symbolic link"),
        ({"bad_record": True}, "does not match its RECORD"),
    ],
)
def test_hostile_wheels_are_refused(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    hostile = build_wheel(tmp_path, **kwargs)
    with pytest.raises(PluginRefusal, match=message) as caught:
        inspect_wheel(hostile.path)
    assert caught.value.reason == "unsafe_archive"


def test_a_good_wheel_declares_its_owner(wheel: Wheel) -> None:
    facts = inspect_wheel(wheel.path)
    assert (facts.distribution, facts.version) == ("tiny-owner", "1.0.0")
    assert facts.runtime_entries == {"owner": "tiny_owner.owner:main"}


# -- staging -------------------------------------------------------------------------


def verified(*wheels: Wheel, **fields: Any) -> VerifiedRelease:
    return verify_release(ACME.sign(release_document(ACME, list(wheels), **fields)), TRUST, NOW)


def test_staging_installs_offline_seals_and_runs_only_a_sealed_runtime(
    wheel: Wheel, wheels: Path, tmp_path: Path
) -> None:
    release = verified(wheel)
    stager = Stager(tmp_path / "installation")
    assert stager.installer.name == "uv"
    status = stager.stage(release, wheels, HOST)
    assert status.state == "complete"
    assert stager.stage(release, wheels, HOST).state == "complete"  # idempotent
    command = stager.owner_command(release.runtime_digest)
    ran = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(ran.stdout) == {"owner": "tiny", "version": "1.0.0", "argv": []}
    runtime = stager.generation(release.runtime_digest) / "runtime"
    # Skulk's own environment is untouched; the staged one holds exactly the wheel.
    assert not any(
        p.name.startswith("tiny_owner")
        for path in sys.path
        if Path(path).is_dir()
        for p in Path(path).iterdir()
    )
    site = next(runtime.glob("lib/python*/site-packages"))
    assert sorted(p.name for p in site.iterdir() if not p.name.startswith("_")) == [
        "tiny_owner",
        "tiny_owner-1.0.0.dist-info",
    ]
    # Desktop droppings do not break the seal; a running owner wrote no bytecode.
    (site / ".DS_Store").write_bytes(b"finder")
    stager.owner_command(release.runtime_digest)
    assert not list(runtime.rglob("__pycache__"))
    # An added startup file, then a changed dependency: the seal refuses to run either.
    startup = site / "zz_startup.pth"
    startup.write_text("import os\n")
    with pytest.raises(PluginRefusal, match="no longer matches its seal"):
        stager.owner_command(release.runtime_digest)
    startup.unlink()
    stager.owner_command(release.runtime_digest)
    owner = site / "tiny_owner" / "owner.py"
    owner.write_text(owner.read_text().replace("tiny", "evil"))
    with pytest.raises(PluginRefusal) as caught:
        stager.owner_command(release.runtime_digest)
    assert caught.value.reason == "seal_mismatch"
    # Explicit recovery rebuilds beside the damaged copy instead of re-sealing it.
    assert stager.recover(release, wheels, HOST).state == "complete"
    assert (stager.root / "generations" / ".evidence" / f"{release.runtime_digest}-1").is_dir()
    ran = subprocess.run(
        stager.owner_command(release.runtime_digest),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(ran.stdout)["owner"] == "tiny"


def test_a_path_escaping_wheel_is_refused_before_any_effect(tmp_path: Path) -> None:
    hostile = build_wheel(tmp_path / "w", extra_members={"../../escape.py": b"print('out')"})
    release = verified(hostile)
    stager = Stager(tmp_path / "installation")
    with pytest.raises(PluginRefusal) as caught:
        stager.stage(release, hostile.path.parent, HOST)
    assert caught.value.reason == "unsafe_archive"
    assert stager.status(release.runtime_digest).state == "absent"
    assert not (tmp_path / "escape.py").exists()


def test_a_wheel_without_an_owner_is_refused(tmp_path: Path) -> None:
    bare = build_wheel(tmp_path / "w", owner=False)
    with pytest.raises(PluginRefusal, match="declare the owner"):
        Stager(tmp_path / "i").stage(verified(bare), bare.path.parent, HOST)


def test_a_failed_installer_leaves_recovery_required_evidence(
    wheel: Wheel, wheels: Path, tmp_path: Path
) -> None:
    release = verified(wheel)
    stager = Stager(tmp_path / "installation", UvInstaller(uv="/bin/false"))
    with pytest.raises(PluginRefusal) as caught:
        stager.stage(release, wheels, HOST)
    assert caught.value.reason == "installer_failed"
    status = stager.status(release.runtime_digest)
    assert (status.state, status.error_code) == ("recovery_required", "installation_failed")
    assert {"intent.json", "installer.log", "failure.json"} <= set(status.evidence)


CRASH_CHILD = """
import sys
from pathlib import Path
from skulk_core.plugins.trust import parse_trust
from skulk_core.plugins.verify import verify_release
from skulk_host.plugin_release.host import artifact_family, host_facts
from skulk_host.plugin_release.installers import UvInstaller
from skulk_host.plugin_release.staging import Stager

root, artifacts, uv = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
trust = parse_trust((root / "trust.json").read_bytes())
release = verify_release((root / "release.json").read_bytes(), trust, int(sys.argv[4]))
Stager(root / "installation", UvInstaller(uv=uv)).stage(release, artifacts, host_facts())
"""


def test_a_crash_mid_staging_leaves_recovery_required_never_a_runnable_install(
    wheel: Wheel, wheels: Path, tmp_path: Path
) -> None:
    raw = ACME.sign(release_document(ACME, [wheel]))
    (tmp_path / "release.json").write_bytes(raw)
    (tmp_path / "trust.json").write_text(json.dumps(trust_document(ACME)))
    started = tmp_path / "installer-started"
    hanging = tmp_path / "hanging-uv"
    hanging.write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 120\n")
    hanging.chmod(0o700)
    child = subprocess.Popen(
        [sys.executable, "-c", CRASH_CHILD, str(tmp_path), str(wheels), str(hanging), str(NOW)],
        cwd=REPO_ROOT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not started.exists():
        assert child.poll() is None, "the staging process ended before its installer ran"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)  # the stager and its installer die mid-install
    child.wait(timeout=30)
    release = verify_release(raw, TRUST, NOW)
    stager = Stager(tmp_path / "installation", default_installer())
    status = stager.status(release.runtime_digest)
    assert (status.state, status.error_code) == ("recovery_required", "installation_interrupted")
    assert {"intent.json", "installer.log", "runtime"} <= set(status.evidence)
    with pytest.raises(PluginRefusal) as again:
        stager.stage(release, wheels, HOST)  # never silently rerun
    with pytest.raises(PluginRefusal) as run:
        stager.owner_command(release.runtime_digest)
    assert (again.value.reason, run.value.reason) == ("recovery_required", "recovery_required")
    assert stager.recover(release, wheels, HOST).state == "complete"
    kept = stager.root / "generations" / ".evidence" / f"{release.runtime_digest}-1"
    assert (kept / "intent.json").is_file() and (kept / "installer.log").is_file()


def test_the_release_digest_is_the_canonical_claims(wheel: Wheel) -> None:
    document = release_document(ACME, [wheel])
    assert verified(wheel).runtime_digest == hashlib.sha256(canonical_json(document)).hexdigest()


def test_the_stdlib_installer_stages_offline_too(
    wheel: Wheel, wheels: Path, tmp_path: Path
) -> None:
    release = verified(wheel)
    stager = Stager(tmp_path / "installation", PipInstaller())
    assert stager.stage(release, wheels, HOST).state == "complete"
    ran = subprocess.run(
        stager.owner_command(release.runtime_digest),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(ran.stdout)["owner"] == "tiny"


def test_a_catalog_is_read_verified_and_only_moves_forward(feed: Feed, wheel: Wheel) -> None:
    release = release_document(ACME, [wheel])
    digest = hashlib.sha256(canonical_json(release)).hexdigest()
    entry = catalog_entry(release, digest, feed.base_url)
    feed.publish("catalog.json", ACME.sign(catalog_document(ACME, [entry], revision=2)))
    with client(feed) as c:
        catalog, floor, _ = read_catalog(c, "catalog.json", TRUST, {})
        review = msgspec.to_builtins(reviewed_catalog(catalog, HOST))
        assert (review["revision"], review["catalog_sha256"]) == (2, catalog.catalog_sha256)
        (listed,) = review["entries"]
        assert listed["release_digest"] == digest and listed["matches_host"] is True
        assert "release_url" not in listed and feed.base_url not in json.dumps(review)
        feed.publish("catalog.json", ACME.sign(catalog_document(ACME, [entry], revision=1)))
        with pytest.raises(PluginRefusal, match="older than the one the host already accepted"):
            read_catalog(c, "catalog.json", TRUST, {floor.publisher: floor})
        feed.gzipped.add("catalog.json")
        with pytest.raises(PluginRefusal) as encoded:
            read_catalog(c, "catalog.json", TRUST, {floor.publisher: floor})
    assert refusal(encoded) == "encoded_response"
    # Reading the catalog fetched nothing else.
    assert {name for name, _ in feed.requests} == {"catalog.json"}


@pytest.mark.parametrize(
    ("system", "libc", "machine", "family"),
    [
        ("Linux", "glibc", "x86_64", "linux-glibc-x86_64"),
        ("Linux", "", "aarch64", "linux-musl-aarch64"),
        ("Darwin", "", "arm64", "macos-arm64"),
        ("Linux", "glibc", "AMD64", "linux-glibc-x86_64"),
    ],
)
def test_the_artifact_family_is_derived_from_the_host(
    system: str, libc: str, machine: str, family: str
) -> None:
    assert artifact_family(system, libc, machine) == family
