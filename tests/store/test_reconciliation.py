"""Store reconciliation across daemons (subprocesses, real fabric and sockets).

Node A is the store host (reconciling every 2 s); node B downloads TINY from the fake
hub into its own cache (``POST /download/start``), so the copy exists on a node but
not in the store: A's reconciler imports it on its own, verified. The test then
drives B's export capability (every refusal it owes), A's loopback-only
``POST /imports`` refusals (the digest-mismatch and resume cases run in process, in
``test_store_upkeep.py``) and ``POST /store/reconciliation/rescan``. Deleting the
model from the store tombstones the alias: B's later copy (one that "missed" the
eviction) is seen but never imported again, until an explicit store download.

The module's cluster has a third node, C, for the issue's done-when, run first: the
demo GGUF added from the fake hub and fetched into A's store is placed on B (A and C
excluded), so B stages it from the store and verifies it before its runner starts;
the official ``openai`` SDK chats with it through C's API; deleting it from the store
then drops B's copy.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.daemon.serving import PROMPT
from tests.daemon.test_cluster import converged, node_id
from tests.daemon_process import DaemonProcess, free_port
from tests.hub.conftest import DEMO_REPO, TINY, seed_models_dir, standard_repos
from tests.hub.fake_hub import FakeHub
from tests.lazy_sdk import openai

pytestmark = pytest.mark.slow

GGUF = "tiny-Q4_K_M.gguf"
TARGET = "x-skulk-target-node"
RECONCILE_SECONDS = 2


@pytest.fixture(scope="module")
def hub(demo_gguf: Path) -> Iterator[FakeHub]:
    with FakeHub(standard_repos(demo_gguf)) as served:
        yield served


@pytest.fixture(scope="module")
def trio(
    hub: FakeHub, tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[DaemonProcess, DaemonProcess, DaemonProcess, int]]:
    root = tmp_path_factory.mktemp("reconcile")
    env = {"HF_ENDPOINT": hub.url}
    store_port = free_port()
    store = DaemonProcess(
        root=root / "a",
        models_dir=seed_models_dir(root / "a-models", shared_models_dir),
        extra_env={**env, "SKULK_STORE_RECONCILE_SECONDS": str(RECONCILE_SECONDS)},
    )
    store.config_home.mkdir(parents=True, exist_ok=True)
    (store.config_home / "skulk.yaml").write_text(
        "model_store:\n"
        "  store_host: true\n"
        f"  store_path: {root / 'canonical'}\n"
        f"  store_port: {store_port}\n"
    )
    worker = DaemonProcess(
        root=root / "b",
        models_dir=seed_models_dir(root / "b-models", shared_models_dir),
        extra_env=env,
        peers=[store.fabric_address],
    )
    third = DaemonProcess(
        root=root / "c",
        models_dir=seed_models_dir(root / "c-models", shared_models_dir),
        extra_env=env,
        peers=[store.fabric_address],
    )
    try:
        for daemon in (store, worker, third):
            daemon.start()
        wait(lambda: converged([store, worker, third], 3), "three nodes to converge", 120)
        wait(lambda: third.get("/state").json().get("storeHosts"), "the store role", 30)
        yield store, worker, third, store_port
    finally:
        for daemon in (store, worker, third):
            daemon.kill()


def test_place_on_a_worker_and_chat_through_a_third_node(
    trio: tuple[DaemonProcess, DaemonProcess, DaemonProcess, int], demo_gguf: Path
) -> None:
    store, worker, third, _ = trio
    added = third.post("/models/add", json={"model_id": DEMO_REPO}, timeout=120)
    assert added.status_code == 200, added.text
    started = third.post(f"/store/models/{DEMO_REPO}/download", json={}, timeout=60)
    assert started.status_code == 200, started.text
    wait(
        lambda: (
            third.get(f"/store/models/{DEMO_REPO}/download/status").json()["status"] == "complete"
        ),
        "the store download",
        180,
    )
    placed = httpx.post(
        f"{third.url}/place_instance",
        json={
            "model_id": DEMO_REPO,
            "context_tokens": 1024,
            "excluded_nodes": [node_id(store), node_id(third)],
        },
        timeout=60,
    )
    assert placed.status_code == 200, placed.text
    instance_id: str = placed.json()["instance_id"]
    wait(lambda: worker.runner_status(instance_id) == "RunnerReady", "B's runner", 240)
    [copy] = [
        a for a in worker.get("/store/storage").json()["artifacts"] if a["model_id"] == DEMO_REPO
    ]
    assert copy["locationKind"] == "node_cache" and copy["manifestComplete"]
    staged = Path(copy["path"]) / demo_gguf.name
    assert staged.stat().st_size == demo_gguf.stat().st_size
    assert (Path(copy["path"]) / ".skulk" / "staged-from-store").is_file()
    assert not any(
        a["model_id"] == DEMO_REPO for a in third.get("/store/storage").json()["artifacts"]
    )

    with openai.OpenAI(base_url=f"{third.url}/v1", api_key="unused", max_retries=0) as client:
        answer = client.chat.completions.create(
            model=DEMO_REPO,
            messages=PROMPT,  # type: ignore[arg-type]
            max_tokens=8,
            temperature=0,
        )
    assert answer.choices[0].message.content
    assert answer.usage is not None and answer.usage.completion_tokens > 0

    gone = httpx.delete(f"{third.url}/instance/{instance_id}", timeout=30)
    assert gone.status_code == 200, gone.text
    wait(lambda: not worker.get("/state").json()["instances"], "the instance to go")
    deleted = httpx.delete(f"{third.url}/store/models/{DEMO_REPO}", timeout=60)
    assert deleted.status_code == 200, deleted.text
    wait(lambda: not Path(copy["path"]).exists(), "B's staged copy to go", 30)
    assert DEMO_REPO not in registry(store)


def wait(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def cached(node: DaemonProcess) -> dict[str, Any] | None:
    for artifact in node.get("/store/storage").json()["artifacts"]:
        if artifact["model_id"] == TINY and artifact["manifestComplete"]:
            found: dict[str, Any] = artifact
            return found
    return None


def download_on(worker: DaemonProcess) -> dict[str, Any]:
    # The card was added through another node: the worker catalogs it once it has
    # applied that event (a download asked for before then is a 404).
    wait(
        lambda: TINY in [m["id"] for m in worker.get("/v1/models").json()["data"]],
        "B to catalog the added card",
        30,
    )
    started = worker.post(
        "/download/start", json={"target_node_id": node_id(worker), "model_id": TINY}, timeout=60
    )
    assert started.status_code == 200, started.text
    copy: dict[str, Any] = wait(lambda: cached(worker), "B's own copy")
    assert copy["locationKind"] == "node_cache"
    return copy


def grant(worker: DaemonProcess, digest: str, target: str) -> httpx.Response:
    body = {"model_id": TINY, "manifest_sha256": digest, "target_node_id": target}
    return worker.post("/store/internal/exports", json=body)


def registry(store: DaemonProcess) -> list[str]:
    return [e["model_id"] for e in store.get("/store/registry").json()["entries"]]


def test_reconciliation_imports_a_cached_copy_and_never_a_tombstoned_one(
    trio: tuple[DaemonProcess, DaemonProcess, DaemonProcess, int],
) -> None:
    store, worker, _, store_port = trio
    a, b = node_id(store), node_id(worker)
    added = store.post("/models/add", json={"model_id": TINY, "gguf_file": GGUF}, timeout=60)
    assert added.status_code == 200, added.text
    copy = download_on(worker)
    digest = copy["manifestSha256"]
    assert copy["installedIdentity"] == f"{TINY}@{digest}"
    data = (Path(copy["path"]) / GGUF).read_bytes()
    sha = hashlib.sha256(data).hexdigest()

    # -- automatic reconciliation imports B's copy, verified --------------------------
    wait(lambda: TINY in registry(store), "the automatic import", 60)
    status = store.get("/store/reconciliation").json()
    assert status["imported"] == 1 and status["inventory_only"] is False
    assert status["failures"] == [] and status["last_verified_at"] is not None
    files = httpx.get(f"http://127.0.0.1:{store_port}/models/{quote(TINY, safe='')}/files")
    assert files.json()["files"] == [{"path": GGUF, "size": len(data), "sha256": sha}]
    served = httpx.get(f"http://127.0.0.1:{store_port}/models/{quote(TINY, safe='')}/{GGUF}")
    assert served.content == data
    # Every node reads the same status.
    assert worker.get("/store/reconciliation").json()["imported"] == 1

    # -- the export capability, on B --------------------------------------------------
    assert grant(worker, digest, b).status_code == 403  # B holds no store role
    assert grant(worker, "0" * 64, a).status_code == 404  # no such copy
    assert grant(worker, "short", a).status_code == 400
    granted = grant(worker, digest, a)
    assert granted.status_code == 200, granted.text
    lent = granted.json()
    token = lent["capability_token"]
    assert lent["max_bytes"] == 2 * len(data) and lent["manifest_sha256"] == digest
    assert lent["record"]["files"] == [{"path": GGUF, "size": len(data), "sha256": sha}]
    url = f"{worker.url}/store/internal/exports/{token}/{GGUF}"
    assert httpx.get(url).status_code == 403  # no bound target header
    assert httpx.get(url, headers={TARGET: b}).status_code == 403
    bad = f"{worker.url}/store/internal/exports/{'x' * 43}/{GGUF}"
    assert httpx.get(bad, headers={TARGET: a}).status_code == 403
    other = f"{worker.url}/store/internal/exports/{token}/.skulk/files.json"
    assert httpx.get(other, headers={TARGET: a}).status_code == 404
    part = httpx.get(url, headers={TARGET: a, "range": "bytes=100-199"})
    assert part.status_code == 206 and part.content == data[100:200]
    whole = httpx.get(url, headers={TARGET: a})
    assert whole.status_code == 200 and whole.content == data
    # The ceiling (twice the manifest's bytes) counts every byte served so far.
    assert httpx.get(url, headers={TARGET: a, "range": "bytes=0-"}).status_code == 403
    fresh = grant(worker, digest, a).json()["capability_token"]
    os.utime(Path(copy["path"]) / GGUF)  # changed after issuance
    changed = httpx.get(f"{worker.url}/store/internal/exports/{fresh}/{GGUF}", headers={TARGET: a})
    assert changed.status_code == 409, changed.text

    # -- POST /imports on A's listener (this machine: loopback) -----------------------
    imports = f"http://127.0.0.1:{store_port}/imports"
    forwarded = httpx.post(imports, json={}, headers={"x-forwarded-for": "203.0.113.9"})
    assert forwarded.status_code == 403
    assert httpx.post(imports, content=b"{not json").status_code == 400
    assert httpx.post(imports, json={"record": {}}).status_code == 400
    lent = grant(worker, digest, a).json()
    request = {
        "record": lent["record"],
        "source_base_url": f"{worker.url}/store/internal/exports",
        "capability_token": lent["capability_token"],
        "target_node_id": a,
    }
    held = httpx.post(imports, json=request, timeout=60)
    assert held.status_code == 409 and "already holds" in held.text

    # -- an immediate pass, from this machine only ------------------------------------
    refused = store.post(
        "/store/reconciliation/rescan", json={}, headers={"origin": "http://192.168.1.9"}
    )
    assert refused.status_code == 403, refused.text
    rescan = store.post("/store/reconciliation/rescan", json={}, timeout=120)
    assert rescan.status_code == 200, rescan.text
    again = rescan.json()
    assert again["imported"] == 1 and again["discovered"] == 0
    assert again["scanned_nodes"] == 2 and again["pending"] == []

    # -- the tombstone ----------------------------------------------------------------
    deleted = httpx.delete(f"{store.url}/store/models/{TINY}", timeout=60)
    assert deleted.status_code == 200, deleted.text
    wait(lambda: cached(worker) is None, "B's copy to be evicted", 30)
    stale = download_on(worker)  # a cache that missed the eviction
    after = store.post("/store/reconciliation/rescan", json={}, timeout=60).json()
    assert after["tombstoned"] == [TINY] and after["discovered"] == 1
    assert after["imported"] == 1 and registry(store) == []
    assert cached(worker) == stale  # seen, not touched

    # An explicit store download revives the alias.
    started = store.post(f"/store/models/{TINY}/download", json={}, timeout=60)
    assert started.status_code == 200, started.text
    wait(
        lambda: store.get(f"/store/models/{TINY}/download/status").json()["status"] == "complete",
        "the explicit download",
    )
    final = store.post("/store/reconciliation/rescan", json={}, timeout=60).json()
    assert final["tombstoned"] == [] and registry(store) == [TINY]
