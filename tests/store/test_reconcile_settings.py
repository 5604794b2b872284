"""Reconciliation's live settings: idle when the store or automatic reconciliation is
switched off, resumed without a restart; inventory-only mode lists without importing.

The first test runs one store-host app in process (a pass every second,
``SKULK_STORE_RECONCILE_SECONDS``) and changes its configuration through ``PUT
/config``: with ``model_store.reconcile_enabled`` false (then ``store_host`` false)
the loop makes no pass and re-checks eligibility; switched back it scans again within
the ten-second re-check. The second runs two daemons (subprocesses, real fabric): the
worker downloads a model into its own cache, the store host in inventory-only mode
lists that copy's identity as pending and imports nothing, and once the mode is
switched off (live, through ``PUT /config``) it imports the copy, whose registry entry
then names both locations in ``cached_on_nodes``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from skulk_daemon.store.reconcile import ELIGIBILITY_SECONDS, RECONCILE_ENV
from tests.api.in_process import AppNode
from tests.daemon.test_cluster import converged, node_id
from tests.daemon_process import DaemonProcess, free_port
from tests.hub.conftest import TINY, seed_models_dir, standard_repos
from tests.hub.fake_hub import FakeHub

GGUF = "tiny-Q4_K_M.gguf"


def wait(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def set_store(
    get: Callable[..., httpx.Response], put: Callable[..., httpx.Response], **keys: Any
) -> None:
    config = get("/config").json()["config"]
    config["model_store"].update(keys)
    answer = put("/config", json=config)
    assert answer.status_code == 200, answer.text


def test_reconciliation_idles_while_disabled_and_resumes_live(
    tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RECONCILE_ENV, "1")
    config = (
        "model_store:\n"
        "  store_host: true\n"
        f"  store_path: {tmp_path / 'canonical'}\n"
        f"  store_port: {free_port()}\n"
        "  reconcile_enabled: false\n"
    )
    with AppNode(root=tmp_path, models_dir=models_dir, config_yaml=config) as app:

        def status() -> dict[str, Any]:
            answer = app.get("/store/reconciliation")
            assert answer.status_code == 200, answer.text
            body: dict[str, Any] = answer.json()
            return body

        def put(path: str, **kwargs: Any) -> httpx.Response:
            return app.http.put(path, **kwargs)

        first = wait(lambda: (s := status())["eligibility_checks"] >= 1 and s, "a re-check")
        assert first["state"] == "idle" and first["automatic"] is False
        assert "reconcile_enabled" in first["disabled_reason"]
        assert first["inventory_only"] is False
        time.sleep(1.5)  # longer than the pass interval: still no pass
        assert status()["last_verified_at"] is None

        set_store(app.get, put, reconcile_enabled=True)
        assert status()["automatic"] is True
        resumed = wait(
            lambda: status()["last_verified_at"],
            "a pass after re-enabling",
            ELIGIBILITY_SECONDS + 5,
        )
        assert status()["disabled_reason"] is None

        # The store itself switched off: idle again, re-checking; no further pass.
        set_store(app.get, put, store_host=False)
        checks = status()["eligibility_checks"]
        wait(lambda: status()["eligibility_checks"] > checks, "an idle re-check", 5)
        off = status()
        assert off["state"] == "idle" and off["automatic"] is False
        assert "store_host" in off["disabled_reason"]
        settled = off["last_verified_at"]
        time.sleep(1.5)
        assert status()["last_verified_at"] == settled

        set_store(app.get, put, store_host=True, reconcile_inventory_only=True)
        assert status()["inventory_only"] is True
        wait(
            lambda: (status()["last_verified_at"] or 0) > max(settled, resumed),
            "a pass once the node is a store host again",
            ELIGIBILITY_SECONDS + 5,
        )


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    root = tmp_path_factory.mktemp("reconcile-settings")
    with FakeHub(standard_repos()) as hub:
        env = {"HF_ENDPOINT": hub.url}
        store = DaemonProcess(
            root=root / "a",
            models_dir=seed_models_dir(root / "a-models", shared_models_dir),
            extra_env={**env, RECONCILE_ENV: "1"},
        )
        store.config_home.mkdir(parents=True, exist_ok=True)
        (store.config_home / "skulk.yaml").write_text(
            "model_store:\n"
            "  store_host: true\n"
            f"  store_path: {root / 'canonical'}\n"
            f"  store_port: {free_port()}\n"
            "  reconcile_inventory_only: true\n"
        )
        worker = DaemonProcess(
            root=root / "b",
            models_dir=seed_models_dir(root / "b-models", shared_models_dir),
            extra_env=env,
            peers=[store.fabric_address],
        )
        try:
            store.start()
            worker.start()
            wait(lambda: converged([store, worker], 2), "two nodes to converge", 120)
            wait(lambda: worker.get("/state").json().get("storeHosts"), "the store role", 30)
            yield store, worker
        finally:
            store.kill()
            worker.kill()


def registry(store: DaemonProcess) -> dict[str, dict[str, Any]]:
    return {e["model_id"]: e for e in store.get("/store/registry").json()["entries"]}


@pytest.mark.slow
def test_inventory_only_lists_without_importing_until_switched_off(
    pair: tuple[DaemonProcess, DaemonProcess],
) -> None:
    store, worker = pair
    added = store.post("/models/add", json={"model_id": TINY, "gguf_file": GGUF}, timeout=60)
    assert added.status_code == 200, added.text
    # Added through the store node: the worker catalogs the card once it has applied
    # that event (a download asked for before then is a 404).
    wait(
        lambda: TINY in [m["id"] for m in worker.get("/v1/models").json()["data"]],
        "the worker to catalog the added card",
        30,
    )
    started = worker.post(
        "/download/start", json={"target_node_id": node_id(worker), "model_id": TINY}, timeout=60
    )
    assert started.status_code == 200, started.text

    def listed() -> dict[str, Any] | None:
        body: dict[str, Any] = store.get("/store/reconciliation").json()
        return body if body["pending"] == [TINY] else None

    status = wait(listed, "the copy listed as pending", 90)
    assert status["inventory_only"] is True and status["imported"] == 0
    [identity] = status["discovered_identities"]
    assert identity["model_id"] == TINY and identity["node_id"] == node_id(worker)
    copy = next(
        a for a in worker.get("/store/storage").json()["artifacts"] if a["model_id"] == TINY
    )
    assert identity["installed_identity"] == copy["installedIdentity"]
    time.sleep(2.5)  # two more passes: still nothing imported
    assert TINY not in registry(store)
    assert store.get("/store/reconciliation").json()["imported"] == 0

    def put(path: str, **kwargs: Any) -> httpx.Response:
        return httpx.put(f"{store.url}{path}", timeout=30.0, **kwargs)

    set_store(store.get, put, reconcile_inventory_only=False)
    entry = wait(lambda: registry(store).get(TINY), "the import once inventory-only is off", 60)
    after = store.get("/store/reconciliation").json()
    assert after["inventory_only"] is False and after["imported"] == 1 and after["pending"] == []
    assert entry["reconciliation_state"] == "verified"
    assert entry["last_verified_at"] > 0
    by_node = {c["node_id"]: c for c in entry["cached_on_nodes"]}
    assert by_node[node_id(store)]["location_kind"] == "store_local"
    assert by_node[node_id(store)]["identity"] == f"{TINY}@{entry['manifest_sha256']}"
    remote = by_node[node_id(worker)]
    assert remote["location_kind"] == "node_cache" and remote["complete"] is True
    assert remote["in_use"] is False and remote["bytes"] == copy["size_bytes"]
    # The worker's own API knows its copy's identity.
    seen = {c["node_id"]: c for c in registry_of(worker)[TINY]["cached_on_nodes"]}
    assert seen[node_id(worker)]["identity"] == copy["installedIdentity"]


def registry_of(node: DaemonProcess) -> dict[str, dict[str, Any]]:
    return {e["model_id"]: e for e in node.get("/store/registry").json()["entries"]}
