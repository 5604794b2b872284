"""The store's upkeep through the real app, in process, with its transport on a real
socket: the durable tombstone of a delete, ``POST /store/purge-staging``, staging
eviction under ``model_store.staging_budget_gb``, model ids escaping the store.

One store-host app for the module (a 5 MiB staging budget), pointed at the fake hub;
the store fetches TINY (2 MiB). Staged copies are made by the node's own staging
path from the real transport (``Staging._fetch``), so they carry the markers a real
staging writes. The tombstone test stops the app and starts a new one on the same
store path, as a restart does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import msgspec
import pytest

from skulk_core.ids import ModelId
from skulk_core.models.cards import ModelCard
from skulk_core.models.catalog import InstalledModel
from skulk_core.store.eviction import (
    GIB,
    EvictionPlan,
    EvictionRefused,
    StagedCopy,
    plan_staging,
    plan_tidy,
)
from skulk_core.store.paths import model_id_escapes
from skulk_daemon.api.authority import route_authority
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.hub.manifest import FileManifest, ManifestFile, read_manifest, write_manifest
from skulk_daemon.models.sidecar import model_dir_name, write_sidecar
from skulk_daemon.store import cache, host, service, staging
from skulk_daemon.store.cache import LAST_USE_MARKER, STAGED_MARKER, mark_staged
from skulk_daemon.store.exports import TARGET_HEADER
from skulk_daemon.store.staging import START_SPARES_SECONDS, Staging, StagingFailed, stage_dir
from skulk_daemon.store.tombstones import TOMBSTONES_NAME
from tests.api.in_process import AppNode
from tests.daemon.serving import place
from tests.daemon_process import free_port
from tests.hub.conftest import TINY, TINY_LLM
from tests.hub.fake_hub import FakeHub
from tests.security.test_route_table import _routes
from tests.store.store_app import store_host_config, wait

GGUF = "tiny-Q4_K_M.gguf"
MIB = 1024**2
BUDGET_MIB = 5


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("store-upkeep")
    config = store_host_config(root, free_port(), f"  staging_budget_gb: {BUDGET_MIB / 1024}\n")
    return root, config


def open_app(layout: tuple[Path, str], models_dir: Path) -> AppNode:
    root, config = layout
    return AppNode(root=root, models_dir=models_dir, config_yaml=config)


CLOSED: set[int] = set()
"""Apps a test already stopped (the tombstone test restarts the store)."""


@pytest.fixture(scope="module")
def app(hub: FakeHub, layout: tuple[Path, str], models_dir: Path) -> Iterator[AppNode]:
    node = open_app(layout, models_dir).__enter__()
    try:
        wait(lambda: node.get("/state").json().get("storeHosts"), "the store role in State")
        fetch_into_store(node)
        yield node
    finally:
        if id(node) not in CLOSED:
            node.__exit__(None, None, None)


def fetch_into_store(app: AppNode) -> None:
    added = app.post("/models/add", json={"model_id": TINY, "gguf_file": GGUF}, timeout=60)
    assert added.status_code == 200, added.text
    started = app.post(f"/store/models/{TINY}/download", json={}, timeout=60)
    assert started.status_code == 200, started.text
    wait(lambda: status(app)["status"] == "complete", "the store download")


def status(app: AppNode) -> dict[str, Any]:
    body: dict[str, Any] = app.get(f"/store/models/{TINY}/download/status").json()
    return body


def base(app: AppNode) -> str:
    return f"http://127.0.0.1:{app.node.config.model_store.store_port}"


def store_manifest(app: AppNode) -> FileManifest:
    answer = httpx.get(f"{base(app)}/models/{quote(TINY, safe='')}/files", timeout=10)
    assert answer.status_code == 200, answer.text
    files = tuple(ManifestFile(**item) for item in answer.json()["files"])
    return FileManifest(version=1, files=files)


def run(app: AppNode, work: Any) -> Any:
    return app._test_client.blocking_portal.call(work)


def stage_tiny(app: AppNode) -> Path:
    """TINY staged from the store into the node's models dir by its staging path."""
    node = app.node
    entry = node.catalog().get(ModelId(TINY))
    assert entry is not None
    manifest = store_manifest(app)

    async def stage() -> None:
        await Staging(node)._fetch(base(app), entry.card, manifest)

    run(app, stage)
    target = stage_dir(node, ModelId(TINY))
    assert (target / GGUF).is_file() and cache.is_staged(target)
    return target


