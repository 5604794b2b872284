"""Managed owners speaking protocol 4 serve streaming capabilities (issue #16), and the
owner's transport-identity fence.

Two real daemons and one real manager; the ``stream-owner`` fixture (written only
against ``skulk.extensions``: a server-streaming ``streams.count``, a bidirectional
``streams.echo`` and a unary ``streams.observed``) is installed from a signed release
and served by the owner runtime on daemon A. The ``capability-probe`` extension opens
the streams through the public Fabric stream API (``ExtensionContext.stream_capability``),
exactly as any extension would: a server stream's frames arrive in order with one
terminal and raw media; a bidirectional echo round-trips chunk by chunk; closing the
caller's iterator, cancelling its input, or the deadline cancels the owner's handler
(the owner itself reports it); daemon B reaches the same streams over the fabric.
Daemon A bound its transport node id to the owner; another host with a different
identity is refused by name. A protocol-3 owner (a real owner runtime announcing
protocol 3) keeps its unary capability while its streaming claims are hidden."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import importlib.util
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from skulk_core.extensions.capabilities import CapabilityCall, descriptor_revision
from skulk_daemon.plugins.access import ManagerAccess
from skulk_daemon.plugins.owners.adapter import ManagedOwner, ManagedOwners
from skulk_host.plugin_manager.connection import ManagerConnection, write_connection
from skulk_host.plugin_owners import wire
from skulk_host.plugin_owners.owner_host import OwnerHost
from tests.daemon.serving import wait_for
from tests.daemon.test_cluster import converged, node_id
from tests.daemon_process import DaemonProcess
from tests.extension_site import install_fixture, site_env
from tests.plugins.kit import Feed, Publisher
from tests.plugins.manager_process import Manager
from tests.plugins.owner_kit import install_owner, publish_fixture_owner, settle

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("timing")]

ACME = Publisher("acme")
TOKEN = "owner-streaming-feed-bearer-never-echoed-416"
PLUGIN = "managed.streams"
DIST = "skulk_stream_owner"
SOURCE = Path(__file__).resolve().parent / "fixtures" / "stream-owner" / DIST / "__init__.py"
FOREIGN = "12D3KooWanotherskulkhostonthismachine"


def _fixture_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stream_owner_fixture", SOURCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def publish(feed: Feed, out_dir: Path) -> None:
    publish_fixture_owner(
        feed,
        ACME,
        out_dir,
        dist=DIST,
        source=SOURCE,
        owner_class="StreamOwner",
        bundle_id="skulk-stream-owner",
    )


@dataclass
class Node:
    daemon: DaemonProcess
    node_id: str
    manager: Manager
    peer: DaemonProcess
    """A second node of the cluster, which reaches the owner's streams over the fabric."""

    def served(self) -> dict[str, str]:
        response = self.daemon.get("/v1/capabilities")
        assert response.status_code == 200, response.text
        revisions: dict[str, str] = response.json()["revisions"]
        return revisions

    def call(
        self,
        capability: str,
        payload: dict[str, Any],
        timeout: float = 30,
        via: DaemonProcess | None = None,
    ) -> Any:
        """A unary call on ``via`` (this node by default), as that node's caller."""
        daemon = via or self.daemon
        local = node_id(daemon) if via is not None else self.node_id
        revisions = daemon.get("/v1/capabilities").json()["revisions"]
        envelope = {
            "call_id": f"t-{time.monotonic_ns()}",
            "capability_id": capability,
            "version": "1.0.0",
            "descriptor_revision": revisions[f"{capability}@1.0.0"],
            "caller_node": local,
            "target_node": local,
            "timeout_seconds": timeout,
            "payload": payload,
        }
        url = f"{daemon.url}/v1/capabilities/call"
        response = httpx.post(url, json=envelope, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()

    def relay(
        self,
        capability: str,
        payload: dict[str, Any],
        via: DaemonProcess | None = None,
        **script: Any,
    ) -> dict[str, Any]:
        """Open ``capability`` on the owner's node through the probe extension's
        ``stream_capability`` on ``via`` (the owner's node by default)."""
        answer = self.call(
            "probe.relay",
            {"node_id": self.node_id, "capability_id": capability, "payload": payload, **script},
            timeout=60,
            via=via,
        )
        assert answer["ok"], answer
        result: dict[str, Any] = answer["result"]
        return result

    def observed(self, call_id: str) -> str:
        answer = self.call("streams.observed", {"call_id": call_id})
        assert answer["ok"], answer
        state: str = answer["result"]["state"]
        return state

    @property
    def socket(self) -> Path:
        return wire.socket_path(self.manager.root / "installations" / PLUGIN)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path) -> Iterator[Node]:
    root = tmp_path_factory.mktemp("owner-streaming")
    site = root / "site"
    install_fixture("capability-probe", site)
    feed = Feed(tls_dir=root / "tls", token=TOKEN)
    publish(feed, root / "wheel")
    ca = root / "ca.pem"
    ca.write_bytes(feed.ca_pem)
    daemon = DaemonProcess(root=root / "a", models_dir=shared_models_dir, extra_env=site_env(site))
    peer = DaemonProcess(
        root=root / "b",
        models_dir=shared_models_dir,
        extra_env=site_env(site),
        peers=[daemon.fabric_address],
    )
    (root / "mgr").mkdir()
    manager = Manager(root / "mgr" / "root", "--tls-ca", str(ca))
    try:
        daemon.start()
        peer.start()
        manager.start()
        write_connection(
            daemon.config_home,
            ManagerConnection(manager_root=str(manager.root), profile_id="c" * 32),
        )
        install_owner(manager, feed, ACME, PLUGIN, TOKEN)
        found = Node(daemon=daemon, node_id=node_id(daemon), manager=manager, peer=peer)
        settle(found.served, lambda ids: "streams.echo@1.0.0" in ids, timeout=60)
        wait_for(lambda: converged([daemon, peer], 2), "two nodes to converge", timeout=60)
        yield found
    finally:
        manager.kill()
        peer.kill()
        daemon.kill()
        feed.close()


