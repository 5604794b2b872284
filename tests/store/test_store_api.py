"""The model store through the real app, in process, and its internal transport on a
real socket.

One store-host app for the module (``model_store.store_host: true`` on a free port),
pointed at the fake hub through ``HF_ENDPOINT``; one app without a store for the 503s.
The store fetches a small GGUF from the fake hub; then every refusal of the internal
transport is asked for (unknown model 404, a malformed range 400, an unsatisfiable
one 416, a path escaping the model directory 400, a peer that is not trusted 403),
and staging's verification is run against the real transport with a manifest whose
digest does not match: nothing is published.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from skulk_daemon.hub.manifest import FileManifest, ManifestFile
from skulk_daemon.store.staging import (
    Staging,
    StagingFailed,
    _fetch_all,
    _Transfer,
    stage_dir,
)
from tests.api.in_process import AppNode
from tests.hub.conftest import TINY
from tests.hub.fake_hub import FakeHub
from tests.store.store_app import GGUF, wait


@pytest.fixture(scope="module")
def transport(store_port: int) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{store_port}", timeout=30) as client:
        yield client


def status(app: AppNode) -> dict[str, Any]:
    answer = app.get(f"/store/models/{TINY}/download/status")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def enc(model_id: str) -> str:
    return quote(model_id, safe="")


# -- no store ------------------------------------------------------------------------


def test_every_store_route_answers_503_without_a_store(tmp_path: Path, models_dir: Path) -> None:
    with AppNode(root=tmp_path, models_dir=models_dir) as node:
        _assert_no_store(node)


def _assert_no_store(node: AppNode) -> None:
    for method, path in (
        ("GET", "/store/health"),
        ("GET", "/store/registry"),
        ("GET", "/store/downloads"),
        ("GET", f"/store/models/{TINY}/download/status"),
        ("POST", f"/store/models/{TINY}/download"),
        ("DELETE", f"/store/models/{TINY}/download"),
        ("DELETE", f"/store/models/{TINY}"),
    ):
        answer = node.http.request(method, path)
        assert answer.status_code == 503, (method, path, answer.text)
        assert answer.json()["error"]["message"] == "Store not configured"
    # The node's own storage picture does not need a store.
    storage = node.get("/store/storage")
    assert storage.status_code == 200, storage.text
    assert storage.json()["free_bytes"] > 0


# -- the store host ------------------------------------------------------------------


def test_the_store_fetches_registers_and_serves_a_model(
    app: AppNode, stored: str, hub: FakeHub, transport: httpx.Client
) -> None:
    expected = _bytes(hub)
    registry = app.get("/store/registry").json()
    entry = next(e for e in registry["entries"] if e["model_id"] == stored)
    assert entry["gguf_file"] == GGUF and entry["total_bytes"] == len(expected)
    assert entry["location_kind"] == "store_local"
    assert [c["location_kind"] for c in entry["cached_on_nodes"]] == ["store_local"]
    assert registry["cache_inventory"]["store_nodes"] == [app.node.node_id]
    health = app.get("/store/health").json()
    assert health["configured"] and health["reachable"] and health["free_bytes"] > 0
    assert stored in transport.get("/models").json()
    manifest = transport.get(f"/models/{enc(stored)}/files").json()
    assert manifest["files"] == [
        {"path": GGUF, "size": len(expected), "sha256": hashlib.sha256(expected).hexdigest()}
    ]
    whole = transport.get(f"/models/{enc(stored)}/{GGUF}")
    assert whole.status_code == 200 and whole.content == expected
    part = transport.get(f"/models/{enc(stored)}/{GGUF}", headers={"range": "bytes=10-19"})
    assert part.status_code == 206 and part.content == expected[10:20]
    assert part.headers["content-range"] == f"bytes 10-19/{len(expected)}"
    tail = transport.get(f"/models/{enc(stored)}/{GGUF}", headers={"range": "bytes=-5"})
    assert tail.status_code == 206 and tail.content == expected[-5:]
    # The store host runs what it stores: the store copy is installed here.
    storage = app.get("/store/storage").json()
    kinds = {a["model_id"]: a["locationKind"] for a in storage["artifacts"]}
    assert kinds[stored] == "store_local"
    assert app.get("/store/downloads").json() == []


def test_the_transport_refuses_bad_ranges_paths_and_unknown_models(
    stored: str, hub: FakeHub, transport: httpx.Client
) -> None:
    size = len(_bytes(hub))
    url = f"/models/{enc(stored)}/{GGUF}"
    assert transport.get(url, headers={"range": f"bytes={size}-"}).status_code == 416
    head = transport.head(url, headers={"range": "bytes=0-99"})
    assert head.status_code == 206 and head.content == b""
    assert head.headers["content-length"] == "100"
    assert transport.get(url, headers={"range": "bytes=abc"}).status_code == 400
    assert transport.get(url, headers={"range": "bytes=0-1,4-5"}).status_code == 400
    assert transport.get(url, headers={"range": "bytes=9-3"}).status_code == 400
    escape = transport.get(f"/models/{enc(stored)}/..%2F..%2F..%2Fetc%2Fpasswd")
    assert escape.status_code == 400, escape.text
    assert "escapes the model directory" in escape.json()["error"]["message"]
    # Only manifest files are served: not the store's own records, not partials.
    assert transport.get(f"/models/{enc(stored)}/.skulk/files.json").status_code == 404
    assert transport.get(f"/models/{enc('nobody/none')}/files").status_code == 404
    assert transport.get(f"/models/{enc('nobody/none')}/{GGUF}").status_code == 404
    assert transport.get("/nothing-here").status_code == 404


def test_the_transport_answers_pinned_revisions_only(
    app: AppNode, stored: str, transport: httpx.Client
) -> None:
    [entry] = transport.get("/registry").json()["entries"]
    commit = entry["source_revision"]
    assert len(commit) == 40
    # The nested installed card is JSON-native: its capture time an ISO 8601 UTC string.
    installed = entry["installed_card"]
    assert installed["card"]["modelId"] == stored
    captured = datetime.fromisoformat(installed["captured_at"].replace("Z", "+00:00"))
    assert captured.utcoffset() == timedelta(0)
    files = f"/models/{enc(stored)}/files"
    pinned = transport.get(files, params={"source_revision": commit})
    assert pinned.status_code == 200 and pinned.json()["files"][0]["path"] == GGUF
    other = transport.get(files, params={"source_revision": "0" * 40})
    assert other.status_code == 404 and "not " + "0" * 40 in other.json()["error"]["message"]
    assert transport.get(files, params={"source_revision": "main"}).status_code == 400
    one = f"/models/{enc(stored)}/{GGUF}"
    ranged = {"range": "bytes=0-9"}
    assert transport.get(one, params={"source_revision": commit}, headers=ranged).status_code == 206
    assert transport.get(one, params={"source_revision": "f" * 40}).status_code == 404
    assert transport.get(one, params={"source_revision": "F" * 40}).status_code == 400


def test_recovery_reassociates_a_stored_model_that_lost_its_card_record(
    app: AppNode, stored: str, transport: httpx.Client
) -> None:
    [entry] = transport.get("/registry").json()["entries"]
    located = next(m for m in app.node.installed_models if m.card.model_id == stored)
    sidecar = Path(located.location) / ".skulk" / "installed-card.json"
    sidecar.unlink()
    # An ordinary read does no work: without its record the directory is not listed.
    assert transport.get("/registry").json()["entries"] == []
    recovered = transport.get("/registry", params={"recover_installed_cards": "true"})
    assert recovered.status_code == 200, recovered.text
    [again] = recovered.json()["entries"]
    assert again["model_id"] == stored and again["manifest_sha256"] == entry["manifest_sha256"]
    assert sidecar.is_file()
    assert sum(m.card.model_id == stored for m in app.node.installed_models) == 1


def test_public_refusals_keep_the_spec_shapes(app: AppNode, stored: str) -> None:
    missing = app.get("/store/models/nobody/none/download/status")
    assert missing.status_code == 200 and missing.json() == {"status": "not_found"}
    cancel = app.http.delete(f"/store/models/{stored}/download")
    assert cancel.status_code == 409, cancel.text
    gone = app.http.delete("/store/models/nobody/none")
    assert gone.status_code == 404, gone.text
    unknown = app.post("/store/models/nobody/none/download", json={})
    assert unknown.status_code == 404, unknown.text
    pin = app.post(f"/store/models/{stored}/download", json={"gguf_file": "other.gguf"})
    assert pin.status_code == 409, pin.text


def test_an_untrusted_peer_is_refused_by_the_transport(store_port: int) -> None:
    forwarded = httpx.get(
        f"http://127.0.0.1:{store_port}/health", headers={"x-forwarded-for": "203.0.113.9"}
    )
    assert forwarded.status_code == 403


def test_a_digest_mismatch_in_staging_publishes_nothing(
    stored: str, hub: FakeHub, store_port: int, tmp_path: Path
) -> None:
    size = len(_bytes(hub))
    forged = FileManifest(version=1, files=(ManifestFile(path=GGUF, size=size, sha256="0" * 64),))
    target = tmp_path / "staged"
    counted: list[int] = []
    transfer = _Transfer(
        f"http://127.0.0.1:{store_port}", stored, target, counted.append, threading.Event()
    )
    with pytest.raises(StagingFailed, match="do not match"):
        _fetch_all(transfer, forged)
    assert sum(counted) == size  # the bytes did travel
    assert sorted(p.name for p in target.rglob("*")) == []  # and nothing stayed


def test_staging_resumes_a_partial_and_verifies_it(
    stored: str, hub: FakeHub, store_port: int, tmp_path: Path
) -> None:
    data = _bytes(hub)
    target = tmp_path / "staged"
    target.mkdir()
    (target / f"{GGUF}.incomplete").write_bytes(data[:1000])
    manifest = FileManifest(
        version=1,
        files=(ManifestFile(path=GGUF, size=len(data), sha256=hashlib.sha256(data).hexdigest()),),
    )
    counted: list[int] = []
    transfer = _Transfer(
        f"http://127.0.0.1:{store_port}", stored, target, counted.append, threading.Event()
    )
    _fetch_all(transfer, manifest)
    assert (target / GGUF).read_bytes() == data
    assert not (target / f"{GGUF}.incomplete").exists()
    assert sum(counted) == len(data)


def _run(app: AppNode, work: Any) -> Any:
    """``work()`` (a coroutine function) on the app's own loop, where its node lives."""
    return app._test_client.blocking_portal.call(work)


