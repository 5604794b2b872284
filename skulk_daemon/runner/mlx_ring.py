"""A runner's rank in an MLX ring across nodes, inside the cluster's trust.

MLX's ring backend trusts whoever connects to a rank's TCP address. So, as a
llama.cpp RPC donor does (runner/rpc_roles.py), every rank:

1. opens a :class:`~skulk_daemon.runner.rpc_gate.GateServer` on the fabric address
   the placement assigned it (only peers that prove the pool key get through, and
   their traffic is sealed);
2. moves into a private network namespace (runner/rpc_netns.py), keeping a dialer
   outside it, and opens one :class:`~skulk_daemon.runner.rpc_gate.GateClient`
   per other rank in there;
3. tells MLX (``MLX_HOSTFILE``, ``MLX_RANK``) to listen on a loopback port of that
   private namespace and to reach every other rank through its gate client.

The gates and their relays run in a child process forked from the rank (in its
private namespace): MLX holds the GIL while it joins the ring, so relays in the
rank's own threads would wait for the join they carry. The child reports a lost
peer to the rank over a pipe (and ends the rank itself if it cannot take it).

Every rank's gate opens before its layers load and waits for MLX to listen
behind it, and every client keeps dialling its peer's gate while that node's
runner comes up, so the ranks may start in any order. Losing a peer afterwards is
fatal to the rank (``mlx_ring_peer_lost:<node>``): the cluster places the
instance again on the nodes that remain.

Ranks after 0 serve no requests: :func:`serve_ring_stage` runs their layers until
rank 0 stops the ring or a peer is lost.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Final, NoReturn

from skulk_core.chat.generation import ERROR_INVALID_REQUEST, ErrorChunk
from skulk_core.placement.rpc_pool import MLX_RING_PEER_LOST, RPC_PORT_IN_USE, split_endpoint
from skulk_daemon.runner.protocol import (
    Failed,
    Load,
    MlxRingLeg,
    Phase,
    RunnerMessage,
    serve_frames,
)
from skulk_daemon.runner.rpc_dialer import Dialer
from skulk_daemon.runner.rpc_gate import GateClient, GateServer
from skulk_daemon.runner.rpc_roles import _private_dialing

log = logging.getLogger("skulk.runner.mlx_ring")

LOSS_GRACE_SECONDS: Final = 10.0
"""How long the relay process lets the rank report a lost peer before ending it."""
JOIN_TIMEOUT_SECONDS: Final = 300.0
"""How long a rank keeps dialling a peer's gate (its runner loading) before failing."""
DIAL_RETRY_SECONDS: Final = 0.5
EXIT_FAILED: Final = 1

Send = Callable[[RunnerMessage], None]


class RingStartError(Exception):
    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


def _retrying(dial: Callable[[], socket.socket], deadline: float) -> socket.socket:
    while True:
        try:
            return dial()
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(DIAL_RETRY_SECONDS)