def test_a_server_stream_yields_its_frames_in_order_with_one_terminal(node: Node) -> None:
    served = node.served()
    assert {"streams.count@1.0.0", "streams.echo@1.0.0", "streams.observed@1.0.0"} <= set(served)
    out = node.relay("streams.count", {"n": 4})
    assert out["open"]["ok"] and out["open"]["result"]["io_mode"] == "server_streaming", out
    frames = out["frames"]
    assert [(f["sequence"], f["kind"]) for f in frames] == [
        (0, "started"),
        (1, "chunk"),
        (2, "chunk"),
        (3, "chunk"),
        (4, "chunk"),
        (5, "completed"),
    ]
    assert [f["payload"] for f in frames[1:5]] == [{"i": i} for i in range(1, 5)]
    assert frames[-1]["payload"] == {"count": 4} and frames[-1]["error"] is None
    media = frames[4]["media"]  # raw bytes across the owner socket, not base64 inside JSON
    assert media["size"] == 4 and media["media_type"] == "audio/pcm"
    assert media["sha256"] == hashlib.sha256(bytes(range(4))).hexdigest()
    assert all(f["media"] is None for f in frames[1:4])
    assert node.observed(out["call_id"]) == "finished"
    # The fabric's guards still run before the owner: the opening payload's schema.
    refused = node.relay("streams.count", {"n": "four"})
    assert refused["open"]["error"]["code"] == "invalid_payload", refused


def test_a_bidirectional_echo_round_trips(node: Node) -> None:
    clip = bytes(range(256)) * 8
    chunks = [
        {"payload": {"text": "one"}},
        {"payload": {"text": "two"}, "media_b64": base64.b64encode(clip).decode()},
        {"payload": {"text": "three"}},
    ]
    out = node.relay("streams.echo", {}, chunks=chunks)
    assert out["open"]["result"]["io_mode"] == "bidirectional" and out["has_input"], out
    assert out["sent"] == [True, True, True] and out["completed_input"] is True
    frames = out["frames"]
    assert [f["kind"] for f in frames] == ["started", "chunk", "chunk", "chunk", "completed"]
    assert [f["payload"] for f in frames[1:4]] == [{"echo": t} for t in ("one", "two", "three")]
    assert frames[2]["media"]["sha256"] == hashlib.sha256(clip).hexdigest()
    assert frames[-1]["payload"] == {"chunks": 3}
    # An input chunk its schema refuses ends only that call, before the owner sees it.
    bad = node.relay("streams.echo", {}, chunks=[{"payload": {"nope": 1}}])
    assert bad["frames"][-1]["error"]["code"] == "invalid_payload", bad
    # A chunk the fabric accepts but the owner protocol cannot carry (a header over
    # 64 KiB) fails that call, naming the bound; nothing half-sent is echoed.
    wide = node.relay("streams.echo", {}, chunks=[{"payload": {"text": "w" * 70_000}}])
    assert [f["kind"] for f in wide["frames"]] == ["started", "failed"], wide
    assert "64 KiB" in wide["frames"][-1]["error"]["message"]
    assert settle(lambda: node.observed(wide["call_id"]), lambda s: s != "running", 10) == (
        "cancelled"
    )


def test_a_second_node_reaches_the_owners_streams_over_the_fabric(node: Node) -> None:
    remote = node.peer.get("/v1/capabilities", params={"node_id": node.node_id}).json()
    assert remote["revisions"]["streams.echo@1.0.0"] == node.served()["streams.echo@1.0.0"]
    counted = node.relay("streams.count", {"n": 3}, via=node.peer)
    assert [(f["sequence"], f["kind"]) for f in counted["frames"]] == [
        (0, "started"),
        (1, "chunk"),
        (2, "chunk"),
        (3, "chunk"),
        (4, "completed"),
    ], counted
    assert counted["frames"][3]["media"]["size"] == 3
    echoed = node.relay("streams.echo", {}, via=node.peer, chunks=[{"payload": {"text": "from b"}}])
    assert [f["payload"] for f in echoed["frames"][1:]] == [{"echo": "from b"}, {"chunks": 1}]