def test_a_node_refuses_to_publish_a_staged_copy_with_a_wrong_digest(
    app: AppNode, stored: str, hub: FakeHub, store_port: int
) -> None:
    """Through the node's own staging path: the failure is reported in State, the
    node's installed models and its models dir are untouched."""
    node = app.node
    card = node.catalog().get(stored).card  # type: ignore[union-attr]
    forged = FileManifest(
        version=1, files=(ManifestFile(path=GGUF, size=len(_bytes(hub)), sha256="f" * 64),)
    )
    before = list(node.installed_models)
    staging = Staging(node)

    async def stage() -> None:
        await staging._fetch(f"http://127.0.0.1:{store_port}", card, forged)

    with pytest.raises(StagingFailed, match="do not match"):
        _run(app, stage)
    assert node.installed_models == before
    assert not (stage_dir(node, card.model_id) / GGUF).exists()
    assert not (stage_dir(node, card.model_id) / ".skulk").exists()

    def failed() -> bool:
        reports = app.get("/state").json()["downloads"].get(node.node_id, [])
        return any(r["modelId"] == stored and r["status"] == "failed" for r in reports)

    wait(failed, "the failure in State")


def test_staging_is_refused_before_transfer_when_the_disk_cannot_hold_it(
    app: AppNode, stored: str, hub: FakeHub, store_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = app.node
    card = node.catalog().get(stored).card  # type: ignore[union-attr]
    data = _bytes(hub)
    manifest = FileManifest(
        version=1,
        files=(ManifestFile(path=GGUF, size=len(data), sha256=hashlib.sha256(data).hexdigest()),),
    )
    monkeypatch.setenv("SKULK_DOWNLOAD_RESERVE_BYTES", str(2**62))

    async def stage() -> None:
        await Staging(node)._fetch(f"http://127.0.0.1:{store_port}", card, manifest)

    with pytest.raises(StagingFailed, match="not enough disk"):
        _run(app, stage)
    assert not (stage_dir(node, card.model_id) / f"{GGUF}.incomplete").exists()


def test_deleting_from_the_store_removes_it_and_records_the_eviction(
    app: AppNode, stored: str, transport: httpx.Client
) -> None:
    deleted = app.http.delete(f"/store/models/{stored}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"modelId": stored, "deleted": True}
    state = app.get("/state").json()
    assert stored in state["storeEvictions"]
    assert all(p["modelId"] != stored for reports in state["downloads"].values() for p in reports)
    assert transport.get(f"/models/{enc(stored)}/files").status_code == 404
    assert app.get("/store/registry").json()["entries"] == []
    assert app.http.delete(f"/store/models/{stored}").status_code == 404


def _bytes(hub: FakeHub) -> bytes:
    repo = hub.repo(TINY)
    assert repo is not None
    source = repo.files[GGUF].source
    return source if isinstance(source, bytes) else source.read_bytes()