def _direct(remote: tuple[str, int]) -> socket.socket:
    return socket.create_connection(remote, timeout=5.0)


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RingGates:
    """This rank's gate, its clients to the other ranks, and MLX's hostfile.

    NOTE: build it before anything starts a thread (see rpc_roles.DriverGates).
    """

    def __init__(
        self, leg: MlxRingLeg, on_lost: Callable[[str, str], None], finished: threading.Event
    ) -> None:
        self.finished = finished
        self._on_lost = on_lost
        lost_read, lost_write = os.pipe()
        self._reports = os.fdopen(lost_read, "rb")
        if not 0 <= leg.rank < len(leg.endpoints) == len(leg.nodes):
            raise RingStartError(f"rank {leg.rank} is not in a ring of {len(leg.endpoints)}")
        parts = [split_endpoint(endpoint) for endpoint in leg.endpoints]
        if any(part is None for part in parts):
            raise RingStartError(f"the ring names an unusable endpoint: {leg.endpoints}")
        addresses = [part for part in parts if part is not None]
        own = addresses[leg.rank]
        try:
            self.server = GateServer(
                own[0],
                own[1],
                key=leg.gate_key,
                instance_id=leg.instance_id,
                target_wait_s=JOIN_TIMEOUT_SECONDS,
            )
        except OSError as exc:
            where = leg.endpoints[leg.rank]
            if exc.errno == errno.EADDRINUSE:
                raise RingStartError(
                    f"ring port {own[1]} on {own[0]} is already in use by another process; "
                    "the ring will be placed again on another port",
                    f"{RPC_PORT_IN_USE}:{where}",
                ) from None
            raise RingStartError(f"cannot listen for the MLX ring on {where}: {exc}") from None
        others = [r for r in range(len(addresses)) if r != leg.rank]
        dialer: Dialer | None
        try:
            dialer, self.isolation = _private_dialing([addresses[r] for r in others])
        except ValueError as exc:
            self.server.close()
            raise RingStartError(str(exc)) from None
        self._dialer = dialer
        deadline = time.monotonic() + JOIN_TIMEOUT_SECONDS
        self.clients: dict[int, GateClient] = {}
        for index, rank in enumerate(others):
            node = leg.nodes[rank]
            base = (
                functools.partial(dialer.dial, index)
                if dialer is not None
                else functools.partial(_direct, addresses[rank])
            )
            client = GateClient(
                addresses[rank],
                key=leg.gate_key,
                instance_id=leg.instance_id,
                on_lost=functools.partial(_report, lost_write, os.getpid(), node),
                dial=functools.partial(_retrying, base, deadline),
            )
            self.clients[rank] = client
        if not self.isolation.private:
            log.warning(
                "cannot isolate this MLX ring rank (%s): while it runs, any process on "
                "this machine can reach its ring port and its peers' gates",
                self.isolation.detail,
            )
        internal = _free_loopback_port()
        hosts = [
            [f"127.0.0.1:{internal}"] if rank == leg.rank else [self.clients[rank].endpoint]
            for rank in range(len(addresses))
        ]
        parent = os.getpid()
        child = os.fork()
        if child == 0:  # the relay process: it never returns
            self._reports.close()
            _relay(self.server, list(self.clients.values()), internal, parent)
        os.close(lost_write)
        self._relay_pid = child
        # The listeners are the relay process's now.
        self.server.close()
        for client in self.clients.values():
            client.close()
        threading.Thread(target=self._watch, name="mlx-ring-losses", daemon=True).start()
        handle, name = tempfile.mkstemp(prefix="skulk-mlx-ring-", suffix=".json")
        with os.fdopen(handle, "w") as out:
            json.dump(hosts, out)
        self.hostfile = Path(name)
        os.environ["MLX_HOSTFILE"] = name
        os.environ["MLX_RANK"] = str(leg.rank)

    @property
    def fact(self) -> str:
        """What the rank reports when ready: whether its ring port is private."""
        if self.isolation.private:
            return f"MLX ring port isolated in {self.isolation.detail}"
        return (
            f"MLX ring port NOT isolated ({self.isolation.detail}): reachable by any local process"
        )

    def _watch(self) -> None:
        for line in self._reports:
            node, _, why = line.decode(errors="replace").rstrip("\n").partition("\t")
            self._on_lost(node, why)

    def close(self) -> None:
        self.finished.set()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._relay_pid, signal.SIGTERM)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self._relay_pid, 0)
        if self._dialer is not None:
            self._dialer.close()
        self.hostfile.unlink(missing_ok=True)


def _report(pipe: int, rank_pid: int, node: str, why: str) -> None:
    """In the relay process: tell the rank (``rank_pid``) which peer was lost, then
    make sure it ends. Only while it is still this process's parent: once it has
    gone, the parent is whoever adopted this process (the daemon)."""
    with contextlib.suppress(OSError):
        os.write(pipe, f"{node}\t{why}\n".encode())
    time.sleep(LOSS_GRACE_SECONDS)
    if os.getppid() == rank_pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(rank_pid, signal.SIGKILL)


