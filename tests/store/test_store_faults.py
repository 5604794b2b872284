"""The store host dying mid-transfer, through the node's real staging path.

A store-host app (in process, its transport on a real socket) holds TINY. Staging
reaches it through a loopback TCP relay that stands for the store host's address:
the relay forwards bytes both ways and, once a set number of response bytes went
through, drops every connection and stops listening, as a store host that died
would. Staging then fails cleanly (the failure reported in State, nothing
published: no model file, no manifest, no card record, the node's installed models
unchanged), a retry while the host is down fails the same way, and once the relay
listens again on the same port the retry resumes the partial with a ``Range``
request and publishes a verified copy.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from skulk_core.ids import ModelId
from skulk_daemon.hub.manifest import FileManifest, ManifestFile, read_manifest
from skulk_daemon.models.installed import scan_installed_models
from skulk_daemon.models.sidecar import sidecar_path
from skulk_daemon.store import cache
from skulk_daemon.store.staging import Staging, StagingFailed, stage_dir
from tests.api.in_process import AppNode
from tests.daemon_process import free_port
from tests.hub.conftest import TINY
from tests.hub.fake_hub import FakeHub
from tests.store.store_app import store_host_config, wait

GGUF = "tiny-Q4_K_M.gguf"
CUT_AFTER_BYTES = 700 * 1024


class DyingRelay:
    """A TCP relay to ``upstream`` on a fixed loopback port that can die and come back."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.cut_after: int | None = None
        self.requests: list[bytes] = []
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._sent = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, cut_after: int | None = None) -> None:
        self.cut_after, self._sent = cut_after, 0
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def die(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            victims, self._open = self._open, []
        if listener is not None:
            # shutdown first: a thread blocked in accept() would keep a closed listener
            # accepting.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in victims:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            with self._lock:
                self._open += [client, upstream]
            threading.Thread(target=self._up, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while data := client.recv(65536):
                self.requests.append(data)
                upstream.sendall(data)
        except OSError:
            pass

    def _down(self, upstream: socket.socket, client: socket.socket) -> None:
        try:
            while data := upstream.recv(65536):
                client.sendall(data)
                self._sent += len(data)
                if self.cut_after is not None and self._sent >= self.cut_after:
                    self.die()
                    return
        except OSError:
            pass


@pytest.fixture(scope="module")
def app(
    hub: FakeHub, tmp_path_factory: pytest.TempPathFactory, models_dir: Path
) -> Iterator[AppNode]:
    root = tmp_path_factory.mktemp("store-faults")
    config = store_host_config(root, free_port())
    with AppNode(root=root, models_dir=models_dir, config_yaml=config) as node:
        wait(lambda: node.get("/state").json().get("storeHosts"), "the store role in State")
        added = node.post("/models/add", json={"model_id": TINY, "gguf_file": GGUF}, timeout=60)
        assert added.status_code == 200, added.text
        assert node.post(f"/store/models/{TINY}/download", json={}).status_code == 200
        wait(lambda: status(node) == "complete", "the store download")
        yield node


def status(app: AppNode) -> str:
    return str(app.get(f"/store/models/{TINY}/download/status").json()["status"])


def reports(app: AppNode) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = app.get("/state").json()["downloads"].get(app.node.node_id, [])
    return [r for r in found if r["modelId"] == TINY]


def test_the_store_host_dying_mid_transfer_publishes_nothing_and_a_retry_resumes(
    app: AppNode,
) -> None:
    node = app.node
    port = node.config.model_store.store_port
    files = httpx.get(f"http://127.0.0.1:{port}/models/{quote(TINY, safe='')}/files").json()
    manifest = FileManifest(version=1, files=tuple(ManifestFile(**item) for item in files["files"]))
    [item] = manifest.files
    assert item.size > 2 * CUT_AFTER_BYTES
    entry = node.catalog().get(ModelId(TINY))
    assert entry is not None
    before = list(node.installed_models)
    target = stage_dir(node, ModelId(TINY))
    partial = target / f"{GGUF}.incomplete"
    relay = DyingRelay(port)

    async def stage() -> None:
        await Staging(node)._fetch(relay.url, entry.card, manifest)

    def nothing_published() -> None:
        assert not (target / GGUF).exists()
        assert read_manifest(target) is None and not sidecar_path(target).exists()
        assert not cache.is_staged(target)
        assert node.installed_models == before
        assert all(Path(m.location) != target for m in scan_installed_models(node.models_dir))
        # What a launch would load is still not this directory.
        found = node.catalog().get(ModelId(TINY))
        assert found is not None and found.location != str(target)

    relay.start(cut_after=CUT_AFTER_BYTES)
    with pytest.raises(StagingFailed, match="staging test-org/tiny-GGUF from the store failed"):
        app._test_client.blocking_portal.call(stage)
    nothing_published()
    kept = partial.stat().st_size
    assert 0 < kept < item.size  # the bytes that arrived stay for a resume
    wait(lambda: any(r["status"] == "failed" for r in reports(app)), "the failure in State")

    # Still down: the retry fails the same way, touching nothing.
    with pytest.raises(StagingFailed, match="ConnectError"):
        app._test_client.blocking_portal.call(stage)
    nothing_published()
    assert partial.stat().st_size == kept

    # Back: the retry resumes where the bytes stopped and verifies the whole file.
    relay.requests.clear()
    relay.start()
    try:
        app._test_client.blocking_portal.call(stage)
    finally:
        relay.die()
    sent = b"".join(relay.requests).lower()
    assert f"range: bytes={kept}-".encode() in sent
    assert (target / GGUF).stat().st_size == item.size and not partial.exists()
    assert read_manifest(target) is not None and cache.is_staged(target)
    assert any(Path(m.location) == target for m in node.installed_models)
    wait(lambda: any(r["status"] == "completed" for r in reports(app)), "the copy in State")
    node.installed_models[:] = [m for m in node.installed_models if Path(m.location) != target]
    cache.remove_model_dir(target)
