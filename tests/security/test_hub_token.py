"""Finding (issue #36, from reading): the Hugging Face range reader sent
``Authorization: Bearer <hf_token>`` to a file's resolved location, which is a CDN of
another origin. The token now goes only to the configured endpoint's origin, as
``huggingface-hub`` does. Reproduced with two local HTTP servers: a "Hub" whose file
resolves (302) to a "CDN" on another port, both recording the headers they receive."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants
from huggingface_hub.utils import _detect_agent

from skulk_daemon.hub.client import HubClient

TOKEN = "hf_test_secret_token_0123456789"
COMMIT = "a" * 40
BODY = b'{"model_type": "llama"}'


class Recorder(ThreadingHTTPServer):
    def __init__(self, redirect_to: str | None) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.redirect_to = redirect_to
        self.seen: list[tuple[str, str, str | None]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        self.server.seen.append((self.command, self.path, self.headers.get("Authorization")))
        if self.server.redirect_to is not None:
            # The Hub's answer for an LFS file: its metadata, and the CDN as Location.
            self.send_response(302)
            self.send_header("Location", f"{self.server.redirect_to}/blob")
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("X-Linked-Etag", '"' + "b" * 64 + '"')
            self.send_header("X-Linked-Size", str(len(BODY)))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(206 if self.headers.get("Range") else 200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(BODY)

    def do_GET(self) -> None:
        self._answer()

    def do_HEAD(self) -> None:
        self._answer()


@contextlib.contextmanager
def serving(server: Recorder) -> Iterator[Recorder]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Recorder, Recorder]]:
    with serving(Recorder(None)) as cdn, serving(Recorder(cdn.url)) as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint.url)
        yield endpoint, cdn


def test_the_token_goes_to_the_hub_and_never_to_the_cdn(hub: tuple[Recorder, Recorder]) -> None:
    endpoint, cdn = hub
    client = HubClient(configured_token=TOKEN)
    assert client.small_file("org/repo", COMMIT, "config.json") == BODY
    # Metadata from the Hub, with the token; the bytes from the CDN, without it.
    assert endpoint.seen and all(auth == f"Bearer {TOKEN}" for _, _, auth in endpoint.seen)
    assert cdn.seen and all(auth is None for _, _, auth in cdn.seen)

    # A ranged read that starts at the Hub and is redirected keeps it there too.
    cdn.seen.clear()
    resolve = f"{endpoint.url}/org/repo/resolve/{COMMIT}/config.json"
    assert client.read_range(resolve, 0, 4) == BODY[:5]
    assert endpoint.seen[-1][2] == f"Bearer {TOKEN}"
    assert cdn.seen and all(auth is None for _, _, auth in cdn.seen)


def test_only_the_endpoints_exact_origin_gets_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example")
    client = HubClient(configured_token=TOKEN)
    assert client.headers_for("https://hub.example/x")["authorization"] == f"Bearer {TOKEN}"
    assert client.headers_for("https://HUB.example:443/x")["authorization"] == f"Bearer {TOKEN}"
    for other in ("http://hub.example/x", "https://hub.example:8443/x", "https://cdn.example/x"):
        assert "authorization" not in {k.lower() for k in client.headers_for(other)}, other


def test_the_hub_is_asked_only_for_the_file_named(
    hub: tuple[Recorder, Recorder], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """huggingface_hub, left to itself, fetches an "agent harness" registry from its
    endpoint (no token, once a day, cached under HF_HOME) while it builds a request's
    headers. A node asks the Hub only for what it names: with no cached registry, no
    registry fetch is made and the endpoint sees only the file's resolve request."""
    fetches: list[str] = []
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(tmp_path / "harnesses.json"))
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", False)
    monkeypatch.setattr(_detect_agent, "_registry", None)
    monkeypatch.setattr(_detect_agent, "_fetch_registry", lambda: fetches.append("fetch"))
    endpoint, _ = hub
    assert HubClient(configured_token=TOKEN).small_file("org/repo", COMMIT, "config.json") == BODY
    assert fetches == []
    assert [path for _, path, _ in endpoint.seen] == [f"/org/repo/resolve/{COMMIT}/config.json"]
