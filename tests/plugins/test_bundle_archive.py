"""The signed bundle archive, for real: a zip fetched from the loopback HTTPS feed with its
exact size and SHA-256 and counted in ``artifact_bytes``, inspected as data, staged
offline beside the wheels, extracted into the generation's ``bundle/`` and sealed with
it; its fixed ``__owner__.py`` runs in the generation's own interpreter (``-I -B``),
importing from the bundle and from a signed wheel. Each refusal is a test: a
path-escaping member, a symbolic link, an expansion past the bound, a tampered archive,
the owner declared by both the archive and a wheel, a shim changed after staging, and
the other member rules (absolute, duplicate, case-folded, file-and-directory, device,
desktop names), a damaged member in a signed archive, and the record's own bounds (a
``.zip`` name, a wheel or an archive, the archive's digest revocable)."""

from __future__ import annotations

import hashlib
import json
import re
import stat
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skulk_core.plugins.errors import PluginRefusal
from skulk_core.plugins.review import reviewed_release
from skulk_core.plugins.trust import PublisherTrust, parse_trust
from skulk_core.plugins.verify import VerifiedRelease, verify_release
from skulk_host.plugin_release import archive as bundle_archive
from skulk_host.plugin_release.archive import inspect_archive
from skulk_host.plugin_release.feed import FeedClient, FeedSource
from skulk_host.plugin_release.host import host_facts
from skulk_host.plugin_release.source import download_release, inspect_release
from skulk_host.plugin_release.staging import Stager
from tests.plugins.bundle_kit import (
    SELF_CONTAINED_OWNER,
    Archive,
    build_archive,
    bundle_release,
    fixture_bundle,
    library_wheel,
)
from tests.plugins.kit import NOW, Feed, Publisher, Wheel, release_document, trust_document

ACME = Publisher("acme")
TRUST: PublisherTrust = parse_trust(trust_document(ACME))
HOST = host_facts()
OWNER_USING_THE_WHEEL = b"""import json

from bundle_lib.greeting import PREFIX


def main():
    print(json.dumps({"owner": "bundle", "prefix": PREFIX}))
"""


def verified(wheels: list[Wheel], archive: Archive, **fields: Any) -> VerifiedRelease:
    document = bundle_release(ACME, wheels, archive, **fields)
    return verify_release(ACME.sign(document), TRUST, NOW)


def run(command: list[str]) -> Any:
    ran = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)
    return json.loads(ran.stdout)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Feed]:
    feed = Feed(tls_dir=tmp_path_factory.mktemp("tls"))
    yield feed
    feed.close()


def test_the_archive_is_fetched_checked_and_counted(served: Feed, tmp_path: Path) -> None:
    wheel = library_wheel(tmp_path / "w")
    archive = fixture_bundle(tmp_path / "a")
    served.publish("release.json", ACME.sign(bundle_release(ACME, [wheel], archive)))
    served.publish_wheel(wheel)
    served.publish(archive.path.name, archive.path.read_bytes())
    artifacts = tmp_path / "artifacts"
    with FeedClient(FeedSource(served.base_url), served.ssl_context) as client:
        release, _ = inspect_release(client, "release.json", TRUST, HOST, None)
        review = reviewed_release(release, source_revision=1)
        assert review.artifact_bytes == wheel.size + archive.size
        assert download_release(client, release, artifacts) == wheel.size + archive.size
        assert (artifacts / "bundle.zip").read_bytes() == archive.path.read_bytes()
        assert download_release(client, release, artifacts) == 0  # cached, still matching
        # A tampered archive at the feed: refused at the signed digest, nothing kept.
        (artifacts / "bundle.zip").unlink()
        tampered = bytearray(archive.path.read_bytes())
        tampered[40] ^= 0xFF
        served.publish(archive.path.name, bytes(tampered))
        with pytest.raises(PluginRefusal) as caught:
            download_release(client, release, artifacts)
    assert caught.value.reason == "digest_mismatch" and "bundle.zip" in caught.value.message
    assert sorted(p.name for p in artifacts.iterdir()) == [wheel.path.name]


def test_a_tampered_cached_archive_is_refused_before_staging(tmp_path: Path) -> None:
    wheel = library_wheel(tmp_path / "art")
    archive = fixture_bundle(tmp_path / "art")
    release = verified([wheel], archive)
    tampered = bytearray(archive.path.read_bytes())
    tampered[60] ^= 0xFF
    archive.path.write_bytes(bytes(tampered))
    stager = Stager(tmp_path / "installation")
    with pytest.raises(
        PluginRefusal, match=re.escape("bundle.zip no longer matches its signed digest")
    ):
        stager.stage(release, tmp_path / "art", HOST)
    assert stager.status(release.runtime_digest).state == "absent"


