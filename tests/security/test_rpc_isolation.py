"""llama.cpp's RPC sockets are private to the runner that owns them (Linux).

A real donor runner serves llama.cpp's real RPC server behind its gate, and a real
driver's gates run in a process of their own: another process on the machine (this
test) reaches neither the server nor the gate client, while the gate still admits
members. Where namespaces are refused (here: by the kernel's per-namespace limits,
set to zero for the runner) both still serve and say they are not isolated.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

import psutil
import pytest

from skulk_daemon.runner.protocol import (
    Load,
    Phase,
    RpcServe,
    Shutdown,
    decode_runner_message,
    encode_frame,
    read_frame,
)
from skulk_daemon.runner.rpc_dialer import HELPER_NAME
from skulk_daemon.runner.rpc_gate import GateClient, GateServer
from skulk_daemon.runner.rpc_relay import recv_exactly
from tests.runner.test_rpc_gate import INSTANCE, KEY, EchoServer, echo_gate

pytestmark = [
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="network namespaces are Linux-only"
    ),
    pytest.mark.xdist_group("runner_netns"),
]

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0  # only stops a broken test from hanging
RPC_CMD_HELLO = 14  # llama.cpp pins it ("must be always 14")
HELLO_CAPS_BYTES = 24  # rpc_msg_hello_req: the client's transport capabilities
# The runner keeps its user and network namespaces but may create no new ones.
NO_NAMESPACES = (
    "echo 0 > /proc/sys/user/max_net_namespaces && "
    'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'
)


def without_namespaces() -> list[str]:
    """A command prefix under which the kernel refuses every unshare, or a skip."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare to take namespaces away")
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", NO_NAMESPACES, "sh", "true"],
        check=False,
        capture_output=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot limit namespaces here: {probe.stderr.decode().strip()}")
    return ["unshare", "--user", "--map-root-user", "sh", "-c", NO_NAMESPACES, "sh"]


def unprivileged() -> list[str]:
    """A command prefix that runs as nobody, where this user namespace grants no
    capability: the runner must make its own user namespace to isolate."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and util-linux's setpriv to run as another user")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture(params=["as-this-user", "unprivileged"])
def as_user(request: pytest.FixtureRequest) -> list[str]:
    return unprivileged() if request.param == "unprivileged" else []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def netns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def loopback_listeners(pid: int) -> set[int]:
    """The TCP ports listening on 127.0.0.1 in ``pid``'s network namespace."""
    ports: set[int] = set()
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        address, port = fields[1].split(":")
        if address == "0100007F" and fields[3] == "0A":  # 127.0.0.1, LISTEN
            ports.add(int(port, 16))
    return ports


def hello_through(gate: tuple[str, int]) -> bytes:
    """llama.cpp's RPC HELLO, sent through a member's gate client; the server's reply."""
    client = GateClient(gate, key=KEY, instance_id=INSTANCE, on_lost=lambda _: None)
    client.start()
    host, port = client.endpoint.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
            sock.sendall(
                bytes([RPC_CMD_HELLO])
                + HELLO_CAPS_BYTES.to_bytes(8, "little")
                + bytes(HELLO_CAPS_BYTES)
            )
            size = int.from_bytes(recv_exactly(sock, 8), "little")
            return recv_exactly(sock, size)
    finally:
        client.close()


