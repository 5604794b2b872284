"""The owner protocol's edges on a real owner runtime (``OwnerHost`` serving a provider
on a real Unix socket in this process) and the registry's dynamic claims: request,
invocation and response bounds; a lost answer is never resent (the provider ran once);
an unprotected socket directory is refused before connecting; static capability ids
keep priority over dynamic ones, and a contract two owners claim is hidden from both;
``SKULK_EXTENSIONS_DISABLE=1`` keeps managed capabilities out of the fabric."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityDescriptor,
    descriptor_revision,
)
from skulk_daemon.capabilities.registry import ProviderRegistry, compile_descriptor
from skulk_daemon.capabilities.service import CapabilityService
from skulk_daemon.plugins.access import ManagerAccess
from skulk_daemon.plugins.owners.adapter import ManagedOwners
from skulk_host.plugin_owners import wire
from skulk_host.plugin_owners.owner_host import OwnerHost
from skulk_host.unix_address import addressable


def _descriptor(name: str) -> CapabilityDescriptor:
    return CapabilityDescriptor(
        id=name,
        version="1.0.0",
        title=name,
        description=name,
        input_schema={"type": "object"},
        output_schema={"type": "object"},
    )


class Provider:
    def __init__(self, *names: str) -> None:
        self.descriptors = [_descriptor(n) for n in names]
        self.calls = 0
        self.unready: set[str] = set()

    def capabilities(self) -> list[CapabilityDescriptor]:
        return self.descriptors

    def capability_ready(self, qualified_id: str) -> bool:
        return qualified_id not in self.unready

    async def handle_call(self, context: object, call: CapabilityCall) -> dict[str, Any]:
        self.calls += 1
        if call.capability_id == "slow":
            await asyncio.sleep(1.0)
        if call.capability_id == "big":
            return {"text": "x" * (wire.MAX_RESPONSE_BYTES + 1)}
        return {"size": len(str(call.payload))}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Provider, Path]]:
    provider = Provider("echo", "slow", "big")
    host = OwnerHost(provider, tmp_path / "owner")
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(host.serve(stop),))
    thread.start()
    path = tmp_path / "owner" / wire.SOCKET_NAME
    deadline = time.monotonic() + 10
    while not path.exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    yield provider, path
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)
    loop.close()


def _call(name: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    call = CapabilityCall(
        call_id="c-1",
        capability_id=name,
        version="1.0.0",
        descriptor_revision=descriptor_revision(_descriptor(name)),
        caller_node="n",
        target_node="n",
        timeout_seconds=5,
        payload=payload or {},
    )
    return {
        "op": "call",
        "call": {
            "call_id": call.call_id,
            "capability_id": call.capability_id,
            "version": call.version,
            "descriptor_revision": call.descriptor_revision,
            "caller_node": call.caller_node,
            "target_node": call.target_node,
            "timeout_seconds": call.timeout_seconds,
            "payload": call.payload,
        },
    }


def test_bounds_no_replay_and_protection(served: tuple[Provider, Path]) -> None:
    provider, path = served
    described = wire.request(path, {"op": "describe"}, 2)
    assert described["protocol"] == wire.OWNER_PROTOCOL
    assert described["ready"] == ["echo@1.0.0", "slow@1.0.0", "big@1.0.0"]
    assert wire.request(path, _call("echo", {"t": "a" * 1000}), 2) == {"output": {"size": 1009}}
    answered = asyncio.run(wire.arequest(path, _call("echo"), 2))
    assert answered == {"output": {"size": 2}}
    # An invocation may be up to 64 KiB; an ordinary request only 16 KiB.
    near = _call("echo", {"t": "a" * (wire.MAX_INVOCATION_BYTES - 1024)})
    assert wire.request(path, near, 2)["output"]["size"] > wire.MAX_REQUEST_BYTES
    over = _call("echo", {"t": "a" * wire.MAX_INVOCATION_BYTES})
    with pytest.raises(wire.OwnerError) as refused:
        wire.request(path, over, 2)
    assert refused.value.code == "too_large"
    with pytest.raises(wire.OwnerError, match="bound"):
        wire.request(path, {"op": "configuration", "node_id": "n" * wire.MAX_REQUEST_BYTES}, 2)
    calls = provider.calls
    # An answer over 128 KiB is refused by the owner, never sent.
    with pytest.raises(wire.OwnerError) as big:
        wire.request(path, _call("big"), 2)
    assert big.value.code == "too_large"
    # A lost answer (the client gave up) is never resent: the provider ran once.
    provider.calls = calls = 0
    with pytest.raises(wire.OwnerUnavailable) as lost:
        wire.request(path, _call("slow"), 0.3)
    assert lost.value.timed_out
    with pytest.raises(wire.OwnerUnavailable) as lost_async:
        asyncio.run(wire.arequest(path, _call("slow"), 0.3))  # the API process's client
    assert lost_async.value.timed_out
    time.sleep(1.2)
    assert provider.calls == calls + 2
    # Facets the owner lacks, and unknown requests.
    with pytest.raises(wire.OwnerError) as missing:
        wire.request(path, {"op": "credentials", "node_id": "x"}, 2)
    assert missing.value.code == "unsupported"
    with pytest.raises(wire.OwnerError) as unknown:
        wire.request(path, {"op": "launch"}, 2)
    assert unknown.value.code == "malformed"
    # A socket directory open to others is refused before connecting.
    path.parent.chmod(0o755)
    with pytest.raises(wire.OwnerUnavailable, match="owner-only"):
        wire.request(path, {"op": "health"}, 2)
    path.parent.chmod(0o700)
    assert wire.request(path, {"op": "health"}, 2)["healthy"] is True


def _raw_exchange(path: Path, payload: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        with addressable(path) as address:
            sock.connect(address)
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        body = b""
        while chunk := sock.recv(65536):
            body += chunk
    answer: dict[str, Any] = json.loads(body)
    return answer


@pytest.mark.parametrize(
    ("payload", "code", "message"),
    [
        (b"not json\n", "malformed", "the request is not JSON"),
        (b"[1, 2]\n", "malformed", "the request is not a JSON object"),
        (b'{"op": "launch"}\n', "malformed", "unknown owner request"),
        (b"{}\n", "malformed", "unknown owner request"),
        (b'{"op": "bind"}\n', "malformed", "bind names a transport node id"),
        (b'{"op": "bind", "transport_node_id": ""}\n', "malformed", "bind names a transport"),
        (b'{"op": "proposal-list", "node_id": "n", "offset": true}\n', "malformed", "offset"),
        (
            b'{"op": "proposal-resume", "node_id": "n", "operation_id": "o"}\n',
            "malformed",
            "its operator",
        ),
        (b'{"op": "proposal-operation", "node_id": "n"}\n', "malformed", "its node and operation"),
        (b'{"op": "call", "call": {}}\n', "malformed", "does not match the owner protocol"),
        (b'{"op": "stream", "call": {}}\n', "malformed", "stream request does not match"),
        (b'{"op": "configuration", "node_id": "' + b"n" * 17000 + b'"}\n', "too_large", "bound"),
    ],
)
def test_a_request_that_does_not_decode_gets_the_owner_refusal(
    served: tuple[Provider, Path], payload: bytes, code: str, message: str
) -> None:
    provider, path = served
    answer = _raw_exchange(path, payload)
    assert answer["ok"] is False
    assert answer["error"]["code"] == code
    assert message in answer["error"]["message"]
    assert provider.calls == 0


def test_the_owner_ignores_fields_it_does_not_read(served: tuple[Provider, Path]) -> None:
    # Skulk adds ``plugin_id`` to some requests; the owner answers them as before.
    _, path = served
    bound = _raw_exchange(path, b'{"op": "bind", "transport_node_id": "n-1", "plugin_id": "p"}\n')
    assert bound == {"ok": True, "result": {"transport_node_id": "n-1"}}
    rebound = _raw_exchange(path, b'{"op": "bind", "transport_node_id": "n-2"}\n')
    assert rebound["error"]["code"] == "refused"
    health = _raw_exchange(path, b'{"op": "health", "plugin_id": "p"}\n')
    assert health["result"]["transport_node_id"] == "n-1"


def test_dynamic_claims_yield_to_static_ids_and_duplicates_hide() -> None:
    registry = ProviderRegistry()
    registry.register(Provider("echo"), None)
    first, second = Provider("echo", "shared", "solo", "later"), Provider("shared")
    first.unready.add("later@1.0.0")

    def claims(provider: Provider) -> Any:
        return lambda: [
            compile_descriptor(d, provider, None, builtin=False) for d in provider.descriptors
        ]

    registry.add_dynamic(claims(first))
    registry.add_dynamic(claims(second))
    ready = {r.qualified_id: r for r in registry.ready()}
    assert set(ready) == {"echo@1.0.0", "solo@1.0.0"}
    assert ready["echo@1.0.0"].provider is not first  # the static one
    shared = CapabilityCall(
        call_id="c",
        capability_id="shared",
        version="1.0.0",
        descriptor_revision=descriptor_revision(_descriptor("shared")),
        caller_node="n",
        target_node="n",
    )
    assert getattr(registry.resolve(shared), "code", None) == "not_found"
    # A claimant that goes away: the remaining one is served.
    second.descriptors = []
    assert getattr(registry.resolve(shared), "provider", None) is first


class _Fabric:
    def __init__(self) -> None:
        self.sources: list[object] = []

    def add_dynamic_source(self, source: object) -> None:
        self.sources.append(source)


@pytest.mark.parametrize(("disabled", "sources"), [("1", 0), ("0", 1)])
def test_the_kill_switch_turns_managed_admission_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, disabled: str, sources: int
) -> None:
    monkeypatch.setenv("SKULK_EXTENSIONS_DISABLE", disabled)
    fabric = _Fabric()
    owners = ManagedOwners(ManagerAccess(tmp_path), cast("CapabilityService", fabric))
    assert len(fabric.sources) == sources
    assert owners.admission is (disabled != "1")