def test_the_bundle_owner_runs_sealed_with_the_bundle_and_a_signed_wheel(
    tmp_path: Path,
) -> None:
    wheel = library_wheel(tmp_path / "art")
    archive = fixture_bundle(tmp_path / "art", owner=OWNER_USING_THE_WHEEL)
    release = verified([wheel], archive)
    stager = Stager(tmp_path / "installation")
    assert stager.stage(release, tmp_path / "art", HOST).state == "complete"
    assert run(stager.owner_command(release.runtime_digest)) == {
        "owner": "bundle",
        "prefix": "bundled: ",
    }
    generation = stager.generation(release.runtime_digest)
    bundle = generation / "bundle"
    assert sorted(p.name for p in bundle.iterdir()) == [
        "__manage__.py",
        "__owner__.py",
        "__setup__.py",
        "bundle_capability",
    ]
    # Owner-only modes whatever the archive said; nothing written beside the shims.
    assert stat.S_IMODE((bundle / "__owner__.py").stat().st_mode) == 0o600
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o700
    assert not list(bundle.rglob("__pycache__"))
    done = stager.completion(release.runtime_digest)
    assert done.bundle_shims == ("owner", "setup", "manage")
    assert (stager.launcher(release.runtime_digest, "manage").entry) == "__manage__:main"


def test_a_self_contained_bundle_needs_no_wheel(tmp_path: Path) -> None:
    archive = build_archive(
        tmp_path / "art",
        {
            "__owner__.py": SELF_CONTAINED_OWNER,
            "helper.py": b'NAME = "helper"\n',
            "data/notes.txt": b"kept",
            "data/": b"",  # an explicit directory after its own member
        },
    )
    release = verified([], archive)
    stager = Stager(tmp_path / "installation")
    assert stager.stage(release, tmp_path / "art", HOST).state == "complete"
    notes = stager.generation(release.runtime_digest) / "bundle" / "data" / "notes.txt"
    assert notes.read_bytes() == b"kept"
    assert run(stager.owner_command(release.runtime_digest)) == {
        "owner": "bundle",
        "helper": "helper",
        "argv": [],
    }
    with pytest.raises(PluginRefusal, match=re.escape("carries no __setup__.py")):
        stager.launcher(release.runtime_digest, "setup")


def test_a_shim_changed_after_staging_is_refused_by_the_seal(tmp_path: Path) -> None:
    archive = build_archive(
        tmp_path / "art",
        {"__owner__.py": SELF_CONTAINED_OWNER, "helper.py": b'NAME = "helper"\n'},
    )
    release = verified([], archive)
    stager = Stager(tmp_path / "installation")
    stager.stage(release, tmp_path / "art", HOST)
    shim = stager.generation(release.runtime_digest) / "bundle" / "__owner__.py"
    original = shim.read_bytes()
    shim.write_bytes(original.replace(b'"bundle"', b'"evil"'))
    with pytest.raises(PluginRefusal, match="staged bundle no longer matches its seal") as caught:
        stager.owner_command(release.runtime_digest)
    assert caught.value.reason == "seal_mismatch"
    shim.write_bytes(original)
    added = shim.with_name("sitecustomize.py")
    added.write_text("import os\n")
    with pytest.raises(PluginRefusal, match="no longer matches its seal"):
        stager.owner_command(release.runtime_digest)
    added.unlink()
    assert run(stager.owner_command(release.runtime_digest))["owner"] == "bundle"


def test_a_bundle_planted_in_a_wheel_only_generation_is_refused(tmp_path: Path) -> None:
    wheel = library_wheel(tmp_path / "art", owner=True)
    release = verify_release(ACME.sign(release_document(ACME, [wheel])), TRUST, NOW)
    stager = Stager(tmp_path / "installation")
    stager.stage(release, tmp_path / "art", HOST)
    planted = stager.generation(release.runtime_digest) / "bundle"
    planted.mkdir()
    (planted / "__owner__.py").write_text("main = None\n")
    with pytest.raises(PluginRefusal, match="bundle it was not sealed with"):
        stager.launcher(release.runtime_digest, "owner")


def test_the_owner_declared_by_both_archive_and_wheel_is_refused(tmp_path: Path) -> None:
    wheel = library_wheel(tmp_path / "art", owner=True)
    archive = fixture_bundle(tmp_path / "art")
    release = verified([wheel], archive)
    stager = Stager(tmp_path / "installation")
    with pytest.raises(PluginRefusal) as caught:
        stager.stage(release, tmp_path / "art", HOST)
    assert caught.value.reason == "unsafe_archive"
    assert "__owner__.py and a signed wheel's owner entry" in caught.value.message
    assert stager.status(release.runtime_digest).state == "absent"


def test_neither_an_owner_shim_nor_a_declaring_wheel_is_refused(tmp_path: Path) -> None:
    wheel = library_wheel(tmp_path / "art")
    archive = fixture_bundle(tmp_path / "art", owner=b"")
    with pytest.raises(PluginRefusal, match=re.escape("must carry __owner__.py")):
        Stager(tmp_path / "i").stage(verified([wheel], archive), tmp_path / "art", HOST)


