"""The diagnostics sweep against members that answer badly.

The real app in process is the first node; the second nodes are topology members
whose advertised API URL (their telemetry's ``api_urls``) is a local server that
misbehaves: it drips its answer a byte at a time, answers garbage, streams an endless
body, never answers, or redirects elsewhere. The sweep (``GET /v1/diagnostics/cluster``)
answers in bounded time, lists each of them as ``ok: false`` with the reason, and the
node's API key reaches only the URLs members advertise, never a redirect's target.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pytest

from skulk_core.ids import NodeId, new_command_id
from skulk_core.state.commands import RegisterNode
from skulk_daemon.node.fanout import MAX_ANSWER_BYTES, PROBE_TIMEOUT_SECONDS
from tests.api.in_process import AppNode

API_KEY = "fanout-attack-api-key-0123456789abcdef"
BEHAVIOURS = ("honest", "drip", "garbage", "endless", "silent", "redirect")
SWEEP_BOUND_SECONDS = PROBE_TIMEOUT_SECONDS + 15.0
"""Members are asked at once, each within the probe budget; the rest is slack for a
loaded machine (before the whole-answer deadline, a dripping member held it for good)."""


@dataclass
class BadMember:
    """A local server standing in for one member's API."""

    behaviour: str
    elsewhere: str = ""
    bundle: bytes = b"{}"
    """What an honest member answers: a real node bundle (the app's own)."""
    authorizations: list[str | None] = field(default_factory=list)
    posts: list[tuple[str, str | None]] = field(default_factory=list)
    """Each POST's path and Authorization header (the runner-cancel proxy's)."""
    sent: int = 0

    def __post_init__(self) -> None:
        member = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                member.authorizations.append(self.headers.get("Authorization"))
                try:
                    member.answer(self)
                except (BrokenPipeError, ConnectionResetError):
                    return

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                member.posts.append((self.path, self.headers.get("Authorization")))
                body = b'{"cancelled": false}'
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.listener: socket.socket | None = None
        if self.behaviour == "silent":  # accepts into the backlog, never reads or answers
            self.server.server_close()
            self.listener = socket.socket()
            self.listener.bind(("127.0.0.1", 0))
            self.listener.listen(16)
            self.port = self.listener.getsockname()[1]
        else:
            self.port = self.server.server_address[1]
            threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        def head(status: int, headers: dict[str, str]) -> None:
            handler.send_response(status)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()

        if self.behaviour == "honest":
            body = self.bundle
            head(200, {"Content-Type": "application/json", "Content-Length": str(len(body))})
            handler.wfile.write(body)
        elif self.behaviour == "drip":  # a byte every half second: no read ever times out
            head(200, {"Content-Type": "application/json", "Content-Length": str(1 << 20)})
            for _ in range(1 << 20):
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(0.5)
        elif self.behaviour == "garbage":
            body = b"<html>\x00\xff definitely not a diagnostics bundle"
            head(200, {"Content-Type": "application/json", "Content-Length": str(len(body))})
            handler.wfile.write(body)
        elif self.behaviour == "endless":
            head(200, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
            block = b"[" * 65536
            frame = b"%x\r\n" % len(block) + block + b"\r\n"
            while self.sent < 1 << 30:  # a 1 GiB ceiling, for a test gone wrong
                handler.wfile.write(frame)
                self.sent += len(block)
        elif self.behaviour == "redirect":
            head(307, {"Location": f"{self.elsewhere}{handler.path}", "Content-Length": "0"})

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        else:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path) -> Iterator[AppNode]:
    with AppNode(root=tmp_path_factory.mktemp("fanout-app"), models_dir=shared_models_dir) as node:
        yield node


@pytest.fixture(scope="module")
def members(app: AppNode) -> Iterator[dict[NodeId, BadMember]]:
    """One member per behaviour, registered in State with telemetry advertising its URL."""
    elsewhere = BadMember("honest")
    made = {NodeId(f"12D3KooW{behaviour}member"): BadMember(behaviour) for behaviour in BEHAVIOURS}
    portal = app._test_client.blocking_portal
    own = app.node.own_telemetry()
    assert own is not None
    bundle = app.get("/v1/diagnostics/node")
    assert bundle.status_code == 200, bundle.text
    for node_id, member in made.items():
        member.elsewhere = elsewhere.url
        member.bundle = bundle.content
        portal.call(app.node.submit, RegisterNode(command_id=new_command_id(), node_id=node_id))
        resources = msgspec.structs.replace(own.resources, api_urls=(member.url,))
        reading = msgspec.structs.replace(own, node_id=node_id, resources=resources)
        portal.call(app.node.record_telemetry, reading)
    assert set(made) <= set(app.node.state.topology.nodes)
    made[NodeId("elsewhere")] = elsewhere
    yield made
    for member in made.values():
        member.close()


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKULK_API_KEYS", API_KEY)


