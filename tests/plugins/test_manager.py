"""The local manager as a real process on its owner-only socket: the verbs, journaled
operations with their fences, a restart mid-operation (never replayed), and the
socket's bounds (request size, eight clients, the deadline)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skulk_core.plugins.answers import Installation
from skulk_core.plugins.errors import PluginRefusal
from skulk_core.plugins.trust import parse_trust
from skulk_core.plugins.verify import VerifiedRelease, verify_release
from skulk_host.plugin_manager.client import call, call_raw
from skulk_host.plugin_manager.connection import (
    ManagerConnection,
    connection_path,
    read_connection,
    write_connection,
)
from skulk_host.plugin_manager.lifecycle import Lifecycle
from skulk_host.plugin_manager.protocol import LifecycleOperation
from skulk_host.plugin_manager.server import ManagerServer
from skulk_host.plugin_manager.store import Store
from skulk_host.plugin_release.host import host_facts
from skulk_host.plugin_release.staging import Stager
from skulk_host.unix_address import addressable
from tests.plugins.answer_shapes import answered
from tests.plugins.kit import NOW, Feed, Publisher, build_wheel, release_document, trust_document
from tests.plugins.manager_process import Manager

REPO_ROOT = Path(__file__).resolve().parents[2]
ACME = Publisher("acme")
TRUST = parse_trust(trust_document(ACME))


Staged = dict[int, tuple[VerifiedRelease, bytes, Path]]


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Staged:
    """Two signed releases (sequence 1, and 2 asking for one more permission), staged
    once into a template installation and copied into each test's installation."""
    base = tmp_path_factory.mktemp("staged")
    template = Stager(base / "template")
    staged = {}
    for sequence in (1, 2):
        wheel = build_wheel(base / f"w{sequence}", version=f"1.0.{sequence}")
        permissions = ["network:loopback"] + (["disk:state"] if sequence == 2 else [])
        document = release_document(
            ACME, [wheel], sequence=sequence, version=f"1.0.{sequence}", permissions=permissions
        )
        raw = ACME.sign(document)
        release = verify_release(raw, TRUST, NOW)
        assert template.stage(release, wheel.path.parent, host_facts()).state == "complete"
        staged[sequence] = (release, raw, template.generation(release.runtime_digest))
    return staged


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Feed]:
    served = Feed(tls_dir=tmp_path_factory.mktemp("tls"))
    yield served
    served.close()


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory, feed: Feed) -> Iterator[Manager]:
    base = tmp_path_factory.mktemp("mgr")
    (base / "ca.pem").write_bytes(feed.ca_pem)
    running = Manager(base / "root", "--tls-ca", str(base / "ca.pem")).start()
    yield running
    running.kill()


def install(manager: Manager, feed: Feed, plugin_id: str, releases: Staged) -> dict[int, str]:
    """Register, trust the publisher, review both signed records through the feed (the
    manager keeps their exact bytes), and place the staged generations."""
    assert manager(action="register", plugin_id=plugin_id)["ok"]
    source = {"expected_revision": 0, "base_url": feed.base_url, "trust": trust_document(ACME)}
    assert manager(action="configure_source", plugin_id=plugin_id, request=source)["ok"]
    digests = {}
    for sequence, (release, raw, generation) in releases.items():
        feed.publish("release.json", raw)
        assert manager(action="inspect_release", plugin_id=plugin_id)["ok"]
        target = manager.root / "installations" / plugin_id / "generations" / generation.name
        shutil.copytree(generation, target, symlinks=True)
        digests[sequence] = release.runtime_digest
    return digests


def op_id(n: int) -> str:
    return f"{n:032x}"