def _refused_before_any_effect(tmp_path: Path, archive: Archive) -> str:
    release = verified([], archive)
    stager = Stager(tmp_path / "installation")
    with pytest.raises(PluginRefusal) as caught:
        stager.stage(release, archive.path.parent, HOST)
    assert caught.value.reason == "unsafe_archive"
    assert stager.status(release.runtime_digest).state == "absent"
    return caught.value.message


def test_a_path_escaping_member_is_refused(tmp_path: Path) -> None:
    archive = build_archive(
        tmp_path / "art", {"__owner__.py": b"main = None\n", "../../escape.py": b"x"}
    )
    assert "escapes the archive" in _refused_before_any_effect(tmp_path, archive)
    assert not (tmp_path / "escape.py").exists()


def test_a_symlink_member_is_refused(tmp_path: Path) -> None:
    archive = build_archive(
        tmp_path / "art",
        {"__owner__.py": b"main = None\n"},
        symlinks={"helper.py": "/etc/passwd"},
    )
    assert "is a symbolic link" in _refused_before_any_effect(tmp_path, archive)


def test_an_expansion_past_the_bound_is_refused(tmp_path: Path) -> None:
    size = bundle_archive.MAX_EXPANDED_BYTES + 1
    archive = build_archive(
        tmp_path / "art", {"__owner__.py": b"main = None\n"}, zeros={"zeros.bin": size}
    )
    assert archive.size < size // 100  # a bomb: tiny on the wire
    assert "expands past" in _refused_before_any_effect(tmp_path, archive)


@pytest.mark.parametrize(
    ("members", "special", "fragment"),
    [
        ({"/etc/cron.d/x": b"x"}, {}, "not a relative archive path"),
        ({"a\\b.py": b"x"}, {}, "not a relative archive path"),
        ({"Helper.py": b"x", "helper.py": b"y"}, {}, "only in case"),
        ({"Pkg/a.py": b"x", "pkg/b.py": b"y"}, {}, "only in case"),
        ({"pkg": b"x", "pkg/mod.py": b"y"}, {}, "both a file and a directory"),
        ({"._helper.py": b"x"}, {}, "the seal does not cover"),
        ({"pkg/.DS_Store": b"x"}, {}, "the seal does not cover"),
        ({}, {"tty": stat.S_IFCHR | 0o600}, "not a regular file or directory"),
        ({}, {"pipe": stat.S_IFIFO | 0o600}, "not a regular file or directory"),
    ],
)
def test_the_other_member_rules(
    tmp_path: Path, members: dict[str, bytes], special: dict[str, int], fragment: str
) -> None:
    archive = build_archive(
        tmp_path / "art", {"__owner__.py": b"main = None\n", **members}, special=special
    )
    assert fragment in _refused_before_any_effect(tmp_path, archive)


def test_a_damaged_member_is_refused_though_its_archive_is_signed(tmp_path: Path) -> None:
    good = build_archive(tmp_path / "good", {"__owner__.py": b"main = None\n" * 200})
    damaged = bytearray(good.path.read_bytes())
    damaged[30 + len("__owner__.py") + 4] ^= 0xFF  # inside the deflated data
    (tmp_path / "art").mkdir()
    (tmp_path / "art" / "bundle.zip").write_bytes(bytes(damaged))
    archive = Archive(
        path=tmp_path / "art" / "bundle.zip",
        sha256=hashlib.sha256(damaged).hexdigest(),
        size=len(damaged),
    )
    assert "is damaged" in _refused_before_any_effect(tmp_path, archive)


def test_a_member_named_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "art" / "bundle.zip"
    path.parent.mkdir()
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(path, "w") as out:
        out.writestr("__owner__.py", b"main = None\n")
        out.writestr("__owner__.py", b"main = print\n")
    with pytest.raises(PluginRefusal, match="appears twice"):
        inspect_archive(path)


def test_the_release_record_bounds_its_archive(tmp_path: Path) -> None:
    archive = fixture_bundle(tmp_path / "art")
    renamed = bundle_release(ACME, [], archive)
    renamed["runtime"]["archive"]["filename"] = "bundle.whl"
    empty = bundle_release(ACME, [], archive)
    del empty["runtime"]["archive"]
    for document, fragment in ((renamed, "filename"), (empty, "at least one wheel")):
        with pytest.raises(PluginRefusal, match=fragment) as caught:
            verify_release(ACME.sign(document), TRUST, NOW)
        assert caught.value.reason == "malformed"
    revoked = parse_trust(trust_document(ACME, revoked_artifacts=(archive.sha256,)))
    with pytest.raises(PluginRefusal) as caught:
        verify_release(ACME.sign(bundle_release(ACME, [], archive)), revoked, NOW)
    assert caught.value.reason == "artifact_revoked"
