"""The cluster model store end to end: two daemons, real fabric, the openai SDK.

Node A is the store host (``model_store.store_host``, its own store path and port),
pointed at the fake hub; node B has its own models dir without the model. A adds the
demo GGUF from the fake hub, and the model is placed on B (A excluded) before any
byte is fetched: placement stages what it needs, so B has the store download it into
its canonical copy, then stages the bytes from A's store over the internal transport,
verifies them against the store's SHA-256 manifest, and only then starts its runner.
A chat through A's API answers (served by B). Deleting the model from the store
then drops B's staged copy too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.daemon.serving import PROMPT, wait_for
from tests.daemon.test_cluster import converged, node_id
from tests.daemon_process import DaemonProcess, free_port
from tests.hub.conftest import DEMO_REPO, seed_models_dir, standard_repos
from tests.hub.fake_hub import FakeHub
from tests.lazy_sdk import openai

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hub(demo_gguf: Path) -> Iterator[FakeHub]:
    with FakeHub(standard_repos(demo_gguf)) as served:
        yield served


@pytest.fixture(scope="module")
def cluster(
    hub: FakeHub, tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    root = tmp_path_factory.mktemp("store-cluster")
    store = DaemonProcess(
        root=root / "a",
        models_dir=seed_models_dir(root / "a-models", shared_models_dir),
        extra_env={"HF_ENDPOINT": hub.url},
    )
    config = store.config_home / "skulk.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        "model_store:\n"
        "  store_host: true\n"
        f"  store_path: {root / 'canonical'}\n"
        f"  store_port: {free_port()}\n"
    )
    worker = DaemonProcess(
        root=root / "b",
        models_dir=seed_models_dir(root / "b-models", shared_models_dir),
        peers=[store.fabric_address],
    )
    try:
        store.start()
        worker.start()
        wait_for(lambda: converged([store, worker], 2), "two nodes to converge", timeout=60)
        yield store, worker
    finally:
        store.kill()
        worker.kill()


def status(node: DaemonProcess) -> dict[str, Any]:
    body: dict[str, Any] = node.get(f"/store/models/{DEMO_REPO}/download/status").json()
    return body


def staged(node: DaemonProcess) -> list[dict[str, Any]]:
    artifacts: list[dict[str, Any]] = node.get("/store/storage").json()["artifacts"]
    return [a for a in artifacts if a["model_id"] == DEMO_REPO]


def test_store_stage_verify_chat_and_evict(
    cluster: tuple[DaemonProcess, DaemonProcess], demo_gguf: Path
) -> None:
    store, worker = cluster
    added = store.post("/models/add", json={"model_id": DEMO_REPO}, timeout=120)
    assert added.status_code == 200, added.text
    # The worker sees the store through State: the public routes work from any node.
    assert status(worker) == {"status": "not_found"}  # nothing fetched yet
    assert staged(worker) == []

    placed = httpx.post(
        f"{store.url}/place_instance",
        json={"model_id": DEMO_REPO, "context_tokens": 1024, "excluded_nodes": [node_id(store)]},
        timeout=60,
    )
    assert placed.status_code == 200, placed.text
    instance_id: str = placed.json()["instance_id"]
    wait_for(lambda: worker.runner_status(instance_id) == "RunnerReady", "B's runner", 240)
    # The store downloaded its canonical copy for the placement.
    assert status(worker)["status"] == "complete"

    # B holds a verified copy, staged from the store, reported complete in State.
    [copy] = staged(worker)
    assert copy["locationKind"] == "node_cache" and copy["manifestComplete"]
    gguf = Path(copy["path"]) / demo_gguf.name
    assert hashlib.sha256(gguf.read_bytes()).hexdigest() == _sha256(demo_gguf)
    assert Path(copy["path"]).is_relative_to(worker.models_dir)
    reports = store.get("/state").json()["downloads"][node_id(worker)]
    assert any(r["modelId"] == DEMO_REPO and r["status"] == "completed" for r in reports)
    registry = worker.get("/store/registry").json()
    [entry] = [e for e in registry["entries"] if e["model_id"] == DEMO_REPO]
    kinds = sorted(c["location_kind"] for c in entry["cached_on_nodes"])
    assert kinds == ["node_cache", "store_local"]

    with openai.OpenAI(base_url=f"{store.url}/v1", api_key="unused", max_retries=0) as client:
        answer = client.chat.completions.create(
            model=DEMO_REPO,
            messages=PROMPT,  # type: ignore[arg-type]
            max_tokens=8,
            temperature=0,
        )
    assert answer.choices[0].message.content
    assert answer.usage is not None and answer.usage.completion_tokens > 0

    # In use: the store refuses to delete it.
    refused = httpx.delete(f"{worker.url}/store/models/{DEMO_REPO}", timeout=30)
    assert refused.status_code == 409, refused.text
    deleted_instance = httpx.delete(f"{store.url}/instance/{instance_id}", timeout=30)
    assert deleted_instance.status_code == 200, deleted_instance.text
    wait_for(lambda: not worker.get("/state").json()["instances"], "the instance to go")

    deleted = httpx.delete(f"{worker.url}/store/models/{DEMO_REPO}", timeout=60)
    assert deleted.status_code == 200, deleted.text
    wait_for(lambda: staged(worker) == [] and staged(store) == [], "every copy to go", 30)
    wait_for(lambda: not Path(copy["path"]).exists(), "B's staged directory to go", 30)
    assert store.get("/store/registry").json()["entries"] == []
    assert status(store) == {"status": "not_found"}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
