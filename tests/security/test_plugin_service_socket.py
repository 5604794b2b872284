"""Attacks on the plugin manager's owner-only socket and its connection record.

A real manager process (``python -m skulk_host.plugin_manager serve``) on a temp root.
A local user who is not the owner (``nobody``, reached from a forked child that drops
root) cannot connect: the root directory and the socket are owner-only, and when those
modes are loosened on purpose the peer-credential check still refuses. Garbage and
oversized frames get a clear refusal and the manager keeps serving. The connection
record the host finds the manager through is owner-only and refused when it is not.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from skulk_core.plugins.errors import PluginRefusal
from skulk_host.plugin_manager.client import call, call_raw
from skulk_host.plugin_manager.connection import (
    ManagerConnection,
    connection_path,
    read_connection,
    write_connection,
)
from skulk_host.plugin_manager.protocol import MAX_REQUEST_BYTES
from skulk_host.unix_address import addressable
from tests.plugins.manager_process import Manager

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0,
    reason="needs Linux and root, to act as another local user",
)

NOBODY = 65534


@pytest.fixture(scope="module")
def reachable() -> Iterator[Path]:
    """A directory every local user may traverse (pytest's own temp root is 0700, which
    would hide what the manager's own modes do)."""
    base = Path(tempfile.mkdtemp(prefix="skulk-socket-attack-"))
    base.chmod(0o711)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def manager(reachable: Path) -> Iterator[Manager]:
    (reachable / "mgr").mkdir(mode=0o711)
    running = Manager(reachable / "mgr" / "root").start()
    yield running
    running.kill()


def as_nobody(path: Path, payload: bytes) -> str:
    """What a ``nobody`` process gets when it connects to ``path`` and sends ``payload``:
    ``"connect: <errno name>"``, or the answer it read."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root for good, then try the socket
        outcome = "child failed"
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(10)
                try:
                    with addressable(path) as address:
                        sock.connect(address)
                except OSError as exc:
                    outcome = f"connect: {type(exc).__name__}"
                else:
                    # NOTE: a refusing manager may answer and close before reading.
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                        sock.sendall(payload)
                        sock.shutdown(socket.SHUT_WR)
                    body = bytearray()
                    while chunk := sock.recv(65536):
                        body += chunk
                    outcome = body.decode(errors="replace")
        except BaseException as exc:
            outcome = f"child failed: {exc!r}"
        finally:
            os.write(write_end, outcome.encode()[:65536])
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        seen = pipe.read().decode()
    os.waitpid(pid, 0)
    return seen


def test_the_socket_and_its_root_are_owner_only(manager: Manager) -> None:
    sock = manager.root / "control.sock"
    info = sock.stat()
    assert (info.st_mode & 0o777, info.st_uid) == (0o600, os.getuid())
    assert manager.root.stat().st_mode & 0o777 == 0o700


def test_another_local_user_cannot_reach_the_socket(manager: Manager) -> None:
    seen = as_nobody(manager.root / "control.sock", b'{"action": "list"}\n')
    assert seen == "connect: PermissionError"
    assert call(manager.root, {"action": "list"})["ok"] is True


def test_another_user_is_refused_by_peer_credentials_when_the_modes_are_loosened(
    manager: Manager,
) -> None:
    # A careless chmod on the root and the socket: the uid check is the second wall.
    sock = manager.root / "control.sock"
    manager.root.chmod(0o711)
    sock.chmod(0o666)
    try:
        seen = as_nobody(sock, b'{"action": "register", "plugin_id": "managed.intruder"}\n')
    finally:
        sock.chmod(0o600)
        manager.root.chmod(0o700)
    answer = json.loads(seen)
    assert answer["ok"] is False and "Only the owner" in answer["error"]["message"]
    listed = call(manager.root, {"action": "get", "plugin_id": "managed.intruder"})
    assert listed["ok"] is False  # the intruder registered nothing


@pytest.mark.parametrize(
    ("frame", "reason", "says"),
    [
        (b"\x00\xff\xfe garbage \x80", "malformed", "not one JSON object"),
        (b"[1, 2, 3]", "malformed", "Expected `object`"),
        (b'{"action": "list"' + b" " * 100, "malformed", "not one JSON object"),
        (b'{"action": "launch_missiles"}', "malformed", "launch_missiles"),
        (b"{" + b'"a": 1, ' * MAX_REQUEST_BYTES, "too_large", f"at most {MAX_REQUEST_BYTES}"),
        (b"x" * (4 * 1024 * 1024), "too_large", f"at most {MAX_REQUEST_BYTES} bytes"),
    ],
    ids=["binary", "not-an-object", "truncated", "unknown-action", "over-16k", "4-mib-flood"],
)
def test_a_garbage_or_oversized_frame_is_refused_and_the_manager_keeps_serving(
    manager: Manager, frame: bytes, reason: str, says: str
) -> None:
    answer = call_raw(manager.root, frame, timeout=20)
    assert answer["ok"] is False, answer
    assert (answer["error"]["reason"], says in answer["error"]["message"]) == (reason, True), answer
    assert manager.process is not None and manager.process.poll() is None
    assert call(manager.root, {"action": "list"})["ok"] is True


def test_the_connection_record_is_owner_only_and_a_loosened_one_is_refused(
    manager: Manager, reachable: Path
) -> None:
    config = reachable / "config"
    config.mkdir(mode=0o711)
    write_connection(config, ManagerConnection(manager_root=str(manager.root), profile_id="a" * 32))
    record = connection_path(config)
    assert record.stat().st_mode & 0o777 == 0o600
    assert record.parent.stat().st_mode & 0o777 == 0o700
    assert read_connection(config).root == manager.root
    # Another user can neither read it nor hand the owner one of its own.
    assert as_nobody(record, b"") == "connect: PermissionError"
    os.chown(record, NOBODY, NOBODY)
    with pytest.raises(PluginRefusal, match="belongs to another user"):
        read_connection(config)
    os.chown(record, os.getuid(), os.getgid())
    for loose in (0o640, 0o620, 0o604):
        record.chmod(loose)
        with pytest.raises(PluginRefusal, match="open to other users"):
            read_connection(config)
    record.chmod(0o600)
    record.parent.chmod(0o750)
    with pytest.raises(PluginRefusal, match="directory is open to other users"):
        read_connection(config)
    record.parent.chmod(0o700)
    assert read_connection(config).root == manager.root
