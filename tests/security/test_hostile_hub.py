"""Downloads from a hostile Hugging Face hub: every lie ends the download with a clear
error, in bounded time and bytes, and nothing is left as an installed model.

The real app in process (``tests/api/in_process.py``) behind ``HF_ENDPOINT`` pointing
at the local hub of ``tests/hub/fake_hub.py``, made hostile per file: a resolve answer
whose size is not the listed one, a body with another file's bytes (same size, wrong
hash), a redirect to another host (``127.0.0.2``) serving other bytes, and a chunked
body that never ends. The model is added while the hub is honest (the add reads the
GGUF header); the hub turns hostile for the download.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from skulk_daemon.hub.download import INCOMPLETE_SUFFIX, TRANSFER_CHUNK_BYTES
from skulk_daemon.models.embedding_demo import with_embedding_demo
from skulk_daemon.models.installed import load_installed_models
from tests.api.in_process import AppNode
from tests.hub.conftest import seed_models_dir
from tests.hub.fake_hub import FakeHub, HubFile, HubRepo, _Handler
from tests.hub.gguf_files import tiny_gguf

MODES = ("other-size", "short-body", "wrong-hash", "redirect", "endless", "token")
NAME = "liar-Q4_K_M.gguf"
SIZE_FILLER = 2 * 1024 * 1024
TOKEN = "hf_hostilehubtesttoken00000000000"
BOUND_SECONDS = 30.0


class HostileHandler(_Handler):
    """The fake hub's handler, lying about :data:`NAME` as ``hub.mode`` says."""

    hub: HostileHub

    def _resolve(self, repo_id: str, revision: str, path: str) -> None:
        mode = self.hub.mode
        repo = self.hub.repo(repo_id)
        honest = mode is None or (self.command == "HEAD" and mode not in ("other-size", "redirect"))
        if honest or repo is None or path != NAME:
            return super()._resolve(repo_id, revision, path)
        size, etag = repo.files[path].size(), repo.etag(path)
        headers = {
            "X-Repo-Commit": repo.commit,
            "ETag": f'"{etag}"',
            "X-Linked-Etag": f'"{etag}"',
            "X-Linked-Size": str(size),
        }
        if mode == "other-size":
            headers["X-Linked-Size"] = str(size + 4096)
            return self._send(200, b"", headers, head=True)
        if mode == "short-body" and self.command == "GET":
            return self._send(200, b"\0" * (size - 4096), headers)
        if mode == "wrong-hash" and self.command == "GET":
            return self._send(200, b"\xee" * size, headers)
        if mode in ("redirect", "token"):
            headers["Location"] = f"{self.hub.other_url}/{NAME}"
            return self._send(302, b"", headers, head=self.command == "HEAD")
        if mode == "endless" and self.command == "GET":
            return self._endless(headers)
        return super()._resolve(repo_id, revision, path)

    def _endless(self, headers: dict[str, str]) -> None:
        self.send_response(200)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        block = b"\0" * 65536
        frame = b"%x\r\n" % len(block) + block + b"\r\n"
        try:
            while self.hub.sent < 1 << 30:  # a 1 GiB ceiling, for a test gone wrong
                self.wfile.write(frame)
                self.hub.sent += len(block)
        except (BrokenPipeError, ConnectionResetError):
            return


class OtherHost(_Handler):
    """The host a redirect sends the client to: it serves other bytes of the right size
    and records whether a bearer came along."""

    hub: HostileHub

    def _route(self) -> None:
        self.hub.other_saw_token |= self.headers.get("Authorization") is not None
        size = self.hub.files_size
        headers = {"Content-Type": "application/octet-stream"}
        self._send(200, b"\x11" * size, headers, head=self.command == "HEAD")


class HostileHub(FakeHub):
    mode: str | None = None
    sent: int = 0
    other_saw_token: bool = False
    files_size: int = 0
    other_url: str = ""

    def __enter__(self) -> HostileHub:
        hub = self

        class Handler(HostileHandler):
            pass

        class Other(OtherHost):
            pass

        Handler.hub = Other.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._other = ThreadingHTTPServer(("127.0.0.2", 0), Other)
        self._other.daemon_threads = True
        self.other_url = f"http://127.0.0.2:{self._other.server_address[1]}"
        for server in (self._server, self._other):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._other.shutdown()
        self._other.server_close()


@pytest.fixture(scope="module")
def hub() -> Iterator[HostileHub]:
    gguf = tiny_gguf(filler=SIZE_FILLER)
    repos = [HubRepo(repo_of(mode), {NAME: HubFile(gguf)}, library_name="gguf") for mode in MODES]
    with HostileHub(repos) as served:
        served.files_size = len(gguf)
        previous = os.environ.get("HF_ENDPOINT")
        os.environ["HF_ENDPOINT"] = served.url
        try:
            yield served
        finally:
            if previous is None:
                os.environ.pop("HF_ENDPOINT", None)
            else:
                os.environ["HF_ENDPOINT"] = previous