def settle(manager: Manager, plugin_id: str, operation_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        answer = manager(action="operation", plugin_id=plugin_id, operation_id=operation_id)
        assert answer["ok"], answer
        if answer["result"]["state"] not in ("accepted", "applying"):
            return dict(answer["result"])
        assert time.monotonic() < deadline
        time.sleep(0.05)


def submit(manager: Manager, plugin_id: str, **request: Any) -> dict[str, Any]:
    return manager(action="submit", plugin_id=plugin_id, request=request)


def refused(answer: dict[str, Any], fragment: str) -> None:
    assert answer["ok"] is False, answer
    assert answer["error"]["code"] == "manager_operation_refused"
    assert fragment in answer["error"]["message"], answer


def test_register_list_and_get(manager: Manager) -> None:
    registered = manager(action="register", plugin_id="managed.listed")
    assert registered["ok"] and registered["result"]["selection"] is None
    assert answered(registered["result"], Installation)
    listed = manager(action="list")["result"]["installations"]
    assert "managed.listed" in [i["plugin_id"] for i in listed]
    got = manager(action="get", plugin_id="managed.listed")["result"]
    assert (got["selection_revision"], got["enabled"], got["operation_id"]) == (0, False, None)
    assert str(manager.root) not in json.dumps(got)  # no host paths
    assert answered(got, Installation)
    refused(manager(action="register", plugin_id="other.namespace"), "$.plugin_id")
    refused(manager(action="get", plugin_id="managed.nobody"), "No installation")
    refused(manager(action="list", extra=1), "unknown field")


def test_activate_is_journaled_and_fenced(manager: Manager, feed: Feed, releases: Staged) -> None:
    digests = install(manager, feed, "managed.tiny", releases)
    request = {
        "operation_id": op_id(1),
        "action": "activate",
        "expected_revision": 0,
        "runtime_digest": digests[1],
    }
    accepted = submit(manager, "managed.tiny", **request)
    assert accepted["ok"] and accepted["result"]["state"] in ("accepted", "complete")
    done = settle(manager, "managed.tiny", op_id(1))
    assert (done["state"], done["request"]) == (
        "complete",
        {**request, "rollback": False, "accept_permissions": False},
    )
    assert answered(done, LifecycleOperation)
    got = manager(action="get", plugin_id="managed.tiny")["result"]
    assert answered(got, Installation)
    assert (got["selected_digest"], got["selection_revision"], got["enabled"]) == (
        digests[1],
        1,
        True,
    )
    # The same request again reads the retained record; changed intent is refused.
    again = submit(manager, "managed.tiny", **request)
    assert (
        again["result"]["state"] == "complete"
        and again["result"]["accepted_at"] == done["accepted_at"]
    )
    refused(submit(manager, "managed.tiny", **{**request, "action": "select"}), "another request")
    refused(
        submit(
            manager, "managed.tiny", operation_id=op_id(2), action="disable", expected_revision=0
        ),
        "not the current selection revision 1",
    )
    refused(
        submit(
            manager, "managed.tiny", operation_id="Z" * 32, action="disable", expected_revision=1
        ),
        "regex",
    )
    refused(
        submit(
            manager,
            "managed.tiny",
            operation_id=op_id(3),
            action="disable",
            expected_revision=1,
            runtime_digest=digests[1],
        ),
        "takes no runtime_digest",
    )


def test_permissions_and_rollback_need_explicit_consent(
    manager: Manager, feed: Feed, releases: Staged
) -> None:
    digests = install(manager, feed, "managed.perm", releases)
    assert (
        settle(
            manager,
            "managed.perm",
            submit(
                manager,
                "managed.perm",
                operation_id=op_id(10),
                action="activate",
                expected_revision=0,
                runtime_digest=digests[1],
            )["result"]["operation_id"],
        )["state"]
        == "complete"
    )
    refused(
        submit(
            manager,
            "managed.perm",
            operation_id=op_id(11),
            action="activate",
            expected_revision=1,
            runtime_digest=digests[2],
        ),
        "accept them explicitly",
    )
    submit(
        manager,
        "managed.perm",
        operation_id=op_id(12),
        action="activate",
        expected_revision=1,
        runtime_digest=digests[2],
        accept_permissions=True,
    )
    assert settle(manager, "managed.perm", op_id(12))["state"] == "complete"
    answer = submit(
        manager,
        "managed.perm",
        operation_id=op_id(13),
        action="activate",
        expected_revision=2,
        runtime_digest=digests[1],
    )
    assert answer["error"]["message"].startswith(
        "Release sequence 1 is below the highest selected sequence 2"
    )
    submit(
        manager,
        "managed.perm",
        operation_id=op_id(14),
        action="activate",
        expected_revision=2,
        runtime_digest=digests[1],
        rollback=True,
    )
    done = settle(manager, "managed.perm", op_id(14))
    assert done["state"] == "complete" and done["preview"]["highest_sequence"] == 2


def test_uninstall_keeps_the_installation_and_refuses_disable(
    manager: Manager, feed: Feed, releases: Staged
) -> None:
    digests = install(manager, feed, "managed.gone", releases)
    submit(
        manager,
        "managed.gone",
        operation_id=op_id(20),
        action="activate",
        expected_revision=0,
        runtime_digest=digests[1],
    )
    settle(manager, "managed.gone", op_id(20))
    submit(manager, "managed.gone", operation_id=op_id(21), action="uninstall", expected_revision=1)
    assert settle(manager, "managed.gone", op_id(21))["state"] == "complete"
    got = manager(action="get", plugin_id="managed.gone")["result"]
    assert (got["uninstalled"], got["enabled"], got["selected_digest"]) == (True, False, digests[1])
    refused(
        submit(
            manager, "managed.gone", operation_id=op_id(22), action="disable", expected_revision=2
        ),
        "disable is refused",
    )
    submit(
        manager,
        "managed.gone",
        operation_id=op_id(23),
        action="select",
        expected_revision=2,
        runtime_digest=digests[1],
    )
    assert settle(manager, "managed.gone", op_id(23))["state"] == "complete"
    got = manager(action="get", plugin_id="managed.gone")["result"]
    assert (got["uninstalled"], got["enabled"]) == (False, False)


def test_a_generation_whose_seal_broke_cannot_be_activated(
    manager: Manager, feed: Feed, releases: Staged
) -> None:
    digests = install(manager, feed, "managed.broken", releases)
    generation = manager.root / "installations" / "managed.broken" / "generations" / digests[1]
    site = next((generation / "runtime").glob("lib/python*/site-packages"))
    (site / "evil.pth").write_text("import os\n")
    answer = submit(
        manager,
        "managed.broken",
        operation_id=op_id(30),
        action="activate",
        expected_revision=0,
        runtime_digest=digests[1],
    )
    refused(answer, "no longer matches its seal")


def test_activation_repeats_current_trust(manager: Manager, feed: Feed, releases: Staged) -> None:
    digests = install(manager, feed, "managed.revoked", releases)
    first = {"action": "activate", "expected_revision": 0, "runtime_digest": digests[1]}
    submit(manager, "managed.revoked", operation_id=op_id(50), **first)
    assert settle(manager, "managed.revoked", op_id(50))["state"] == "complete"
    # The owner revokes the publisher after staging: nothing of it activates any more,
    # and disable (which runs nothing) stays available.
    trust = trust_document(ACME, revision=2, revoked_publishers=("acme",))
    update = {"expected_revision": 1, "trust": trust}
    assert manager(action="configure_source", plugin_id="managed.revoked", request=update)["ok"]
    again = {"action": "select", "expected_revision": 1, "runtime_digest": digests[1]}
    refused(submit(manager, "managed.revoked", operation_id=op_id(51), **again), "is revoked")
    submit(
        manager, "managed.revoked", operation_id=op_id(52), action="disable", expected_revision=1
    )
    assert settle(manager, "managed.revoked", op_id(52))["state"] == "complete"
    # A generation placed without a signed record the manager reviewed is not trusted.
    unreviewed = manager(action="register", plugin_id="managed.unreviewed")
    assert unreviewed["ok"]
    target = manager.root / "installations" / "managed.unreviewed" / "generations" / digests[1]
    shutil.copytree(releases[1][2], target, symlinks=True)
    plain = {"action": "activate", "expected_revision": 0, "runtime_digest": digests[1]}
    refused(
        submit(manager, "managed.unreviewed", operation_id=op_id(53), **plain),
        "no signed release record",
    )


def test_a_manager_restart_mid_operation_never_replays_it(
    manager: Manager, feed: Feed, releases: Staged
) -> None:
    digests = install(manager, feed, "managed.crash", releases)
    fence = manager.root / "installations" / "managed.crash" / "fence.lock"
    fd = os.open(fence, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a competing installer holds the fence
    try:
        answer = submit(
            manager,
            "managed.crash",
            operation_id=op_id(40),
            action="activate",
            expected_revision=0,
            runtime_digest=digests[1],
        )
        assert answer["result"]["state"] == "accepted"
        time.sleep(0.3)
        assert (
            manager(action="operation", plugin_id="managed.crash", operation_id=op_id(40))[
                "result"
            ]["state"]
            == "accepted"
        )
        manager.kill()
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    manager.start()
    record = manager(action="operation", plugin_id="managed.crash", operation_id=op_id(40))[
        "result"
    ]
    assert (record["state"], record["error_code"]) == ("recovery_required", "interrupted")
    time.sleep(0.5)  # nothing picks it up again by itself
    got = manager(action="get", plugin_id="managed.crash")["result"]
    assert (got["selection_revision"], got["selected_digest"], got["operation_state"]) == (
        0,
        None,
        "recovery_required",
    )
    # The same id stays bound to its original intent; only an explicit recover resumes it.
    retry = {"action": "activate", "expected_revision": 0, "runtime_digest": digests[1]}
    answer = submit(manager, "managed.crash", operation_id=op_id(40), **retry)
    assert answer["result"]["state"] == "recovery_required"
    assert manager(action="recover", plugin_id="managed.crash", operation_id=op_id(40))["ok"]
    assert settle(manager, "managed.crash", op_id(40))["state"] == "complete"
    got = manager(action="get", plugin_id="managed.crash")["result"]
    assert (got["selection_revision"], got["selected_digest"]) == (1, digests[1])
    # Recovering a completed operation changes nothing.
    again = manager(action="recover", plugin_id="managed.crash", operation_id=op_id(40))
    assert again["result"]["state"] == "complete"
    assert manager(action="get", plugin_id="managed.crash")["result"]["selection_revision"] == 1


def test_the_socket_is_owner_only_and_bounded(manager: Manager, tmp_path: Path) -> None:
    sock = manager.root / "control.sock"
    assert sock.stat().st_mode & 0o777 == 0o600 and manager.root.stat().st_mode & 0o777 == 0o700
    too_big = json.dumps({"action": "register", "plugin_id": "managed.x" + "x" * 17000}).encode()
    answer = call_raw(manager.root, too_big)
    assert answer["ok"] is False and "at most 16384 bytes" in answer["error"]["message"]
    refused(call_raw(manager.root, b"not json"), "not one JSON object")
    # A socket reached through a link, or somebody else's, is not the manager's.
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "control.sock").symlink_to(sock)
    answer_error = None
    try:
        call(tmp_path / "root", {"action": "list"})
    except Exception as exc:
        answer_error = str(exc)
    assert answer_error is not None and "owner-only socket" in answer_error


def test_eight_clients_at_once_and_one_deadline(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = Store(root)
    store.open()
    server = ManagerServer(root, Lifecycle(store), deadline=1.0)
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    stop = asyncio.Event()

    async def run() -> None:
        await server.start()  # serving starts here
        ready.set()
        await stop.wait()
        await server.close()

    thread = threading.Thread(target=lambda: loop.run_until_complete(run()), daemon=True)
    thread.start()
    assert ready.wait(10)
    idle = []
    try:
        for _ in range(8):  # eight clients connect and send nothing
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with addressable(root / "control.sock") as address:
                client.connect(address)
            idle.append(client)
        deadline = time.monotonic() + 10
        while server._active < 8:  # all eight are being served before the ninth comes
            assert time.monotonic() < deadline
            time.sleep(0.02)
        ninth = call(root, {"action": "list"}, timeout=5)
        refused(ninth, "busy")
        for client in idle:
            client.settimeout(5)
            answer = json.loads(client.recv(65536))
            refused(answer, "deadline")
        assert call(root, {"action": "list"}, timeout=5)["ok"]
    finally:
        for client in idle:
            client.close()
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


def test_the_spec_command_calls_the_manager(manager: Manager) -> None:
    command = [
        sys.executable,
        "-m",
        "skulk.extensions.runtime_manager",
        "call",
        "--root",
        str(manager.root),
    ]
    listed = subprocess.run(
        command,
        input=b'{"action": "list"}',
        capture_output=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0 and json.loads(listed.stdout)["ok"] is True
    bad = subprocess.run(
        command,
        input=b'{"action": "nope"}',
        capture_output=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )
    assert (
        bad.returncode == 1
        and json.loads(bad.stdout)["error"]["code"] == "manager_operation_refused"
    )


def test_the_host_finds_the_manager_only_through_a_protected_connection(
    manager: Manager, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    with pytest.raises(PluginRefusal, match="No local plugin manager"):
        read_connection(config)
    write_connection(config, ManagerConnection(manager_root=str(manager.root), profile_id="0" * 32))
    found = read_connection(config)
    assert call(found.root, {"action": "list"})["ok"] is True
    record = connection_path(config)
    record.chmod(0o644)  # world-readable (and the same for writable)
    with pytest.raises(PluginRefusal, match="open to other users"):
        read_connection(config)
    record.chmod(0o600)
    copy = tmp_path / "elsewhere.json"
    copy.write_bytes(record.read_bytes())
    copy.chmod(0o600)
    record.unlink()
    record.symlink_to(copy)
    with pytest.raises(PluginRefusal, match="file is a symbolic link"):
        read_connection(config)
    linked = tmp_path / "linked"
    linked.mkdir(mode=0o700)
    (linked / "managed-service").symlink_to(config / "managed-service")
    with pytest.raises(PluginRefusal, match="directory is a symbolic link"):
        read_connection(linked)
    record.unlink()
    write_connection(config, ManagerConnection(manager_root="relative/root", profile_id="0" * 32))
    with pytest.raises(PluginRefusal, match="absolute root"):
        read_connection(config)


def test_a_crash_looping_owner_backs_off_and_disable_stops_it(
    manager: Manager, feed: Feed, releases: Staged
) -> None:
    digests = install(manager, feed, "managed.loop", releases)
    submit(
        manager,
        "managed.loop",
        operation_id=op_id(60),
        action="activate",
        expected_revision=0,
        runtime_digest=digests[1],
    )
    assert settle(manager, "managed.loop", op_id(60))["state"] == "complete"

    def service() -> dict[str, Any]:
        return dict(manager(action="get", plugin_id="managed.loop")["result"]["service"])

    def until(condition: Any, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not condition(observed := service()):
            assert time.monotonic() < deadline, observed
            time.sleep(0.1)
        return observed

    # The tiny owner prints its identity and exits: every lifetime is a failure.
    first = until(lambda s: s["consecutive_failures"] == 1)
    assert (first["status"], first["lifetimes"], first["backoff_seconds"]) == ("failed", 1, 5)
    assert answered(manager(action="get", plugin_id="managed.loop")["result"], Installation)
    owner_log = manager.root / "installations" / "managed.loop" / "owner.log"
    assert json.loads(owner_log.read_text().splitlines()[0]) == {
        "owner": "tiny",
        "version": "1.0.1",
        "argv": [],
    }
    second = until(lambda s: s["consecutive_failures"] == 2)
    assert (second["lifetimes"], second["backoff_seconds"]) == (2, 15)
    assert len(owner_log.read_text().splitlines()) == 2
    # Disabling during the wait starts nothing more.
    submit(manager, "managed.loop", operation_id=op_id(61), action="disable", expected_revision=1)
    assert settle(manager, "managed.loop", op_id(61))["state"] == "complete"
    stopped = until(lambda s: s["status"] == "stopped")
    time.sleep(1.0)
    assert service()["lifetimes"] == stopped["lifetimes"] == 2
