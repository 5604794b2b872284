"""A runner's part in a llama.cpp RPC pool: a donor serving memory, or a driver's gates.

A donor runner loads no model: it starts llama.cpp's RPC server on a private
loopback port and the :class:`~skulk_daemon.runner.rpc_gate.GateServer` on the port
the placement assigned, reports ready, and serves until told to stop. A driver
runner opens one :class:`~skulk_daemon.runner.rpc_gate.GateClient` per donor and
loads its model through them; losing a donor is fatal to the driver, reported
with the donor's node id before llama.cpp aborts.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import BinaryIO, Final

from skulk_core.ids import TaskId
from skulk_core.placement.rpc_pool import (
    RPC_DONOR_LOST,
    RPC_PORT_IN_USE,
    join_endpoint,
    split_endpoint,
)
from skulk_daemon.engines.base import ERROR_INVALID_REQUEST, ErrorChunk
from skulk_daemon.runner.protocol import (
    Cancel,
    Embed,
    Failed,
    Generate,
    Load,
    Phase,
    RpcPool,
    RpcServe,
    RunnerMessage,
    Shutdown,
    decode_parent_message,
    read_frame,
)
from skulk_daemon.runner.rpc_gate import GateClient, GateServer

log = logging.getLogger("skulk.runner.rpc")

SERVER_START_TIMEOUT_SECONDS: Final = 30.0
_POLL_SECONDS: Final = 0.05

Send = Callable[[RunnerMessage], None]


class DonorStartError(Exception):
    """The donor cannot serve; ``code`` is the cluster-facing failure code."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_listening(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return True
        except OSError:
            time.sleep(_POLL_SECONDS)
    return False


def start_donor(serve: RpcServe, n_threads: int) -> GateServer:
    """llama.cpp's RPC server on loopback behind a gate on ``serve.host:port``."""
    # NOTE: imported here so a donor maps libllama only once it is asked to serve.
    from skulk_daemon.engines.llama_rpc import serve_rpc  # noqa: PLC0415

    internal = _free_loopback_port()
    try:
        gate = GateServer(
            serve.host,
            serve.port,
            target=("127.0.0.1", internal),
            key=serve.gate_key,
            instance_id=serve.instance_id,
        )
    except OSError as exc:
        where = join_endpoint(serve.host, serve.port)
        if exc.errno == errno.EADDRINUSE:
            raise DonorStartError(
                f"RPC port {serve.port} on {serve.host} is already in use by another "
                "process; the pool will be placed again on another port",
                f"{RPC_PORT_IN_USE}:{where}",
            ) from None
        raise DonorStartError(f"cannot listen for the RPC pool on {where}: {exc}") from None
    threading.Thread(
        target=serve_rpc,
        args=(f"127.0.0.1:{internal}", n_threads),
        name="llama-rpc-server",
        daemon=True,
    ).start()
    if not _wait_listening(internal, SERVER_START_TIMEOUT_SECONDS):
        gate.close()
        raise DonorStartError("llama.cpp's RPC server did not start listening")
    gate.start()
    return gate


def serve_donor(stdin: BinaryIO, send: Send, load: Load) -> int:
    """The ``"rpc_donor"`` mode: lend memory until Shutdown or end of stdin."""
    if load.serve is None:
        send(Failed(message="an rpc_donor runner needs what to serve"))
        return 1
    try:
        gate = start_donor(load.serve, load.n_threads or os.cpu_count() or 1)
    except DonorStartError as exc:
        log.error("%s", exc)
        send(Failed(message=str(exc), code=exc.code))
        return 1
    host, port = gate.address
    log.info("serving RPC memory on %s", join_endpoint(host, port))
    for phase in ("loaded", "warming_up", "ready"):
        send(Phase(phase=phase))
    while True:
        body = read_frame(stdin)
        if body is None:
            break
        match decode_parent_message(body):
            case Shutdown():
                break
            case Generate(request=request):
                send(_not_served(request.task_id))
            case Embed(task_id=task_id):
                send(_not_served(task_id))
            case Cancel() | Load():
                pass
    send(Phase(phase="shutting_down"))
    gate.close()
    send(Phase(phase="shutdown"))
    return 0


def _not_served(task_id: TaskId) -> ErrorChunk:
    return ErrorChunk(
        task_id=task_id,
        code=ERROR_INVALID_REQUEST,
        message="this runner lends memory to an RPC pool; its driver serves requests",
    )


class DriverGates:
    """The driver's local gates, one per donor, in layer order."""

    def __init__(self, pool: RpcPool, on_lost: Callable[[str, str], None]) -> None:
        self.clients: list[GateClient] = []
        for donor in pool.donors:
            parts = split_endpoint(donor.endpoint)
            if parts is None:
                raise ValueError(f"donor {donor.node_id} has no usable endpoint")
            client = GateClient(
                parts,
                key=pool.gate_key,
                instance_id=pool.instance_id,
                on_lost=_naming(donor.node_id, on_lost),
            )
            client.start()
            self.clients.append(client)
        self.layers = tuple(donor.layers for donor in pool.donors)

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(client.endpoint for client in self.clients)

    def close(self) -> None:
        for client in self.clients:
            client.close()


def _naming(node_id: str, on_lost: Callable[[str, str], None]) -> Callable[[str], None]:
    def lost(why: str) -> None:
        on_lost(node_id, why)

    return lost


def donor_lost(send: Send, exit_code: int) -> Callable[[str, str], None]:
    """What a driver does when a donor goes: report it (naming the node), then exit."""

    def lost(node_id: str, why: str) -> None:
        send(
            Failed(
                message=f"RPC donor node {node_id} was lost: {why}",
                code=f"{RPC_DONOR_LOST}:{node_id}",
            )
        )
        os._exit(exit_code)

    return lost