def fake_copy(
    app: AppNode, model_id: str, size: int, last_use: float, *, staged: bool = True
) -> Path:
    """Another copy on the node: bytes, manifest, card record and (when ``staged``) the
    markers a staging writes; without them it is a node download of its own."""
    node = app.node
    entry = node.catalog().get(ModelId(TINY))
    assert entry is not None
    card = msgspec.structs.replace(entry.card, model_id=ModelId(model_id))
    target = write_copy(node.models_dir, card, size, last_use, staged=staged)
    node.installed_models.append(
        InstalledModel(card=card, location=str(target), installed_at=int(last_use))
    )
    return target


def write_copy(
    models_dir: Path, card: ModelCard, size: int, last_use: float, *, staged: bool = True
) -> Path:
    """``card``'s copy on disk under ``models_dir``, as a node finds it when it starts."""
    target = models_dir / model_dir_name(card.model_id)
    target.mkdir(parents=True, exist_ok=True)
    data = os.urandom(size)
    (target / GGUF).write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    write_manifest(target, (ManifestFile(path=GGUF, size=size, sha256=digest),))
    if staged:
        mark_staged(target, last_use)
    write_sidecar(target, card, int(last_use))
    return target


def installed_here(app: AppNode, model_id: str) -> list[str]:
    return [m.location for m in app.node.installed_models if m.card.model_id == model_id]


# -- pure rules ----------------------------------------------------------------------


def copy(model_id: str, size: int, used: float, busy: bool = False) -> StagedCopy:
    return StagedCopy(model_id=model_id, size_bytes=size, last_used=used, in_use=busy)


def test_the_eviction_plan_takes_the_least_recently_used_idle_copies() -> None:
    copies = [copy("a", 4, 30), copy("b", 4, 10), copy("c", 4, 20), copy("busy", 4, 1, True)]
    plan = plan_staging(
        copies,
        incoming="new",
        incoming_bytes=6,
        missing_bytes=6,
        budget_bytes=16,
        free_bytes=10**9,
        reserve_bytes=0,
    )
    # 16 staged + 6 incoming = 22: 6 over; the oldest idle copies b then c go.
    assert plan == EvictionPlan(evict=("b", "c"), freed_bytes=8)
    fits = plan_staging(
        copies,
        incoming="a",
        incoming_bytes=4,
        missing_bytes=0,
        budget_bytes=16,
        free_bytes=10**9,
        reserve_bytes=0,
    )
    assert fits == EvictionPlan(evict=(), freed_bytes=0)  # the incoming copy counts once
    # The disk alone can ask for room: 3 missing + 2 reserve on 1 free.
    disk = plan_staging(
        copies,
        incoming="new",
        incoming_bytes=3,
        missing_bytes=3,
        budget_bytes=None,
        free_bytes=1,
        reserve_bytes=2,
    )
    assert disk == EvictionPlan(evict=("b",), freed_bytes=4)


def test_the_tidy_keeps_the_newest_idle_copies_within_the_grace_budget() -> None:
    copies = [
        copy("new", 2, 50),
        copy("mid", 2, 40),
        copy("old", 1, 30),
        copy("oldest", 1, 10),
        copy("busy", 9, 1, True),
    ]
    # 4 bytes kept, newest first: "old" goes although it alone would still fit.
    assert plan_tidy(copies, keep_bytes=4, now=100) == ("oldest", "old")
    assert plan_tidy(copies, keep_bytes=3, now=100) == ("oldest", "old", "mid")
    # At start, a copy used within the spared time stays even beyond the budget.
    assert plan_tidy(copies, keep_bytes=4, now=100, spare_recent_s=75) == ("oldest",)
    assert plan_tidy(copies, keep_bytes=0, now=100) == ("oldest", "old", "mid", "new")
    # A copy an instance uses is never evicted nor counted.
    assert plan_tidy(copies, keep_bytes=6, now=100) == ()


