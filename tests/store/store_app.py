"""What the store's in-process suites share: a store-host app on the real Litestar
app, pointed at the fake hub, with the tiny GGUF fetched into its store."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.api.in_process import AppNode
from tests.hub.conftest import TINY, standard_repos
from tests.hub.fake_hub import FakeHub, pointed_at

GGUF = "tiny-Q4_K_M.gguf"


@contextmanager
def fake_hub() -> Iterator[FakeHub]:
    """The fake hub, with ``HF_ENDPOINT`` pointing at it while it serves."""
    with FakeHub(standard_repos()) as served, pointed_at(served):
        yield served


def wait(check: Callable[[], Any], what: str, timeout: float = 60, poll: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}")


def store_host_config(root: Path, port: int, extra: str = "") -> str:
    """A ``skulk.yaml`` making the node a store host, its store under ``root``."""
    return (
        "model_store:\n"
        "  store_host: true\n"
        f"  store_path: {root / 'canonical'}\n"
        f"  store_port: {port}\n"
        f"{extra}"
    )


@contextmanager
def store_host_app(root: Path, models_dir: Path, port: int) -> Iterator[AppNode]:
    """A store-host app, once State shows its store role."""
    config = store_host_config(root, port)
    with AppNode(root=root, models_dir=models_dir, config_yaml=config) as node:
        wait(lambda: node.get("/state").json().get("storeHosts"), "the store role in State")
        yield node


def fetch_tiny(app: AppNode) -> str:
    """TINY, added and fetched into the store."""
    added = app.post("/models/add", json={"model_id": TINY, "gguf_file": GGUF}, timeout=60)
    assert added.status_code == 200, added.text
    started = app.post(f"/store/models/{TINY}/download", json={}, timeout=60)
    assert started.status_code == 200, started.text
    assert started.json()["status"] in ("in_progress", "complete"), started.text
    wait(
        lambda: app.get(f"/store/models/{TINY}/download/status").json()["status"] == "complete",
        "the store download",
    )
    return TINY
