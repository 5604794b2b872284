"""Finding (issue #36, from reading): the diagnostics proxy interpolated a caller's
``runner_id`` into the path it forwards to a peer, with this node's API key attached, so
``..`` or an escaped ``?`` could walk the keyed request onto another route of the peer
(``/admin/restart``). Every forwarded path now passes :func:`fanout.checked_path` before
anything is sent. Reproduced with a local HTTP server standing in for the peer and
recording the paths and credentials it receives."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any, cast

import pytest

from skulk_core.ids import NodeId
from skulk_daemon.node import fanout
from skulk_daemon.node.node import Node
from skulk_daemon.system.netinfo import advertised_api_urls

KEY = "sk-skulk-test-0123456789abcdef0123456789"
PEER = NodeId("peer")


class Peer(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: list[tuple[str, str | None]] = []


class Handler(BaseHTTPRequestHandler):
    server: Peer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def peer(monkeypatch: pytest.MonkeyPatch) -> Iterator[Peer]:
    server = Peer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(fanout, "api_urls", lambda node, node_id: (url,))
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


NODE = cast(Node, SimpleNamespace(config=SimpleNamespace(api=SimpleNamespace(keys=(KEY,)))))


def cancel(runner_id: str) -> fanout.PeerAnswer:
    path = f"/v1/diagnostics/node/runners/{runner_id}/cancel"
    return asyncio.run(fanout.ask(NODE, PEER, "POST", path, body={}))


@pytest.mark.parametrize(
    "runner_id",
    [
        "../../../admin/restart",
        "..",
        "x?/../../../../admin/restart#",
        "x%2F..%2F..%2Fadmin",
        "x\\..\\admin",
        "",
        "a b",
    ],
)
def test_an_id_that_leaves_its_route_is_never_forwarded(peer: Peer, runner_id: str) -> None:
    with pytest.raises(fanout.UnsafePath):
        cancel(runner_id)
    assert peer.seen == []  # nothing reached the peer, key or no key


def test_a_well_formed_id_is_forwarded_with_the_key(peer: Peer) -> None:
    runner = "6f1c2b7e-3d4a-4b5c-9d8e-7f6a5b4c3d2e"
    answer = cancel(runner)
    assert answer.ok
    assert peer.seen == [(f"/v1/diagnostics/node/runners/{runner}/cancel", f"Bearer {KEY}")]
    # Model ids (org/name, dots, dashes) still pass for the hub's forwarding.
    assert fanout.checked_path("/download/node-1/org/Model-7B.Q4_K_M") == (
        "/download/node-1/org/Model-7B.Q4_K_M"
    )
    with pytest.raises(fanout.UnsafePath):
        fanout.checked_path("relative/path")


def _member(hostname: str, *urls: str) -> SimpleNamespace:
    return SimpleNamespace(
        system=SimpleNamespace(hostname=hostname), resources=SimpleNamespace(api_urls=urls)
    )


def test_another_machines_loopback_is_never_asked() -> None:
    # A loopback URL names the machine that reads it: told by another machine, it would
    # reach this machine's own API (with this node's key), not that member's.
    telemetry = {
        NodeId("self"): _member("here", "http://192.168.1.10:52415"),
        NodeId("far"): _member("there", "http://127.0.0.1:52415", "http://192.168.1.20:52415"),
        NodeId("far-loopback-only"): _member("there", "http://localhost:52415"),
        NodeId("near"): _member("here", "http://127.0.0.1:52416"),
    }
    node = cast(
        Node,
        SimpleNamespace(node_id=NodeId("self"), view=lambda: SimpleNamespace(telemetry=telemetry)),
    )
    assert fanout.api_urls(node, NodeId("far")) == ("http://192.168.1.20:52415",)
    assert fanout.api_urls(node, NodeId("far-loopback-only")) == ()
    assert fanout.api_urls(node, NodeId("near")) == ("http://127.0.0.1:52416",)
    assert fanout.api_urls(node, NodeId("unknown")) == ()


def test_a_wildcard_bind_advertises_loopback_only_when_nothing_else_exists() -> None:
    assert fanout.is_loopback_url("http://[::1]:52415")
    assert not fanout.is_loopback_url("http://192.168.1.20:52415")
    urls = advertised_api_urls("0.0.0.0", 52415)
    assert urls
    if any(not fanout.is_loopback_url(url) for url in urls):
        assert not any(fanout.is_loopback_url(url) for url in urls), urls
    assert advertised_api_urls("127.0.0.1", 52415) == ("http://127.0.0.1:52415",)