def test_the_eviction_plan_refuses_what_cannot_fit() -> None:
    busy = [copy("busy", 10, 1, True), copy("idle", 2, 5)]
    over = plan_staging(
        busy,
        incoming="new",
        incoming_bytes=6,
        missing_bytes=6,
        budget_bytes=12,
        free_bytes=10**9,
        reserve_bytes=0,
    )
    assert isinstance(over, EvictionRefused)
    assert "staging budget of 12 bytes" in over.message and "10 of them used" in over.message
    whole = plan_staging(
        [],
        incoming="big",
        incoming_bytes=13,
        missing_bytes=13,
        budget_bytes=12,
        free_bytes=10**9,
        reserve_bytes=0,
    )
    assert isinstance(whole, EvictionRefused) and "more than the whole" in whole.message
    disk = plan_staging(
        busy,
        incoming="new",
        incoming_bytes=6,
        missing_bytes=6,
        budget_bytes=None,
        free_bytes=3,
        reserve_bytes=1,
    )
    assert isinstance(disk, EvictionRefused) and disk.message.startswith("not enough disk")


@pytest.mark.parametrize(
    ("model_id", "escapes"),
    [
        ("org/name", False),
        ("local/gemma-3-270m-q4_k_m", False),
        ("..", True),
        ("../etc", True),
        ("org/../../etc", True),
        ("org/./x", True),
        (".hidden", True),
        ("org//x", True),
        ("org\\..\\x", True),
        ("org/x\x00", True),
        ("", True),
    ],
)
def test_model_ids_that_escape_the_store(model_id: str, escapes: bool) -> None:
    assert model_id_escapes(model_id) is escapes


@pytest.mark.parametrize(
    ("method", "path", "requirement"),
    [
        ("POST", "/store/purge-staging", Requirement.TRUSTED_FABRIC),
        ("GET", "/store/reconciliation", Requirement.OPEN),
        ("POST", "/store/reconciliation/rescan", Requirement.DIRECT_LOOPBACK),
        ("POST", "/store/internal/exports", Requirement.TRUSTED_FABRIC),
        (
            "GET",
            "/store/internal/exports/{token:str}/{relative:path}",
            Requirement.TRUSTED_FABRIC,
        ),
    ],
)
def test_the_upkeep_routes_declare_their_authority(
    method: str, path: str, requirement: Requirement
) -> None:
    declared = route_authority(_routes()[(method, path)])
    assert declared is not None and declared.requirement is requirement


# -- model ids escaping the model directory ------------------------------------------


def test_a_model_id_escaping_the_model_directory_is_400(app: AppNode) -> None:
    for method, path in (
        ("GET", "/store/models/%2E%2E/%2E%2E/etc/download/status"),
        ("POST", "/store/models/%2E%2E/download"),
        ("DELETE", "/store/models/org/%2E%2E/%2E%2E"),
        ("DELETE", "/store/models/.hidden/download"),
    ):
        answer = app.http.request(method, path, json={} if method == "POST" else None)
        assert answer.status_code == 400, (method, path, answer.text)
        assert "escapes the model directory" in answer.json()["error"]["message"]
    purge = app.post("/store/purge-staging", json={"modelId": "../../etc"})
    assert purge.status_code == 400, purge.text
    # The internal transport refuses them too, whatever the route.
    for path in ("/models/..%2F..%2Fetc/files", "/models/..%2Fx/tiny.gguf", "/models/.x/files"):
        answer = httpx.get(f"{base(app)}{path}", timeout=10)
        assert answer.status_code == 400, (path, answer.text)
        assert "escapes the model directory" in answer.json()["error"]["message"]


# -- purge-staging -------------------------------------------------------------------


