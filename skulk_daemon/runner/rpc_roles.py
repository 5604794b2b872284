"""A runner's part in a llama.cpp RPC pool: a donor serving memory, or a driver's gates.

A donor runner loads no model: it opens the
:class:`~skulk_daemon.runner.rpc_gate.GateServer` on the port the placement
assigned, moves into a private network namespace (runner/rpc_netns.py), starts
llama.cpp's RPC server on 127.0.0.1 in there, reports ready, and serves until told
to stop. A driver runner starts its dialer (runner/rpc_dialer.py), moves into a
private namespace, and opens one :class:`~skulk_daemon.runner.rpc_gate.GateClient`
per donor in there; it loads its model through them. Losing a donor is fatal to
the driver, reported with the donor's node id before llama.cpp aborts. Where
namespaces are unavailable both carry on without them, warning what that leaves
open, and say so in what they report.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import BinaryIO, Final

from skulk_core.chat.generation import ERROR_INVALID_REQUEST, ErrorChunk
from skulk_core.ids import TaskId
from skulk_core.placement.rpc_pool import (
    RPC_DONOR_LOST,
    RPC_PORT_IN_USE,
    join_endpoint,
    split_endpoint,
)
from skulk_daemon.runner.protocol import (
    Failed,
    Load,
    Phase,
    RpcPool,
    RpcServe,
    RunnerMessage,
    serve_frames,
)
from skulk_daemon.runner.rpc_dialer import Dialer
from skulk_daemon.runner.rpc_gate import Dial, GateClient, GateServer
from skulk_daemon.runner.rpc_netns import (
    Isolation,
    IsolationError,
    isolate_network,
    namespaces_exist,
)

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


def start_donor(serve: RpcServe, n_threads: int) -> tuple[GateServer, Isolation]:
    """llama.cpp's RPC server, private to this process, behind a gate on
    ``serve.host:port``; and whether it could be made private."""
    where = join_endpoint(serve.host, serve.port)
    try:
        # NOTE: the gate's listener first: it must be made in the machine's
        # network namespace, before this process leaves it.
        gate = GateServer(serve.host, serve.port, key=serve.gate_key, instance_id=serve.instance_id)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise DonorStartError(
                f"RPC port {serve.port} on {serve.host} is already in use by another "
                "process; the pool will be placed again on another port",
                f"{RPC_PORT_IN_USE}:{where}",
            ) from None
        raise DonorStartError(f"cannot listen for the RPC pool on {where}: {exc}") from None
    try:
        isolation = isolate_network()
    except IsolationError as exc:
        gate.close()
        raise DonorStartError(str(exc)) from None
    internal = _free_loopback_port()
    if not isolation.private:
        log.warning(
            "cannot isolate llama.cpp's RPC server (%s): it listens unauthenticated on "
            "127.0.0.1:%d, where any process on this machine can reach this donor's "
            "memory and compute without passing the gate",
            isolation.detail,
            internal,
        )
    # NOTE: imported here so a donor maps libllama only once it is asked to serve
    # (and after the move: the import starts a thread, which would stay outside).
    from skulk_daemon.engines.llama_rpc import serve_rpc  # noqa: PLC0415

    threading.Thread(
        target=serve_rpc,
        args=(f"127.0.0.1:{internal}", n_threads),
        name="llama-rpc-server",
        daemon=True,
    ).start()
    if not _wait_listening(internal, SERVER_START_TIMEOUT_SECONDS):
        gate.close()
        raise DonorStartError("llama.cpp's RPC server did not start listening")
    gate.start(("127.0.0.1", internal))
    return gate, isolation


def serve_donor(stdin: BinaryIO, send: Send, load: Load) -> int:
    """The ``"rpc_donor"`` mode: lend memory until Shutdown or end of stdin."""
    if load.serve is None:
        send(Failed(message="an rpc_donor runner needs what to serve"))
        return 1
    try:
        gate, isolation = start_donor(load.serve, load.n_threads or os.cpu_count() or 1)
    except DonorStartError as exc:
        log.error("%s", exc)
        send(Failed(message=str(exc), code=exc.code))
        return 1
    host, port = gate.address
    log.info("serving RPC memory on %s; %s", join_endpoint(host, port), isolation.fact)
    send(Phase(phase="loaded"))
    send(Phase(phase="warming_up"))
    send(Phase(phase="ready", detail=isolation.fact))
    serve_frames(
        stdin,
        generate=lambda request: send(_not_served(request.task_id)),
        embed=lambda task_id, _: send(_not_served(task_id)),
        cancel=lambda _: None,  # it runs no tasks
    )
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
    """The driver's local gates, one per donor, in layer order, private to this
    process where it can have a network namespace of its own.

    NOTE: build them before anything starts a thread (llama.cpp's import does): an
    unprivileged process enters a user namespace only while it has one thread.
    """

    def __init__(self, pool: RpcPool, on_lost: Callable[[str, str], None]) -> None:
        remotes: list[tuple[str, int]] = []
        for donor in pool.donors:
            parts = split_endpoint(donor.endpoint)
            if parts is None:
                raise ValueError(f"donor {donor.node_id} has no usable endpoint")
            remotes.append(parts)
        self._dialer, self.isolation = _private_dialing(remotes)
        self.clients: list[GateClient] = []
        for index, (donor, remote) in enumerate(zip(pool.donors, remotes, strict=True)):
            dial: Dial | None = None
            if self._dialer is not None:
                dial = functools.partial(self._dialer.dial, index)
            client = GateClient(
                remote,
                key=pool.gate_key,
                instance_id=pool.instance_id,
                on_lost=_naming(donor.node_id, on_lost),
                dial=dial,
            )
            client.start()
            self.clients.append(client)
        self.layers = tuple(donor.layers for donor in pool.donors)
        if not self.isolation.private:
            log.warning(
                "cannot isolate the driver's RPC gate clients (%s): while this driver "
                "runs, any process on this machine can reach its donors' memory through "
                "%s",
                self.isolation.detail,
                ", ".join(self.endpoints),
            )

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(client.endpoint for client in self.clients)

    def close(self) -> None:
        for client in self.clients:
            client.close()
        if self._dialer is not None:
            self._dialer.close()


def _private_dialing(remotes: list[tuple[str, int]]) -> tuple[Dialer | None, Isolation]:
    """The dialer (started while this process is still on the machine's network)
    and the isolation it makes possible; no dialer where there is no isolation."""
    if not namespaces_exist():
        return None, isolate_network()
    try:
        dialer = Dialer(remotes)
    except OSError as exc:
        return None, Isolation(private=False, detail=f"cannot start the RPC dialer: {exc}")
    try:
        isolation = isolate_network()
    except IsolationError as exc:
        dialer.close()
        raise ValueError(str(exc)) from None
    if not isolation.private:
        dialer.close()
        return None, isolation
    return dialer, isolation


def _naming(node_id: str, on_lost: Callable[[str, str], None]) -> Callable[[str], None]:
    def lost(why: str) -> None:
        on_lost(node_id, why)

    return lost


def donor_lost(send: Send, exit_code: int) -> Callable[[str, str], None]:
    """What a driver does when a donor goes: report it (naming the node), then exit.
    One report: a second donor's loss at the same moment waits for the exit."""
    reporting = threading.Lock()

    def lost(node_id: str, why: str) -> None:
        with reporting:
            send(
                Failed(
                    message=f"RPC donor node {node_id} was lost: {why}",
                    code=f"{RPC_DONOR_LOST}:{node_id}",
                )
            )
            os._exit(exit_code)

    return lost