class Donor:
    """A real donor runner (``python -m skulk_daemon.runner`` in ``rpc_donor`` mode)."""

    def __init__(self, tmp_path: Path, prefix: list[str]) -> None:
        self.port = free_port()
        self.log = tmp_path / "donor.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [*prefix, sys.executable, "-m", "skulk_daemon.runner"],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        assert self.process.stdin is not None and self.process.stdout is not None
        serve = RpcServe(instance_id=INSTANCE, gate_key=KEY, host="127.0.0.1", port=self.port)
        load = Load(model_path="", context_tokens=1, mode="rpc_donor", serve=serve)
        self.process.stdin.write(encode_frame(load))
        self.process.stdin.flush()
        self.ready = ""
        while True:
            body = read_frame(cast(BinaryIO, self.process.stdout))
            assert body is not None, f"the donor exited: {self.log.read_text()}"
            message = decode_runner_message(body)
            assert isinstance(message, Phase), message
            if message.phase == "ready":
                self.ready = message.detail
                return

    def stop(self) -> None:
        assert self.process.stdin is not None
        with contextlib.suppress(OSError):
            self.process.stdin.write(encode_frame(Shutdown()))
            self.process.stdin.close()
        try:
            self.process.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def donor(tmp_path: Path, as_user: list[str]) -> Iterator[Donor]:
    started = Donor(tmp_path, as_user)
    yield started
    started.stop()


def test_a_local_process_cannot_reach_the_donors_rpc_server(donor: Donor) -> None:
    pid = donor.process.pid
    assert "isolated in" in donor.ready and "NOT" not in donor.ready
    assert netns(pid) != netns(os.getpid())
    # llama.cpp's server listens on 127.0.0.1, in the runner's namespace only.
    (internal,) = loopback_listeners(pid)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", internal), timeout=5).close()
    # The gate (made before the move) still takes members to it: the server answers.
    reply = hello_through(("127.0.0.1", donor.port))
    assert len(reply) > 0 and reply[0] > 0  # its protocol's major version


def test_without_namespaces_a_donor_still_serves_and_says_what_is_open(
    tmp_path: Path,
) -> None:
    started = Donor(tmp_path, without_namespaces())
    try:
        assert "NOT isolated" in started.ready and "unshare refused" in started.ready
        log = started.log.read_text()
        assert "cannot isolate llama.cpp's RPC server" in log
        assert "any process on this machine can reach this donor's memory" in log
        reply = hello_through(("127.0.0.1", started.port))
        assert len(reply) > 0 and reply[0] > 0
    finally:
        started.stop()


@pytest.fixture
def gate() -> Iterator[tuple[EchoServer, GateServer]]:
    with echo_gate() as pair:
        yield pair


def start_driver(
    gate: GateServer, prefix: list[str]
) -> tuple[subprocess.Popen[str], dict[str, str | bool]]:
    host, port = gate.address
    child = subprocess.Popen(
        [*prefix, sys.executable, "-m", "tests.security.rpc_driver_child", host, str(port)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, "the driver's gates did not start"
    report: dict[str, str | bool] = json.loads(line)
    return child, report


def stop_driver(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.close()
    try:
        child.wait(WAIT_S)
    finally:
        child.kill()
        child.stdout.close()


def test_a_local_process_cannot_reach_the_drivers_gate_client(
    gate: tuple[EchoServer, GateServer], as_user: list[str]
) -> None:
    echo, server = gate
    child, report = start_driver(server, as_user)
    try:
        dialers = psutil.Process(child.pid).children()
        # From inside its namespace, the driver's llama.cpp reaches the donor.
        assert report["echoed"] == "ping" and report["private"] is True
        assert netns(child.pid) != netns(os.getpid())
        host, port = str(report["endpoint"]).rsplit(":", 1)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=5).close()
        assert len(echo.connections) == 1  # the driver's own, and no other
        # The helper that dials the fabric for it stays on the machine's network.
        (dialer,) = dialers
        assert dialer.name() == HELPER_NAME.decode()
        assert netns(dialer.pid) == netns(os.getpid())
    finally:
        stop_driver(child)
    # It goes with the driver.
    dialer.wait(WAIT_S)


def test_without_namespaces_a_driver_still_relays_and_says_what_is_open(
    gate: tuple[EchoServer, GateServer],
) -> None:
    _, server = gate
    child, report = start_driver(server, without_namespaces())
    try:
        assert report["echoed"] == "ping" and report["private"] is False
        assert "NOT isolated" in str(report["fact"])
        assert psutil.Process(child.pid).children() == []  # no dialer without isolation
    finally:
        stop_driver(child)