def test_purge_staging_drops_staged_copies_and_never_the_store_copy(app: AppNode) -> None:
    staged = stage_tiny(app)
    other = fake_copy(app, "old/purged", MIB // 4, time.time())
    # A node download of its own (no staging marker): a purge leaves it.
    downloaded = fake_copy(app, "kept/download", MIB // 4, time.time() - 10, staged=False)
    store_copy = Path(next(p for p in installed_here(app, TINY) if Path(p) != staged))
    assert store_copy.is_relative_to(host.store_root(app.node))

    one = app.post("/store/purge-staging", json={"modelId": TINY})
    assert one.status_code == 200, one.text
    body = one.json()
    assert set(body) == {"commandId", "message"} and TINY in body["message"]
    wait(lambda: not staged.exists(), "TINY's staged directory to go")
    assert other.is_dir()  # restricted to the one model
    assert installed_here(app, TINY) == [str(store_copy)]
    assert read_manifest(store_copy) is not None and (store_copy / GGUF).is_file()
    state = app.get("/state").json()
    assert TINY in state["stagingPurges"]

    every = app.post("/store/purge-staging")
    assert every.status_code == 200, every.text
    wait(lambda: not other.exists(), "every staged directory to go")
    assert installed_here(app, "old/purged") == []
    assert downloaded.is_dir() and installed_here(app, "kept/download") == [str(downloaded)]
    _drop(app, downloaded)
    assert app.get("/state").json()["stagingPurgedAllAt"] is not None
    # The store still serves its copy, and still lists it.
    assert httpx.get(f"{base(app)}/models/{quote(TINY, safe='')}/files").status_code == 200
    entries = app.get("/store/registry").json()["entries"]
    assert [e["model_id"] for e in entries] == [TINY]
    cached = entries[0]["cached_on_nodes"]
    assert [c["location_kind"] for c in cached] == ["store_local"]


def test_purge_staging_keeps_a_copy_a_running_instance_uses(
    app: AppNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = fake_copy(app, "old/running", MIB // 4, time.time() - 60)
    idle = fake_copy(app, "old/idle", MIB // 4, time.time() - 60)
    monkeypatch.setattr(service, "in_use", lambda _node: {ModelId("old/running")})
    assert app.post("/store/purge-staging", json={}).status_code == 200
    wait(lambda: not idle.exists(), "the idle copy to go")
    assert running.is_dir() and installed_here(app, "old/running") == [str(running)]
    _drop(app, running)


def test_purge_staging_refusals(app: AppNode, tmp_path: Path, models_dir: Path) -> None:
    for body in ({"modelId": ""}, {"modelId": "x" * 600}, {"modelId": 5}):
        answer = app.post("/store/purge-staging", json=body)
        assert answer.status_code == 400, (body, answer.text)
    forwarded = app.post(
        "/store/purge-staging", json={}, headers={"x-forwarded-for": "203.0.113.9"}
    )
    assert forwarded.status_code == 403, forwarded.text
    with AppNode(root=tmp_path, models_dir=models_dir) as bare:
        for method, path in (
            ("POST", "/store/purge-staging"),
            ("GET", "/store/reconciliation"),
            ("POST", "/store/reconciliation/rescan"),
        ):
            answer = bare.http.request(method, path, json={} if method == "POST" else None)
            assert answer.status_code == 503, (path, answer.text)
            assert answer.json()["error"]["message"] == "Store not configured"


def test_reconciliation_status_and_its_loopback_only_rescan(app: AppNode) -> None:
    before = app.get("/store/reconciliation")
    assert before.status_code == 200, before.text
    assert set(before.json()) >= {
        "state",
        "inventory_only",
        "scanned_nodes",
        "discovered",
        "imported",
        "pending",
        "failures",
        "last_verified_at",
    }
    for headers in ({"x-forwarded-for": "203.0.113.9"}, {"origin": "http://192.168.1.20"}):
        refused = app.post("/store/reconciliation/rescan", json={}, headers=headers)
        assert refused.status_code == 403, (headers, refused.text)
    done = app.post("/store/reconciliation/rescan", json={})
    assert done.status_code == 200, done.text
    status = done.json()
    # A cluster of one: no other node to scan, nothing to import.
    assert status["state"] == "idle" and status["scanned_nodes"] == 0
    assert status["imported"] == 0 and status["last_verified_at"] is not None


# -- staging eviction under the budget -----------------------------------------------


def test_staging_evicts_the_least_recently_used_copy_to_fit_the_budget(app: AppNode) -> None:
    # 2 MiB + 2 MiB staged, TINY (2 MiB) incoming, a 5 MiB budget: one must go.
    old = fake_copy(app, "old/one", 2 * MIB, time.time() - 3600)
    recent = fake_copy(app, "old/two", 2 * MIB, time.time() - 60)
    # A launch marks its copy used: "old/one" becomes the most recent.
    cache.mark_used(old, time.time())
    staged = stage_tiny(app)
    assert old.is_dir() and not recent.exists()
    assert installed_here(app, "old/two") == []
    assert float((staged / ".skulk" / LAST_USE_MARKER).read_text()) > time.time() - 60
    assert (staged / ".skulk" / STAGED_MARKER).is_file()

    def deleted() -> bool:
        reports = app.get("/state").json()["downloads"].get(app.node.node_id, [])
        return any(r["modelId"] == "old/two" and r["status"] == "deleted" for r in reports)

    wait(deleted, "the evicted copy reported deleted")
    _drop(app, staged, old)


def test_staging_is_refused_when_only_busy_copies_could_make_room(
    app: AppNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = fake_copy(app, "old/busy", 4 * MIB, time.time() - 7200)
    monkeypatch.setattr(staging, "in_use", lambda _node: {ModelId("old/busy")})
    with pytest.raises(StagingFailed, match=r"does not fit the staging budget") as refused:
        stage_tiny(app)
    assert "used by running instances" in str(refused.value)
    assert busy.is_dir()  # never evicted while in use
    target = stage_dir(app.node, ModelId(TINY))
    assert not (target / GGUF).exists() and not (target / f"{GGUF}.incomplete").exists()

    def failed() -> bool:
        reports = app.get("/state").json()["downloads"].get(app.node.node_id, [])
        return any(
            r["modelId"] == TINY
            and r["status"] == "failed"
            and "staging budget" in (r.get("errorMessage") or "")
            for r in reports
        )

    wait(failed, "the refusal in State")
    _drop(app, busy)


# -- the grace budget ----------------------------------------------------------------


@contextlib.contextmanager
def staging_config(app: AppNode, **changes: object) -> Iterator[None]:
    """``model_store.staging`` changed for the block (the node reads it at each tidy)."""
    store = app.node.config_store
    before = store.config
    staging_section = msgspec.structs.replace(before.model_store.staging, **changes)
    model_store = msgspec.structs.replace(before.model_store, staging=staging_section)
    store.save(msgspec.structs.replace(before, model_store=model_store))
    try:
        yield
    finally:
        store.save(before)


def test_an_instance_shutting_down_leaves_the_newest_idle_copies_within_the_budget(
    app: AppNode,
) -> None:
    newest = fake_copy(app, "tidy/newest", 2 * MIB, time.time() - 60)
    older = fake_copy(app, "tidy/older", 2 * MIB, time.time() - 3600)
    with staging_config(app, staging_keep_recent_gb=3 * MIB / GIB):
        instance = place(app, context=1024)
        # Placing changes nothing: only a shutdown (or a start) tidies.
        assert newest.is_dir() and older.is_dir()
        deleted = app.http.delete(f"/instance/{instance}")
        assert deleted.status_code == 200, deleted.text
        wait(lambda: not older.exists(), "the older idle copy evicted")
    assert newest.is_dir()
    assert installed_here(app, "tidy/older") == []

    def reported() -> bool:
        reports = app.get("/state").json()["downloads"].get(app.node.node_id, [])
        return any(r["modelId"] == "tidy/older" and r["status"] == "deleted" for r in reports)

    wait(reported, "the evicted copy reported deleted")
    _drop(app, newest)


def test_a_start_spares_recent_copies_and_cleanup_off_keeps_every_copy(app: AppNode) -> None:
    recent = fake_copy(app, "tidy/recent", MIB, time.time() - 600)
    stale = fake_copy(app, "tidy/stale", MIB, time.time() - 7200)

    def tidy_at_start() -> Any:
        return run(app, lambda: Staging(app.node).tidy(spare_recent_s=START_SPARES_SECONDS))

    with staging_config(app, staging_keep_recent_gb=0.0, cleanup_on_deactivate=False):
        assert tidy_at_start() == ()
    assert recent.is_dir() and stale.is_dir()
    with staging_config(app, staging_keep_recent_gb=0.0):
        assert tidy_at_start() == ("tidy/stale",)
    assert recent.is_dir() and not stale.exists()
    _drop(app, recent)


def test_a_node_starting_tidies_the_copies_a_previous_run_left(
    app: AppNode, tmp_path: Path, models_dir: Path
) -> None:
    entry = app.node.catalog().get(ModelId(TINY))
    assert entry is not None
    left = tmp_path / "models"
    shutil.copytree(models_dir, left, symlinks=True)

    def copy_of(model_id: str, last_use: float) -> Path:
        card = msgspec.structs.replace(entry.card, model_id=ModelId(model_id))
        return write_copy(left, card, MIB, last_use)

    recent, stale = copy_of("left/recent", time.time() - 600), copy_of("left/stale", 1.0)
    config = "model_store:\n  staging:\n    staging_keep_recent_gb: 0\n"
    with AppNode(root=tmp_path / "node", models_dir=left, config_yaml=config) as node:
        wait(lambda: not stale.exists(), "the stale copy tidied at start")
        # Used in the last half hour: kept even beyond the budget (a crash may have
        # left it mid-use).
        assert recent.is_dir()
        assert not [m for m in node.node.installed_models if m.card.model_id == "left/stale"]


def _drop(app: AppNode, *locations: Path) -> None:
    for location in locations:
        app.node.installed_models[:] = [
            m for m in app.node.installed_models if Path(m.location) != location
        ]
        cache.remove_model_dir(location)


# -- POST /imports: pulling a copy from a node's export, verified ----------------------


class ExportSource:
    """A node's export endpoint on loopback: serves ``/exports/<token>/<path>`` with
    ranges to the bound target node; can drop the weights' first response part way."""

    def __init__(self, files: dict[str, bytes], token: str, target: str) -> None:
        self.files, self.token, self.target = files, token, target
        self.cut_first_after: int | None = None
        self.requests: list[tuple[str, str | None]] = []
        source = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def do_GET(self) -> None:
                source.requests.append((self.path, self.headers.get("range")))
                _, _, token, name = self.path.split("/", 3)
                data = source.files.get(name)
                if token != source.token or self.headers.get(TARGET_HEADER) != source.target:
                    self.send_error(403)
                    return
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                wanted = self.headers.get("range")
                if wanted:
                    start = int(wanted.removeprefix("bytes=").split("-")[0])
                body = data[start:]
                self.send_response(206 if wanted else 200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                cut = None
                if name == "model.safetensors":
                    cut, source.cut_first_after = source.cut_first_after, None
                self.wfile.write(body if cut is None else body[:cut])
                if cut is not None:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/exports"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_imports_verify_every_byte_and_publish_only_a_whole_copy(
    app: AppNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    added = app.post("/models/add", json={"model_id": TINY_LLM}, timeout=60)
    assert added.status_code == 200, added.text
    entry = app.node.catalog().get(ModelId(TINY_LLM))
    assert entry is not None
    files = {"model.safetensors": os.urandom(96 * 1024), "config.json": b'{"a": 1}'}
    manifest = [
        {"path": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in sorted(files.items())
    ]
    record = {
        "version": 1,
        "card": msgspec.to_builtins(entry.card),
        "installedAt": int(time.time()),
        "files": manifest,
    }
    source = ExportSource(files, "tok3n", app.node.node_id)
    imports = f"{base(app)}/imports"
    body = {
        "record": record,
        "source_base_url": source.url,
        "capability_token": "tok3n",
        "target_node_id": app.node.node_id,
    }
    store = host.store_root(app.node)
    published = store / model_dir_name(ModelId(TINY_LLM))
    try:
        for changed, status_code, says in (
            ({"target_node_id": "someone-else"}, 400, "target_node_id"),
            ({"source_base_url": "file:///etc"}, 400, "http(s)"),
            ({"record": {**record, "card": {**record["card"], "nLayers": 99}}}, 409, "catalog"),
            ({"unexpected": 1}, 400, "malformed"),
        ):
            answer = httpx.post(imports, json={**body, **changed}, timeout=30)
            assert answer.status_code == status_code, (changed, answer.text)
            assert says in answer.json()["error"]["message"], answer.text
        monkeypatch.setenv("SKULK_DOWNLOAD_RESERVE_BYTES", str(2**62))
        full = httpx.post(imports, json=body, timeout=30)
        assert full.status_code == 507 and "not enough disk" in full.text
        assert source.requests == []  # refused before any byte moved
        monkeypatch.delenv("SKULK_DOWNLOAD_RESERVE_BYTES")

        wrong = [{**m, "sha256": "f" * 64} if m["path"] == "config.json" else m for m in manifest]
        forged = {**body, "record": {**record, "files": wrong}}
        mismatch = httpx.post(imports, json=forged, timeout=30)
        assert mismatch.status_code == 409 and "do not match" in mismatch.text
        assert not published.exists()
        assert TINY_LLM not in [e["model_id"] for e in app.get("/store/registry").json()["entries"]]

        # The source drops the first transfer part way: the import resumes it with a range.
        source.requests.clear()
        source.cut_first_after = 10 * 1024
        done = httpx.post(imports, json=body, timeout=60)
        assert done.status_code == 200, done.text
        assert done.json()["model_id"] == TINY_LLM
        assert done.json()["total_bytes"] == sum(len(d) for d in files.values())
        ranges = [r for path, r in source.requests if path.endswith("model.safetensors") and r]
        assert ranges and ranges[0].startswith("bytes=") and ranges[0] != "bytes=0-"
        for name, data in files.items():
            assert (published / name).read_bytes() == data
        served = httpx.get(f"{base(app)}/models/{quote(TINY_LLM, safe='')}/files").json()
        assert served["files"] == manifest
        again = httpx.post(imports, json=body, timeout=30)
        assert again.status_code == 409 and "already holds" in again.text
        deleted = app.http.delete(f"/store/models/{TINY_LLM}")
        assert deleted.status_code == 200, deleted.text
        # Deleted: tombstoned, so no import may bring it back.
        source.requests.clear()
        grave = httpx.post(imports, json=body, timeout=30)
        assert grave.status_code == 409 and "deleted from the store" in grave.text
        assert source.requests == [] and not published.exists()
    finally:
        source.close()


# -- the tombstone -------------------------------------------------------------------


def test_a_delete_tombstones_durably_and_only_a_download_revives_the_alias(
    app: AppNode,
    layout: tuple[Path, str],
    models_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Last in the module: it stops the module's app."""
    store = host.store_root(app.node)
    graves = store / TOMBSTONES_NAME
    store_copy = store / model_dir_name(ModelId(TINY))
    assert (store_copy / GGUF).is_file()
    # The process "dies" after the tombstone and before the bytes go.
    monkeypatch.setattr(host, "_remove", lambda _target: None)
    deleted = app.http.delete(f"/store/models/{TINY}")
    assert deleted.status_code == 200, deleted.text

    def aliases() -> list[str]:
        return [e["model_id"] for e in json.loads(graves.read_text())["entries"]]

    assert TINY in aliases()
    assert (store_copy / GGUF).is_file()  # the bytes outlived the "crash"
    CLOSED.add(id(app))
    app.__exit__(None, None, None)
    monkeypatch.undo()

    # The next start finishes the delete the tombstone records, and keeps the tombstone.
    with open_app(layout, models_dir) as again:
        wait(lambda: again.get("/state").json().get("storeHosts"), "the store role again")
        assert not store_copy.exists()
        assert again.get("/store/registry").json()["entries"] == []
        assert TINY in aliases()
        # An explicit store download that completes clears it.
        started = again.post(f"/store/models/{TINY}/download", json={}, timeout=60)
        assert started.status_code == 200, started.text
        wait(lambda: status(again)["status"] == "complete", "the download again")
        wait(lambda: TINY not in aliases(), "the tombstone to clear")
        assert (store_copy / GGUF).is_file()
        # A delete that completes removes the bytes and records the alias again.
        assert again.http.delete(f"/store/models/{TINY}").status_code == 200
        assert not store_copy.exists() and TINY in aliases()