def test_cancellation_and_the_deadline_reach_the_owner(node: Node) -> None:
    closed = node.relay("streams.count", {"n": 200, "delay": 0.05}, cancel_after=2)
    assert closed["closed"] is True
    assert [f["kind"] for f in closed["frames"]] == ["started", "chunk"]
    assert settle(lambda: node.observed(closed["call_id"]), lambda s: s != "running", 10) == (
        "cancelled"
    )
    # A handler idle on its input (nothing to write) sees the connection close.
    idle = node.relay(
        "streams.echo",
        {},
        chunks=[{"payload": {"text": "one"}}],
        complete=False,
        cancel_after=2,
        cancel_via="input",
    )
    assert [f["kind"] for f in idle["frames"]] == ["started", "chunk", "cancelled"], idle
    assert settle(lambda: node.observed(idle["call_id"]), lambda s: s != "running", 10) == (
        "cancelled"
    )
    started = time.monotonic()
    late = node.relay("streams.count", {"n": 200, "delay": 0.05}, timeout=1.0)
    assert time.monotonic() - started < 6
    terminal = late["frames"][-1]
    assert terminal["kind"] == "failed" and terminal["error"]["code"] == "timeout", terminal
    assert settle(lambda: node.observed(late["call_id"]), lambda s: s != "running", 10) == (
        "cancelled"
    )
    # The owner is still healthy and serving afterwards.
    assert node.relay("streams.count", {"n": 1})["frames"][-1]["kind"] == "completed"


def test_the_owner_is_bound_to_this_host_and_a_foreign_identity_is_refused(node: Node) -> None:
    health = wire.request(node.socket, {"op": "health"}, 2)
    assert health["transport_node_id"] == node.node_id
    with pytest.raises(wire.OwnerError) as rebind:
        wire.request(node.socket, {"op": "bind", "transport_node_id": FOREIGN}, 2)
    assert rebind.value.code == "refused"

    async def attach_as_another_host() -> None:
        other = ManagedOwners(ManagerAccess(node.daemon.config_home), transport_node_id=FOREIGN)
        await other.poll_once()
        owner = other.owner(PLUGIN)
        assert owner is not None and other.manager_available()
        assert owner.refusal == "transport_identity_mismatch"
        assert not other.owner_available(owner)
        assert not other.capability_ready(owner, "streams.observed@1.0.0")
        with pytest.raises(wire.OwnerUnavailable, match="transport_identity_mismatch"):
            await other.ask(PLUGIN, {"op": "describe"}, 2)

    asyncio.run(attach_as_another_host())
    # The refusal is the other host's: this one still serves (its binding is unchanged).
    assert wire.request(node.socket, {"op": "health"}, 2)["transport_node_id"] == node.node_id
    assert node.relay("streams.count", {"n": 1})["frames"][-1]["kind"] == "completed"


class _Protocol3Host(OwnerHost):
    """A real owner runtime announcing protocol 3 while it lists streaming claims."""

    async def describe(self) -> dict[str, Any]:
        described = await super().describe()
        described["protocol"] = wire.UNARY_PROTOCOL
        return described


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        (_Protocol3Host, {"streams.observed@1.0.0"}),
        (OwnerHost, {"streams.count@1.0.0", "streams.echo@1.0.0", "streams.observed@1.0.0"}),
    ],
)
def test_a_protocol_3_owners_streaming_claims_are_hidden(
    tmp_path: Path, host: type[OwnerHost], expected: set[str]
) -> None:
    module = _fixture_module()
    installation = tmp_path / "installation"

    async def scenario() -> None:
        served = host(module.StreamOwner(), wire.owner_dir(installation))
        stop = asyncio.Event()
        serving = asyncio.create_task(served.serve(stop))
        try:
            for _ in range(200):
                if wire.socket_path(installation).exists():
                    break
                await asyncio.sleep(0.02)
            owners = ManagedOwners(ManagerAccess(tmp_path), transport_node_id="n-1")
            owner = ManagedOwner("managed.legacy", installation, enabled=True)
            owners._owners[owner.plugin_id] = owner  # as an inventory entry would add it
            await owners.observe(owner)
            described = await wire.arequest(wire.socket_path(installation), {"op": "describe"}, 2)
            assert len(described["capabilities"]) == 3  # every mode is claimed
            assert {r.qualified_id for r in owner.registrations} == expected
            assert owner.refusal is None and served.transport_node_id == "n-1"
            # Its unary capability behaves as before.
            call = CapabilityCall(
                call_id="c-1",
                capability_id="streams.observed",
                version="1.0.0",
                descriptor_revision=descriptor_revision(module.OBSERVED),
                caller_node="n-1",
                target_node="n-1",
                payload={"call_id": "nobody"},
            )
            assert owner.provider is not None
            assert await owner.provider.handle_call(None, call) == {"state": "unknown"}
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(serving, 10)

    asyncio.run(scenario())