@pytest.fixture(scope="module")
def app(
    hub: HostileHub, tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[AppNode]:
    with_embedding_demo(load_installed_models(shared_models_dir), shared_models_dir)
    models = seed_models_dir(tmp_path_factory.mktemp("hostile-models"), shared_models_dir)
    with AppNode(root=tmp_path_factory.mktemp("hostile-app"), models_dir=models) as node:
        yield node


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch, hub: HostileHub) -> Iterator[None]:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    yield
    hub.mode, hub.sent = None, 0


def repo_of(mode: str) -> str:
    """One repository per attack, so no attack reads another's outcome."""
    return f"evil-org/{mode}-GGUF"


def _progress(app: AppNode, repo: str) -> dict[str, Any] | None:
    for reports in app.get("/state").json().get("downloads", {}).values():
        for report in reports:
            if report["modelId"] == repo:
                found: dict[str, Any] = report
                return found
    return None


def download_fails(app: AppNode, hub: HostileHub, mode: str) -> tuple[str, float]:
    """Start the download with the hub in ``mode``; the failure's message and how long
    it took to come. Nothing is left installed, and no partial file beyond its size."""
    repo = repo_of(mode)
    added = app.post("/models/add", json={"model_id": repo, "gguf_file": NAME}, timeout=60)
    assert added.status_code == 200, added.text  # the hub is honest while the model is added
    hub.mode = mode
    started = time.monotonic()
    answer = app.post(
        "/download/start", json={"target_node_id": app.node.node_id, "model_id": repo}
    )
    if answer.status_code != 200:
        return answer.json()["error"]["message"], time.monotonic() - started
    while True:
        progress = _progress(app, repo)
        if progress is not None and progress["status"] == "failed":
            break
        assert progress is None or progress["status"] == "in_progress", progress
        assert time.monotonic() - started < BOUND_SECONDS, "the download never failed"
        time.sleep(0.05)
    took = time.monotonic() - started
    model_dir = Path(app.node.models_dir) / f"evil-org--{mode}-GGUF"
    assert not (model_dir / NAME).exists()
    assert not (model_dir / ".skulk" / "installed-card.json").exists()
    partial = model_dir / (NAME + INCOMPLETE_SUFFIX)
    assert not partial.exists() or partial.stat().st_size <= hub.files_size
    entry = app.node.catalog().get(repo)
    assert entry is not None and not entry.installed
    return str(progress["errorMessage"]), took


def test_a_resolve_size_other_than_the_listing_is_refused_before_transfer(
    app: AppNode, hub: HostileHub
) -> None:
    message, _ = download_fails(app, hub, "other-size")
    assert f"the Hub reports {hub.files_size + 4096} bytes but lists {hub.files_size}" in message


def test_a_body_shorter_than_the_listed_size_fails_the_size_check(
    app: AppNode, hub: HostileHub
) -> None:
    message, _ = download_fails(app, hub, "short-body")
    assert f"file should be of size {hub.files_size}" in message


def test_bytes_that_do_not_hash_to_the_listing_are_refused_and_removed(
    app: AppNode, hub: HostileHub
) -> None:
    message, _ = download_fails(app, hub, "wrong-hash")
    assert "digest mismatch" in message
    partial = Path(app.node.models_dir) / "evil-org--wrong-hash-GGUF" / (NAME + INCOMPLETE_SUFFIX)
    assert not partial.exists()


def test_a_redirect_to_another_host_serving_other_bytes_is_refused(
    app: AppNode, hub: HostileHub
) -> None:
    message, _ = download_fails(app, hub, "redirect")
    assert "digest mismatch" in message


def test_an_endless_body_is_cut_at_the_listed_size(app: AppNode, hub: HostileHub) -> None:
    message, took = download_fails(app, hub, "endless")
    assert f"the Hub sent more than the {hub.files_size} bytes it lists" in message
    # The transfer stopped soon after the listed size: what the hub pushed into the
    # loopback socket buffers (several MiB under load) before the client hung up aside,
    # an endless body at loopback speed would be gigabytes within the time bound.
    assert hub.sent < hub.files_size + 32 * TRANSFER_CHUNK_BYTES
    assert took < BOUND_SECONDS


def test_the_token_never_reaches_the_host_a_redirect_names(app: AppNode, hub: HostileHub) -> None:
    hub.other_saw_token = False
    download_fails(app, hub, "token")
    assert hub.other_saw_token is False