def _relay(server: GateServer, clients: list[GateClient], internal: int, parent: int) -> NoReturn:
    """The relay process: serve the gate and the clients while the rank lives."""
    try:
        server.start(("127.0.0.1", internal))
        for client in clients:
            client.start()
        while os.getppid() == parent:
            time.sleep(0.5)
    finally:
        os._exit(0)


def peer_lost(send: Send, finished: threading.Event) -> Callable[[str, str], None]:
    """Report the lost peer (naming its node) once, then exit: the ring is broken.
    Not once ``finished`` is set: peers leave when the ring is taken down."""
    reporting = threading.Lock()

    def lost(node_id: str, why: str) -> None:
        with reporting:
            if finished.is_set():
                log.info("MLX ring node %s left: %s", node_id, why)
                return
            send(
                Failed(
                    message=f"MLX ring node {node_id} was lost: {why}",
                    code=f"{MLX_RING_PEER_LOST}:{node_id}",
                )
            )
            os._exit(EXIT_FAILED)

    return lost


def join_ring(send: Send, leg: MlxRingLeg) -> RingGates | None:
    """This rank's gates, or None after reporting why they could not open. Set
    their ``finished`` when the ring is being taken down."""
    finished = threading.Event()
    try:
        return RingGates(leg, peer_lost(send, finished), finished)
    except RingStartError as exc:
        log.error("%s", exc)
        send(Failed(message=str(exc), code=exc.code))
        return None


def serve_ring_stage(stdin: BinaryIO, send: Send, load: Load) -> int:
    """A rank after 0: load layers ``[start, end)``, join the ring, run them for
    rank 0 until it stops the ring (or Shutdown)."""
    leg = load.ring
    assert leg is not None and leg.rank > 0
    gates = join_ring(send, leg)
    if gates is None:
        return EXIT_FAILED
    from skulk_daemon.engines._mlx_stage import Stage, StageError, serve_stage  # noqa: PLC0415

    try:
        stage = Stage(Path(load.model_path), leg.start_layer, leg.end_layer, first=False)
    except StageError as exc:
        send(Failed(message=str(exc)))
        return EXIT_FAILED
    send(Phase(phase="loaded"))
    send(Phase(phase="warming_up"))

    def run() -> None:
        import mlx.core as mx  # noqa: PLC0415

        try:
            group = mx.distributed.init(strict=True, backend="ring")
            send(Phase(phase="ready", detail=f"mlx ring rank {leg.rank}; {gates.fact}"))
            serve_stage(stage, group)
        except Exception as exc:  # MLX raises RuntimeError subclasses of its own
            if gates.finished.is_set():
                return
            # NOTE: this rank only hears from the rank before it; that is the one lost
            # (or its link) when MLX gives up on the ring.
            before = leg.nodes[leg.rank - 1]
            send(
                Failed(
                    message=f"the MLX ring stopped: {exc}",
                    code=f"{MLX_RING_PEER_LOST}:{before}",
                )
            )
            os._exit(EXIT_FAILED)
        # Rank 0 stopped the ring (its instance is going): wait for Shutdown.
        gates.finished.set()

    threading.Thread(target=run, name="mlx-ring-stage", daemon=True).start()

    def refuse(task_id: object) -> None:
        send(
            ErrorChunk(
                task_id=task_id,  # type: ignore[arg-type]
                code=ERROR_INVALID_REQUEST,
                message="this runner holds layers of an MLX ring; its rank 0 serves requests",
            )
        )

    serve_frames(
        stdin,
        generate=lambda request: refuse(request.task_id),
        embed=lambda task_id, _: refuse(task_id),
        cancel=lambda _: None,
        speech=lambda task: refuse(task.task_id),
    )
    send(Phase(phase="shutting_down"))
    gates.close()
    send(Phase(phase="shutdown"))
    return 0
