"""Owner host callbacks over ``host.sock`` (issue #16).

One real daemon and one real manager: the ``callback-owner`` fixture (written only
against ``skulk.extensions``; it opts in with ``host_callbacks_available``) is installed
from a signed release and served by the owner runtime; the daemon's adapter attaches
to its ``host.sock`` and binds. The fixture's ``callbacks.probe`` (called over HTTP)
runs one ``context.host`` step inside the owner and answers what it saw: its own
capabilities' revisions; an ``invoke`` of its ``callbacks.double`` through ordinary
fabric admission (the schema guard included); an unknown revision refused with the
fabric's typed ``revision_mismatch``; a second concurrent callback refused ``busy``; a
host that does not answer within 3 s (it is invoking a sleeping capability) failing
``timeout`` for the owner; ``actions`` answering the no-steward policy; the socket
0600 in a 0700 directory; a foreign bind refused; and the adapter attaching (and
binding) again after the owner is killed and restarted.

Frame-level rules of Skulk's end (:mod:`skulk_daemon.plugins.owners.host_link`) are
checked against a raw owner socket in this process: the exact bind, extra fields (an
executable, an approval key), unknown ops and stale sequences refused, one callback
outstanding at a time, a frame over 64 KiB refused and the connection closed, an answer
over 64 KiB refused, an unprotected socket and a refused bind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from skulk_core.extensions.capabilities import CapabilityResult, JsonObject
from skulk_core.extensions.host_callbacks import StewardPolicy
from skulk_daemon.plugins.owners import host_link
from skulk_host.plugin_manager.connection import ManagerConnection, write_connection
from skulk_host.plugin_owners import host_wire, wire
from skulk_host.unix_address import addressable
from tests.daemon.test_cluster import node_id
from tests.daemon_process import DaemonProcess
from tests.plugins.kit import Feed, Publisher
from tests.plugins.manager_process import Manager
from tests.plugins.owner_kit import install_owner, publish_fixture_owner, settle

pytestmark = pytest.mark.slow

ACME = Publisher("acme")
TOKEN = "owner-callbacks-feed-bearer-never-echoed-516"
PLUGIN = "managed.callbacks"
DIST = "skulk_callback_owner"
SOURCE = Path(__file__).resolve().parent / "fixtures" / "callback-owner" / DIST / "__init__.py"
FOREIGN = "12D3KooWanotherskulkhostonthismachine"
UNKNOWN_REVISION = "sha256:" + "0" * 64


def publish(feed: Feed, out_dir: Path) -> None:
    publish_fixture_owner(
        feed,
        ACME,
        out_dir,
        dist=DIST,
        source=SOURCE,
        owner_class="CallbackOwner",
        bundle_id="skulk-callback-owner",
    )


@dataclass
class Node:
    daemon: DaemonProcess
    node_id: str
    manager: Manager

    def served(self) -> dict[str, str]:
        response = self.daemon.get("/v1/capabilities")
        assert response.status_code == 200, response.text
        revisions: dict[str, str] = response.json()["revisions"]
        return revisions

    def probe(self, step: str, **fields: Any) -> dict[str, Any]:
        """Run one host-callback step inside the owner (a real call of its probe)."""
        envelope = {
            "call_id": f"t-{time.monotonic_ns()}",
            "capability_id": "callbacks.probe",
            "version": "1.0.0",
            "descriptor_revision": self.served()["callbacks.probe@1.0.0"],
            "caller_node": self.node_id,
            "target_node": self.node_id,
            "timeout_seconds": 30,
            "payload": {"step": step, "node_id": self.node_id, **fields},
        }
        response = httpx.post(f"{self.daemon.url}/v1/capabilities/call", json=envelope, timeout=60)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["ok"], answer
        result: dict[str, Any] = answer["result"]
        return result

    @property
    def owner_dir(self) -> Path:
        return wire.owner_dir(self.manager.root / "installations" / PLUGIN)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path) -> Iterator[Node]:
    root = tmp_path_factory.mktemp("owner-callbacks")
    feed = Feed(tls_dir=root / "tls", token=TOKEN)
    publish(feed, root / "wheel")
    ca = root / "ca.pem"
    ca.write_bytes(feed.ca_pem)
    daemon = DaemonProcess(root=root / "a", models_dir=shared_models_dir)
    (root / "mgr").mkdir()
    manager = Manager(root / "mgr" / "root", "--tls-ca", str(ca))
    try:
        daemon.start()
        manager.start()
        write_connection(
            daemon.config_home,
            ManagerConnection(manager_root=str(manager.root), profile_id="d" * 32),
        )
        install_owner(manager, feed, ACME, PLUGIN, TOKEN)
        found = Node(daemon=daemon, node_id=node_id(daemon), manager=manager)
        settle(found.served, lambda ids: "callbacks.sleep@1.0.0" in ids, timeout=60)
        settle(lambda: found.probe("status"), lambda seen: seen["connected"], timeout=20)
        yield found
    finally:
        manager.kill()
        daemon.kill()
        feed.close()


def test_the_owner_sees_its_own_revisions_and_the_no_steward_policy(node: Node) -> None:
    served = node.served()
    seen = node.probe("revisions")
    assert seen["revisions"] == {
        key: served[key]
        for key in ("callbacks.probe@1.0.0", "callbacks.double@1.0.0", "callbacks.sleep@1.0.0")
    }
    policy = node.probe("actions")["policy"]
    assert policy["steward_available"] is False and policy["permitted_actions"] == []
    assert "no steward" in policy["reason"]


def test_an_owner_invokes_another_capability_through_fabric_admission(node: Node) -> None:
    seen = node.probe("invoke", capability_id="callbacks.double", arguments={"n": 21})
    assert seen["result"]["ok"] is True and seen["result"]["result"] == {"doubled": 42}, seen
    # The fabric's guards run as for any caller: the input schema ...
    bad = node.probe("invoke", capability_id="callbacks.double", arguments={"n": "x"})
    assert bad["result"]["ok"] is False
    assert bad["result"]["error"]["code"] == "invalid_payload", bad
    # ... the pinned revision ...
    stale = node.probe(
        "invoke", capability_id="callbacks.double", revision=UNKNOWN_REVISION, arguments={"n": 1}
    )
    assert stale["result"]["error"]["code"] == "revision_mismatch", stale
    # ... and the exact node (this one's id only: a node nobody hears from is unreachable).
    away = node.probe(
        "invoke",
        capability_id="callbacks.double",
        node_id=FOREIGN,
        revision=node.served()["callbacks.double@1.0.0"],
        arguments={"n": 1},
    )
    assert away["result"]["error"]["code"] == "unreachable", away


def test_a_second_concurrent_callback_and_a_large_frame_are_refused(node: Node) -> None:
    seen = node.probe(
        "concurrent",
        capability_id="callbacks.sleep",
        revision=node.served()["callbacks.sleep@1.0.0"],
        arguments={"seconds": 1},
    )
    outcomes = seen["outcomes"]
    assert {"error": "busy"} in outcomes, outcomes
    answered = [o for o in outcomes if "result" in o]
    assert len(answered) == 1 and answered[0]["result"]["result"] == {"slept": 1.0}, outcomes
    large = node.probe("too_large", capability_id="callbacks.double", revision="r")
    assert large["error"]["code"] == "too_large" and "64 KiB" in large["error"]["message"]


def test_a_callback_the_host_does_not_answer_in_3s_fails_with_a_deadline(node: Node) -> None:
    late = node.probe(
        "invoke",
        capability_id="callbacks.sleep",
        revision=node.served()["callbacks.sleep@1.0.0"],
        arguments={"seconds": 8},
    )
    # The owner's own deadline (not a late typed answer from the host) ends it.
    assert late["error"]["code"] == "timeout", late
    assert "did not answer within the three-second deadline" in late["error"]["message"]
    assert 2.9 <= late["seconds"] < 4.5, late
    # The channel serves the next callback once the host's own deadline has passed.
    after = settle(lambda: node.probe("revisions"), lambda seen: "revisions" in seen, timeout=5)
    assert "callbacks.double@1.0.0" in after["revisions"]


def test_the_socket_is_owner_only_and_a_foreign_bind_is_refused(node: Node) -> None:
    path = node.owner_dir / host_wire.HOST_SOCKET_NAME
    assert stat.S_IMODE(node.owner_dir.stat().st_mode) == 0o700
    info = path.lstat()
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    for bind in (
        host_wire.bind_message(FOREIGN),
        host_wire.encode({"op": "bind", "protocol": 2, "transport_node_id": node.node_id}),
        host_wire.encode(
            {"op": "bind", "protocol": 1, "transport_node_id": node.node_id, "executable": "/x"}
        ),
    ):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.settimeout(5)
            with addressable(path) as address:
                raw.connect(address)
            raw.sendall(bind)
            answer = json.loads(raw.makefile("rb").readline())
        assert answer["ready"] is False, answer
    # The adapter's binding is untouched.
    assert node.probe("status")["connected"] is True


def _owner_pid(node: Node) -> int:
    installation = str(node.manager.root / "installations" / PLUGIN)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = [a.decode(errors="replace") for a in argv]
        if "skulk_host.plugin_owners.owner_host" in text and any(
            a.startswith(installation) for a in text
        ):
            return int(proc.name)
    raise AssertionError("the owner process is not running")


def test_the_adapter_binds_again_after_the_owner_restarts(node: Node) -> None:
    before = node.probe("status")["pid"]
    assert before == _owner_pid(node)
    os.kill(before, signal.SIGKILL)

    def back() -> dict[str, Any] | None:
        with contextlib.suppress(AssertionError, httpx.HTTPError, KeyError):
            return node.probe("revisions")
        return None

    seen = settle(back, lambda s: s is not None and "revisions" in s, timeout=40)
    assert seen is not None and seen["pid"] != before
    assert "callbacks.probe@1.0.0" in seen["revisions"]


# -- Skulk's end against a raw owner socket ---------------------------------------------------


class _Target:
    """A callback target whose invoke sleeps ``arguments["sleep"]`` and echoes (or
    answers ``repeat`` characters)."""

    def actions(self) -> StewardPolicy:
        return host_wire.NO_STEWARD

    def revisions(self) -> dict[str, str]:
        return {"raw.echo@1.0.0": "sha256:" + "1" * 64}

    async def invoke(  # noqa: PLR0917
        self,
        node_id: str,
        capability_id: str,
        version: str,
        revision: str,
        arguments: JsonObject,
        timeout: float,  # noqa: ASYNC109
    ) -> CapabilityResult:
        await asyncio.sleep(float(str(arguments.get("sleep", 0))))
        if "repeat" in arguments:
            return CapabilityResult.success("c-1", {"text": "y" * int(str(arguments["repeat"]))})
        return CapabilityResult.success("c-1", dict(arguments))


@contextlib.asynccontextmanager
async def _raw_owner(
    directory: Path, ready: dict[str, Any] | None = None
) -> AsyncIterator[tuple[asyncio.Task[None], asyncio.StreamReader, asyncio.StreamWriter, bytes]]:
    """A raw owner socket in an owner-only directory; Skulk's end attached to it."""
    os.mkdir(directory, 0o700)
    path = directory / host_wire.HOST_SOCKET_NAME
    accepted: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await accepted.put((reader, writer))

    server = await asyncio.start_unix_server(on_connect, path=str(path), limit=1 << 20)
    os.chmod(path, 0o600)
    task = asyncio.create_task(host_link.attach(path, "n-1", _Target()))
    writer: asyncio.StreamWriter | None = None
    try:
        reader, writer = await asyncio.wait_for(accepted.get(), 5)
        bind = await asyncio.wait_for(reader.readline(), 5)
        writer.write(host_wire.encode(ready or {"ready": True}))
        await writer.drain()
        yield task, reader, writer, bind
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        if writer is not None:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()
        server.close()
        await server.wait_closed()


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, message: dict[str, Any]
) -> dict[str, Any]:
    writer.write(host_wire.encode(message))
    await writer.drain()
    answer: dict[str, Any] = json.loads(await asyncio.wait_for(reader.readline(), 5))
    return answer


