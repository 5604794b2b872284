"""Capabilities across two real daemons: the reference echo provider and a probe
extension installed through their entry points, discovery through ``GET
/v1/capabilities`` and ``/state``, unary calls and all three streaming modes with
inline media on the same node and across the fabric, every typed error, the 422 for
what is not an envelope, cancellation, and inference still working afterwards.

Streams are driven by a real caller: the probe's ``probe.relay`` capability on node A
opens them with ``ExtensionContext.stream_capability`` and returns every frame it read.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from skulk_core.extensions.capabilities import (
    MAX_MEDIA_BYTES,
    MAX_PAYLOAD_BYTES,
    CapabilityDescriptor,
    descriptor_revision,
)
from skulk_daemon.capabilities.registry import MAX_INFLIGHT_CALLS
from tests.daemon.serving import DEMO, PROMPT, place, wait_for
from tests.daemon.test_cluster import converged, node_id
from tests.daemon_process import DaemonProcess
from tests.extension_site import REPO_ROOT, install_fixture, install_package, site_env

pytestmark = pytest.mark.slow

ECHO = REPO_ROOT / "examples" / "extensions" / "echo-provider"
NOBODY = "12D3KooWnobodyIsHereAtAll"


class Pair:
    def __init__(self, a: DaemonProcess, b: DaemonProcess) -> None:
        self.a, self.b = a, b
        self.a_id, self.b_id = node_id(a), node_id(b)

    def listing(self, daemon: DaemonProcess, **params: str) -> dict[str, Any]:
        response = daemon.get("/v1/capabilities", params=params)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def envelope(
        self, target: DaemonProcess, capability: str, payload: Any, **fields: Any
    ) -> dict[str, Any]:
        target_id = self.a_id if target is self.a else self.b_id
        name, _, version = capability.partition("@")
        revisions = self.listing(target)["revisions"]
        return {
            "call_id": f"t-{time.monotonic_ns()}",
            "capability_id": name,
            "version": version or "1.0.0",
            "descriptor_revision": revisions.get(f"{name}@{version or '1.0.0'}", "sha256:none"),
            "caller_node": target_id,
            "target_node": target_id,
            "timeout_seconds": 30,
            "payload": payload,
            **fields,
        }

    def post(
        self, target: DaemonProcess, route: str, body: Any, timeout: float = 60
    ) -> httpx.Response:
        return httpx.post(f"{target.url}/v1/capabilities/{route}", json=body, timeout=timeout)

    def call(
        self, target: DaemonProcess, capability: str, payload: Any, **fields: Any
    ) -> dict[str, Any]:
        response = self.post(target, "call", self.envelope(target, capability, payload, **fields))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def relay(self, **payload: Any) -> dict[str, Any]:
        """Drive a stream from node A (the caller) to ``payload['node_id']``."""
        result = self.call(self.a, "probe.relay", {"node_id": self.b_id, **payload})
        assert result["ok"], result
        relayed: dict[str, Any] = result["result"]
        return relayed

    def remote_call(self, **payload: Any) -> dict[str, Any]:
        """A unary call made by an extension on node A."""
        result = self.call(self.a, "probe.call", {"node_id": self.b_id, **payload})
        assert result["ok"], result
        answered: dict[str, Any] = result["result"]
        return answered


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("capabilities")
    site = root / "site"
    install_package(ECHO, site)
    install_fixture("capability-probe", site)
    env = site_env(site)
    a = DaemonProcess(
        root=root / "a",
        models_dir=shared_models_dir,
        extra_env=env,
    )
    b = DaemonProcess(
        root=root / "b",
        models_dir=shared_models_dir,
        extra_env=env,
        peers=[a.fabric_address],
    )
    try:
        a.start()
        b.start()
        wait_for(lambda: converged([a, b], 2), "two nodes to converge", timeout=60)
        yield Pair(a, b)
    finally:
        a.kill()
        b.kill()


def codes(result: dict[str, Any]) -> str | None:
    assert not result["ok"] and result["result"] is None, result
    code: str = result["error"]["code"]
    assert result["error"]["message"]
    return code


# -- discovery -----------------------------------------------------------------------


def test_each_node_describes_its_capabilities_and_proxies_its_peers(pair: Pair) -> None:
    own = pair.listing(pair.a)
    assert own["node_id"] == pair.a_id
    ids = {f"{d['id']}@{d['version']}": d for d in own["capabilities"]}
    assert {"echo@1.0.0", "echo.stream@1.0.0", "echo.collect@1.0.0", "echo.duplex@1.0.0"} <= set(
        ids
    )
    assert ids["echo.duplex@1.0.0"]["io_mode"] == "bidirectional"
    for key, raw in ids.items():
        descriptor = CapabilityDescriptor(**raw)
        assert own["revisions"][key] == descriptor_revision(descriptor)
    proxied = pair.listing(pair.a, node_id=pair.b_id)
    assert proxied["node_id"] == pair.b_id
    assert proxied == pair.listing(pair.b)
    assert pair.listing(pair.a, node_id=NOBODY)["capabilities"] == []


def test_tags_and_capability_nodes_reach_every_nodes_state(pair: Pair) -> None:
    def seen(daemon: DaemonProcess) -> dict[str, Any] | None:
        state = daemon.get("/state").json()
        tags = state["nodeCapabilities"]
        if not all("echo" in tags.get(n, []) for n in (pair.a_id, pair.b_id)):
            return None
        nodes = state["capabilityNodes"]
        return state if set(nodes) >= {pair.a_id, pair.b_id} else None

    for daemon in (pair.a, pair.b):
        state = wait_for(lambda d=daemon: seen(d), "tags on both nodes", timeout=30)
        assert "echo.duplex" in state["nodeCapabilities"][pair.b_id]
        echo_node = state["capabilityNodes"][pair.b_id][0]
        assert echo_node["pluginId"] == "skulk.echo-provider"
        assert echo_node["status"] == "ready"
        assert echo_node["actions"][0]["capabilityId"] == "echo"
        assert echo_node["observedAt"]


# -- unary calls ----------------------------------------------------------------------


def test_unary_echo_same_node_and_across_the_fabric(pair: Pair) -> None:
    direct = pair.call(pair.b, "echo", {"text": "héllo"})
    assert direct["ok"] and direct["result"] == {"text": "héllo"} and direct["error"] is None
    remote = pair.remote_call(capability_id="echo", payload={"text": "héllo"})
    assert remote == {"ok": True, "result": {"text": "héllo"}, "error": None}
    local = pair.call(
        pair.a,
        "probe.call",
        {"node_id": pair.a_id, "capability_id": "echo", "payload": {"text": "x"}},
    )
    assert local["result"] == {"ok": True, "result": {"text": "x"}, "error": None}


def test_every_typed_error_reaches_the_caller(pair: Pair) -> None:
    b = pair.b
    over = {"text": "x" * (MAX_PAYLOAD_BYTES + 1)}
    assert codes(pair.call(b, "nope", {})) == "not_found"
    assert codes(pair.call(b, "echo@2.0.0", {"text": "x"})) == "version_mismatch"
    assert codes(pair.call(b, "echo", {"text": "x"}, descriptor_revision="sha256:stale")) == (
        "revision_mismatch"
    )
    assert codes(pair.call(b, "echo", {"text": 5})) == "invalid_payload"
    assert codes(pair.call(b, "echo", over)) == "payload_too_large"
    assert codes(pair.call(b, "probe.bad_result", {})) == "invalid_result"
    assert codes(pair.call(b, "probe.bad_result", {"big": True})) == "payload_too_large"
    assert codes(pair.call(b, "probe.raise", {})) == "provider_error"
    assert codes(pair.call(b, "probe.hang", {}, timeout_seconds=0.5)) == "timeout"
    assert codes(pair.call(b, "echo.stream", {"text": "x"})) == "not_found"  # not unary
    wrong_target = pair.envelope(b, "echo", {"text": "x"}, target_node=pair.a_id)
    assert codes(pair.post(b, "call", wrong_target).json()) == "not_found"
    # The same failures cross the fabric typed, to an extension calling from node A.
    remote = [
        pair.remote_call(capability_id="echo", payload={"text": "x"}, revision="sha256:stale"),
        pair.remote_call(capability_id="echo", text_bytes=MAX_PAYLOAD_BYTES + 1),
        pair.remote_call(capability_id="probe.raise", payload={}),
        pair.remote_call(capability_id="probe.hang", payload={}, timeout=0.5),
        pair.remote_call(node_id=NOBODY, capability_id="echo", payload={"text": "x"}),
    ]
    assert [r["error"]["code"] for r in remote] == [
        "revision_mismatch",
        "payload_too_large",
        "provider_error",
        "timeout",
        "unreachable",
    ]


def test_a_body_that_is_not_an_envelope_is_422(pair: Pair) -> None:
    good = pair.envelope(pair.b, "echo", {"text": "x"})
    bad_bodies: list[Any] = [
        {k: v for k, v in good.items() if k != "call_id"},
        {**good, "surprise": 1},
        {**good, "timeout_seconds": 0},
        {**good, "payload": ["not", "an", "object"]},
        [good],
    ]
    for route in ("call", "stream"):
        for body in bad_bodies:
            response = pair.post(pair.b, route, body)
            assert response.status_code == 422, (route, body, response.text)
            assert response.json()["error"]["code"] == "invalid_envelope"
        raw = httpx.post(
            f"{pair.b.url}/v1/capabilities/{route}",
            content=b"{not json",
            headers={"Content-Type": "application/json"},
            timeout=10,
        )
        assert raw.status_code == 422
    cancel = pair.post(pair.b, "stream/cancel", {"call_id": "x"})
    assert cancel.status_code == 422


def test_excess_concurrent_calls_are_overloaded(pair: Pair) -> None:
    hang = [
        pair.envelope(pair.b, "probe.hang", {}, timeout_seconds=4)
        for _ in range(MAX_INFLIGHT_CALLS)
    ]
    for i, body in enumerate(hang):
        body["call_id"] = f"hang-{i}"
    with ThreadPoolExecutor(MAX_INFLIGHT_CALLS) as pool:
        futures = [pool.submit(pair.post, pair.b, "call", body) for body in hang]

        def overloaded() -> bool:
            result = pair.call(pair.b, "echo", {"text": "x"})
            return not result["ok"] and result["error"]["code"] == "overloaded"

        wait_for(overloaded, "the node to refuse a call past its bound", timeout=3.5)
        outcomes = [f.result().json() for f in futures]
    assert {codes(o) for o in outcomes} == {"timeout"}
    assert pair.call(pair.b, "echo", {"text": "x"})["ok"]  # the slots came back


def test_a_capability_that_is_not_ready_is_hidden_and_refused(pair: Pair) -> None:
    pinned = pair.listing(pair.b)["revisions"]["probe.flaky@1.0.0"]
    pair.call(pair.b, "probe.set_ready", {"ready": False})
    try:
        assert "probe.flaky@1.0.0" not in pair.listing(pair.a, node_id=pair.b_id)["revisions"]
        refused = pair.remote_call(capability_id="probe.flaky", payload={}, revision=pinned)
        assert refused["error"]["code"] == "not_found"
    finally:
        pair.call(pair.b, "probe.set_ready", {"ready": True})
    assert pair.remote_call(capability_id="probe.flaky", payload={}, revision=pinned)["ok"]


# -- streams --------------------------------------------------------------------------


def media_of(frame: dict[str, Any]) -> bytes:
    return base64.b64decode(frame["media"]["b64"])


def check_lifecycle(relayed: dict[str, Any], terminal: str) -> list[dict[str, Any]]:
    assert relayed["open"]["ok"], relayed
    frames: list[dict[str, Any]] = relayed["frames"]
    assert frames[0]["kind"] == "started"
    assert [f["sequence"] for f in frames] == list(range(len(frames)))
    assert {f["call_id"] for f in frames} == {relayed["call_id"]}
    assert {f["direction"] for f in frames} == {"provider_to_caller"}
    ends = [f for f in frames if f["kind"] in ("completed", "failed", "cancelled")]
    assert len(ends) == 1 and frames[-1] is ends[0] and ends[0]["kind"] == terminal, frames
    return frames


def test_server_streaming_with_media_across_nodes(pair: Pair) -> None:
    relayed = pair.relay(capability_id="echo.stream", payload={"text": "ça va", "count": 4})
    frames = check_lifecycle(relayed, "completed")
    assert not relayed["has_input"]
    chunks = frames[1:-1]
    assert [c["payload"] for c in chunks] == [{"index": i, "text": "ça va"} for i in range(4)]
    assert all(media_of(c) == "ça va".encode() for c in chunks)
    assert chunks[0]["media"]["media_type"] == "text/plain; charset=utf-8"
    assert frames[-1]["payload"] == {"chunks": 4}


def test_client_streaming_with_media_across_nodes(pair: Pair) -> None:
    blobs = [bytes([i]) * (100_000 + i) for i in range(3)]
    relayed = pair.relay(
        capability_id="echo.collect",
        chunks=[
            {"payload": {"text": f"part {i}"}, "media_b64": base64.b64encode(blob).decode()}
            for i, blob in enumerate(blobs)
        ],
    )
    frames = check_lifecycle(relayed, "completed")
    assert relayed["has_input"] and relayed["sent"] == [True, True, True]
    assert [f["kind"] for f in frames] == ["started", "completed"]
    assert frames[-1]["payload"] == {
        "texts": ["part 0", "part 1", "part 2"],
        "media_bytes": sum(map(len, blobs)),
        "media_sha256": hashlib.sha256(b"".join(blobs)).hexdigest(),
    }


def test_bidirectional_with_media_across_nodes(pair: Pair) -> None:
    pcm = [bytes(range(256)) * 4, b"\x00\x01" * 160, b""]
    relayed = pair.relay(
        capability_id="echo.duplex",
        chunks=[
            {
                "payload": {"text": f"t{i}"},
                "media_b64": base64.b64encode(data).decode(),
                "media_type": "audio/pcm",
                "codec": "pcm_s16le",
                "sample_rate": 16000,
                "channels": 1,
            }
            for i, data in enumerate(pcm)
        ],
    )
    frames = check_lifecycle(relayed, "completed")
    chunks = frames[1:-1]
    assert [c["payload"] for c in chunks] == [
        {"index": i, "text": f"t{i}", "media_bytes": len(data)} for i, data in enumerate(pcm)
    ]
    assert [media_of(c) for c in chunks] == pcm
    assert {(c["media"]["codec"], c["media"]["sample_rate"]) for c in chunks} == {
        ("pcm_s16le", 16000)
    }
    assert frames[-1]["payload"] == {"count": 3}


def test_media_is_bounded_at_one_mebibyte_per_frame(pair: Pair) -> None:
    fits = pair.relay(capability_id="echo.duplex", chunks=[{"media_size": MAX_MEDIA_BYTES}])
    frames = check_lifecycle(fits, "completed")
    assert frames[1]["payload"]["media_bytes"] == MAX_MEDIA_BYTES
    assert frames[1]["media"]["size"] == MAX_MEDIA_BYTES
    assert frames[1]["media"]["sha256"] == hashlib.sha256(b"Z" * MAX_MEDIA_BYTES).hexdigest()
    over = pair.relay(capability_id="echo.duplex", chunks=[{"media_size": MAX_MEDIA_BYTES + 1}])
    assert over["sent"] == [False]
    frames = check_lifecycle(over, "failed")
    assert frames[-1]["error"]["code"] == "payload_too_large"


def test_the_same_streams_run_on_the_callers_own_node(pair: Pair) -> None:
    relayed = pair.relay(
        node_id=pair.a_id, capability_id="echo.stream", payload={"text": "z", "count": 2}
    )
    assert [f["kind"] for f in check_lifecycle(relayed, "completed")] == [
        "started",
        "chunk",
        "chunk",
        "completed",
    ]


def test_the_terminal_is_withheld_until_the_handlers_cleanup_ran(pair: Pair) -> None:
    # The handler's finally sleeps half a second; the caller asks the provider node
    # whether the cleanup finished the moment it sees the terminal.
    relayed = pair.relay(
        capability_id="probe.misbehave", payload={"mode": "cleanup"}, check_cleanup=True
    )
    frames = check_lifecycle(relayed, "completed")
    assert [f["kind"] for f in frames] == ["started", "chunk", "completed"]
    assert relayed["cleaned"] is True


@pytest.mark.parametrize(
    ("mode", "code"),
    [
        ("trailing", "provider_error"),
        ("bad_chunk", "invalid_result"),
        ("raise", "provider_error"),
        ("no_terminal", "provider_error"),
    ],
)
def test_a_misbehaving_handler_fails_only_its_stream(pair: Pair, mode: str, code: str) -> None:
    relayed = pair.relay(
        capability_id="probe.misbehave", payload={"mode": mode}, check_cleanup=True
    )
    frames = check_lifecycle(relayed, "failed")
    assert frames[-1]["error"]["code"] == code
    assert relayed["cleaned"] is True  # the iterator was closed before the failure
    assert [f["kind"] for f in frames[:-1]] == ["started", "chunk"]
    assert pair.call(pair.b, "echo", {"text": "still here"})["ok"]


def test_cancel_through_the_route_is_the_callers_alone(pair: Pair) -> None:
    relayed = pair.relay(
        capability_id="probe.misbehave",
        payload={"mode": "slow"},
        cancel_after=3,
        cancel_via="http",
        cancel_url=f"{pair.b.url}/v1/capabilities/stream/cancel",
        check_cleanup=True,
    )
    frames = check_lifecycle(relayed, "cancelled")
    answers = [(a["status"], a["body"]) for a in relayed["cancel_responses"]]
    assert answers == [
        (200, {"cancelled": False}),
        (200, {"cancelled": True}),
        (200, {"cancelled": False}),
    ]
    assert frames[-1]["error"]["code"] == "cancelled"
    assert relayed["cleaned"] is True


def test_closing_the_iterator_early_stops_the_provider(pair: Pair) -> None:
    relayed = pair.relay(
        capability_id="probe.misbehave",
        payload={"mode": "slow"},
        cancel_after=2,
        cancel_via="close",
        check_cleanup=True,
        wait_cleanup=10,
    )
    assert relayed["closed"] is True
    assert [f["kind"] for f in relayed["frames"]] == ["started", "chunk"]
    assert relayed["cleaned"] is True


def test_the_stream_route_admits_for_a_caller_node_and_cancels_once(pair: Pair) -> None:
    body = pair.envelope(
        pair.b, "probe.misbehave", {"mode": "slow"}, caller_node=pair.a_id, timeout_seconds=20
    )
    admitted = pair.post(pair.b, "stream", body)
    assert admitted.status_code == 200
    assert admitted.json() == {
        "call_id": body["call_id"],
        "ok": True,
        "result": {"admitted": True, "io_mode": "server_streaming"},
        "error": None,
    }
    cancel = {"call_id": body["call_id"], "caller_node": pair.a_id, "target_node": pair.b_id}
    assert pair.post(pair.b, "stream/cancel", {**cancel, "caller_node": pair.b_id}).json() == {
        "cancelled": False
    }
    assert pair.post(pair.b, "stream/cancel", cancel).json() == {"cancelled": True}
    assert pair.post(pair.b, "stream/cancel", cancel).json() == {"cancelled": False}
    unary = pair.post(pair.b, "stream", pair.envelope(pair.b, "echo", {"text": "x"}))
    assert codes(unary.json()) == "not_found"
    refused = pair.post(pair.b, "stream", pair.envelope(pair.b, "echo.stream", {"count": 1}))
    assert codes(refused.json()) == "invalid_payload"


# -- inference and a vanished node ------------------------------------------------------


def test_inference_keeps_working(pair: Pair) -> None:
    place(pair.a)
    response = httpx.post(
        f"{pair.b.url}/v1/chat/completions",
        json={"model": DEMO, "messages": PROMPT, "temperature": 0, "max_tokens": 4},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"]
    assert pair.call(pair.a, "echo", {"text": "after"})["ok"]


def test_a_vanished_node_is_unreachable(pair: Pair) -> None:
    outcome: dict[str, Any] = {}

    def stream_forever() -> None:
        outcome["relayed"] = pair.relay(
            capability_id="probe.misbehave", payload={"mode": "slow"}, timeout=60
        )

    thread = threading.Thread(target=stream_forever)
    thread.start()
    time.sleep(1.0)  # a few chunks are on their way
    pair.b.kill()
    thread.join(timeout=30)
    assert not thread.is_alive()
    frames = check_lifecycle(outcome["relayed"], "failed")
    assert frames[-1]["error"]["code"] == "unreachable"
    assert any(f["kind"] == "chunk" for f in frames)
    gone = pair.remote_call(capability_id="echo", payload={"text": "x"}, revision="sha256:any")
    assert gone["error"]["code"] == "unreachable"
    assert pair.listing(pair.a, node_id=pair.b_id)["capabilities"] == []
    assert json.loads(pair.a.get("/v1/capabilities").text)["capabilities"]