def sweep(app: AppNode) -> tuple[dict[str, dict[str, Any]], float]:
    started = time.monotonic()
    answer = app.get("/v1/diagnostics/cluster", headers={"Authorization": f"Bearer {API_KEY}"})
    took = time.monotonic() - started
    assert answer.status_code == 200, answer.text
    return {entry["nodeId"]: entry for entry in answer.json()["nodes"]}, took


def test_the_sweep_answers_in_bounded_time_and_marks_every_bad_member(
    app: AppNode, members: dict[NodeId, BadMember]
) -> None:
    entries, took = sweep(app)
    assert took < SWEEP_BOUND_SECONDS
    assert entries[app.node.node_id]["ok"] is True
    assert entries["12D3KooWhonestmember"]["ok"] is True
    expected = {
        "drip": f"no complete answer within {PROBE_TIMEOUT_SECONDS:g}s",
        "garbage": "a 200 answer that is not JSON",
        "endless": f"an answer over {MAX_ANSWER_BYTES} bytes",
        "silent": f"no complete answer within {PROBE_TIMEOUT_SECONDS:g}s",
        "redirect": "HTTP 307",
    }
    for behaviour, says in expected.items():
        entry = entries[f"12D3KooW{behaviour}member"]
        assert entry["ok"] is False, entry
        assert says in entry["error"], entry
        assert "bundle" not in entry


def test_an_endless_answer_is_read_no_further_than_its_bound(
    app: AppNode, members: dict[NodeId, BadMember]
) -> None:
    endless = members[NodeId("12D3KooWendlessmember")]
    endless.sent = 0
    sweep(app)
    time.sleep(0.5)  # what the server pushed into socket buffers before the hang-up
    assert endless.sent < 2 * MAX_ANSWER_BYTES


def test_one_member_proxied_alone_is_refused_in_bounded_time(
    app: AppNode, members: dict[NodeId, BadMember]
) -> None:
    for behaviour in ("drip", "garbage", "endless"):
        started = time.monotonic()
        answer = app.get(
            f"/v1/diagnostics/cluster/12D3KooW{behaviour}member",
            headers={"Authorization": f"Bearer {API_KEY}"},
        )
        assert time.monotonic() - started < SWEEP_BOUND_SECONDS
        assert answer.status_code == 502, answer.text
        assert answer.json()["error"]["code"] == "node_unreachable"


def test_the_api_key_goes_only_to_advertised_urls(
    app: AppNode, members: dict[NodeId, BadMember]
) -> None:
    sweep(app)
    honest = members[NodeId("12D3KooWhonestmember")]
    assert honest.authorizations and set(honest.authorizations) == {f"Bearer {API_KEY}"}
    redirect = members[NodeId("12D3KooWredirectmember")]
    assert redirect.authorizations  # the redirecting member was asked...
    assert members[NodeId("elsewhere")].authorizations == []  # ...its target never was


@pytest.mark.parametrize(
    "runner_id",
    ["%2E%2E", "x%3F%2F..%2F..%2Fadmin%2Frestart", "x%23", "x%5C..%5Cadmin", "x%25"],
    ids=["dot-dot", "query-walk", "fragment", "backslash", "escape"],
)
def test_the_runner_cancel_proxy_forwards_no_id_that_leaves_its_route(
    app: AppNode, members: dict[NodeId, BadMember], runner_id: str
) -> None:
    # Issue #36, from reading: the proxy put the caller's runner id into the path it
    # forwards with this node's key. Through the real route, an id that would walk the
    # keyed request elsewhere is refused (400, or 404 where it is no route at all) and
    # the member hears nothing.
    honest = members[NodeId("12D3KooWhonestmember")]
    honest.posts.clear()
    answer = app.post(
        f"/v1/diagnostics/cluster/12D3KooWhonestmember/runners/{runner_id}/cancel",
        json={},
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    assert answer.status_code in (400, 404), answer.text
    assert answer.json()["error"]["message"]
    assert honest.posts == []


def test_a_well_formed_runner_id_is_proxied_with_the_key(
    app: AppNode, members: dict[NodeId, BadMember]
) -> None:
    honest = members[NodeId("12D3KooWhonestmember")]
    honest.posts.clear()
    runner = "6f1c2b7e-3d4a-4b5c-9d8e-7f6a5b4c3d2e"
    app.post(
        f"/v1/diagnostics/cluster/12D3KooWhonestmember/runners/{runner}/cancel",
        json={},
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    assert honest.posts == [(f"/v1/diagnostics/node/runners/{runner}/cancel", f"Bearer {API_KEY}")]