def test_skulks_end_binds_exactly_and_refuses_what_the_protocol_does_not_carry(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with _raw_owner(tmp_path / "owner") as (_, reader, writer, bind):
            assert json.loads(bind) == {"op": "bind", "protocol": 1, "transport_node_id": "n-1"}
            ok = await _exchange(reader, writer, {"sequence": 1, "op": "revisions"})
            assert ok == {
                "sequence": 1,
                "ok": True,
                "result": {"revisions": {"raw.echo@1.0.0": "sha256:" + "1" * 64}},
            }
            policy = await _exchange(reader, writer, {"sequence": 2, "op": "actions"})
            assert policy["result"]["permitted_actions"] == []
            invoke = {
                "op": "invoke",
                "node_id": "n-1",
                "capability_id": "raw.echo",
                "version": "1.0.0",
                "revision": "r",
                "arguments": {"a": 1},
            }
            echoed = await _exchange(reader, writer, {"sequence": 3, **invoke})
            assert echoed["result"]["ok"] is True and echoed["result"]["result"] == {"a": 1}
            for sequence, extra in enumerate(
                ({"executable": "/bin/sh"}, {"address": "10.0.0.1:52415"}), start=4
            ):
                refused = await _exchange(reader, writer, {"sequence": sequence, **invoke, **extra})
                assert refused["sequence"] == sequence and refused["error"]["code"] == "malformed"
            approval = {"sequence": 6, "op": "actions", "approval_key": "k"}
            assert (await _exchange(reader, writer, approval))["error"]["code"] == "malformed"
            unknown = await _exchange(reader, writer, {"sequence": 7, "op": "exec"})
            assert unknown["error"]["code"] == "unsupported"
            replayed = await _exchange(reader, writer, {"sequence": 7, "op": "actions"})
            assert (
                replayed["error"]["code"] == "malformed"
                and "increase" in replayed["error"]["message"]
            )
            # One outstanding at a time: the second is refused at once, the first answered.
            slow = {"sequence": 8, **invoke, "arguments": {"sleep": 0.5}}
            writer.write(
                host_wire.encode(slow) + host_wire.encode({"sequence": 9, "op": "actions"})
            )
            await writer.drain()
            first = json.loads(await asyncio.wait_for(reader.readline(), 5))
            second = json.loads(await asyncio.wait_for(reader.readline(), 5))
            assert first["sequence"] == 9 and first["error"]["code"] == "busy", first
            assert second["sequence"] == 8 and second["ok"] is True, second
            # An answer over 64 KiB is refused rather than sent.
            big = {"sequence": 10, **invoke, "arguments": {"repeat": 70_000}}
            wide = await _exchange(reader, writer, big)
            assert wide["error"]["code"] == "too_large", wide

    asyncio.run(scenario())


def test_a_frame_over_64_kib_is_refused_and_the_connection_closed(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with _raw_owner(tmp_path / "owner") as (task, reader, writer, _):
            writer.write(b'{"sequence": 1, "op": "actions", "pad": "' + b"p" * 70_000 + b'"}\n')
            await writer.drain()
            answer = json.loads(await asyncio.wait_for(reader.readline(), 5))
            assert answer == {
                "sequence": None,
                "ok": False,
                "error": {
                    "code": "too_large",
                    "message": "a callback frame is over its 64 KiB bound",
                },
            }
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed
            await asyncio.wait_for(task, 5)

    asyncio.run(scenario())


def test_an_unprotected_socket_or_a_refused_bind_is_not_attached(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with _raw_owner(tmp_path / "refusing", {"ready": False}) as (task, *_):
            with pytest.raises(host_link.BindRefused):
                await asyncio.wait_for(task, 5)
        loose = tmp_path / "loose"
        os.mkdir(loose, 0o700)
        path = loose / host_wire.HOST_SOCKET_NAME
        server = await asyncio.start_unix_server(lambda r, w: None, path=str(path))
        os.chmod(path, 0o666)
        try:
            with pytest.raises(wire.OwnerUnavailable, match="not an owner-only socket"):
                await host_link.attach(path, "n-1", _Target())
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
