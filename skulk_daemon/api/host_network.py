"""``GET /v1/plugins/host-network``: this node's live fabric listeners, for a plugin
that attaches its own secure transport to matching peers.

The answer (:class:`~skulk_core.plugins.host_attachment.HostNetwork`): the live local
``nodeId``; ``networkVersion`` (the fabric protocol version); the domain-separated
``namespaceFingerprint``; ``controlEndpoints``, the numeric ``{host, port}`` of the
running ZeroMQ ROUTER the fabric listens on, observed from the operating system's
listening sockets of this process at the port the live socket reports (so an
OS-assigned port is reported as its real number, and a wildcard bind as loopback of
its family); ``dataTransport: "zmq"``; and ``dataEndpoints``, the same listener,
since the data plane's frames ride that ROUTER. These are addresses local to the
serving host, not endpoints guaranteed reachable remotely.

Authority as for every plugin read (:func:`skulk_daemon.api.plugin_authority.authorize`):
``plugins:read`` or direct owner access, behind the guard's origin and transport
checks. At most four reads at once (a fifth is refused with 429, never queued); one
read has two seconds (503 past it); no fabric, or a listener that is not running or
cannot be reported as numeric TCP, is 503. ``Cache-Control: no-store`` on every
answer, refusals included. The route never dials, changes configuration or restarts
anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Final

import psutil
from litestar import Controller, get
from litestar.datastructures import ResponseHeader

from skulk_core.cluster.fabric import PROTOCOL_VERSION
from skulk_core.plugins.host_attachment import HostNetwork, UnsupportedListener, host_network
from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.errors import NO_STORE_EXCEPTION_HANDLERS
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.api.plugin_authority import authorize, fail
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import NO_STORE_HEADERS
from skulk_daemon.fabric.cluster import DATA_TRANSPORT, ClusterAgent
from skulk_daemon.node.node import Node
from skulk_daemon.operator.plugin_grants import PLUGINS_READ
from skulk_daemon.operator.service import OperatorPairingService

MAX_CONCURRENT_READS: Final = 4
READ_DEADLINE_SECONDS: Final = 2.0
NETWORK_VERSION: Final = str(PROTOCOL_VERSION)


class ReadSlots:
    """At most ``limit`` reads in flight; a read over the limit is refused, not queued.

    A slot is held until the observation itself ends, even when its caller stopped
    waiting at the deadline, so a stuck observation keeps its slot (429) rather than
    letting observations pile up. Thread-safe: tests hold slots from another thread.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._held = 0
        self._lock = threading.Lock()

    def try_acquire(self) -> bool:
        with self._lock:
            if self._held >= self._limit:
                return False
            self._held += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._held -= 1

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def held(self) -> int:
        with self._lock:
            return self._held

    @contextlib.contextmanager
    def occupied(self, count: int) -> Iterator[None]:
        """Hold ``count`` slots for the ``with`` block (raises when they are not free)."""
        taken = 0
        try:
            for _ in range(count):
                if not self.try_acquire():
                    raise RuntimeError("the read slots are already taken")
                taken += 1
            yield
        finally:
            for _ in range(taken):
                self.release()


READS: Final = ReadSlots(MAX_CONCURRENT_READS)


def listening(port: int) -> list[tuple[str, int]]:
    """This process's listening TCP sockets on ``port``, as the OS reports them."""
    return [
        (conn.laddr.ip, conn.laddr.port)
        for conn in psutil.Process().net_connections(kind="tcp")
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port
    ]


def observe(node: Node, cluster: ClusterAgent | None) -> HostNetwork:
    """One observation of the live fabric listeners; raises ``ApiError`` (503)."""
    if cluster is None:
        fail(503, "this node runs no fabric, so it has no TCP listeners to report", "unavailable")
    try:
        port = cluster.transport.port
    except RuntimeError:
        fail(503, "the fabric's listener is not running", "unavailable")
    try:
        bound = listening(port)
    except psutil.Error:
        fail(503, "this node cannot observe its own listening sockets", "unavailable")
    try:
        return host_network(
            node_id=str(node.node_id),
            # NOTE: per cluster (see FabricTransport.namespace); only its digest is answered.
            namespace=cluster.transport.namespace,
            network_version=NETWORK_VERSION,
            control=bound,
            data_transport=DATA_TRANSPORT,
            # NOTE: the data plane is multiplexed onto the same ROUTER as control.
            data=bound,
        )
    except UnsupportedListener as exc:
        fail(503, f"the fabric's TCP listener cannot be reported: {exc}", "unavailable")


async def read_within(
    slots: ReadSlots, work: Callable[[], HostNetwork], deadline: float = READ_DEADLINE_SECONDS
) -> HostNetwork:
    """``work`` in a thread under one of ``slots`` and within ``deadline`` seconds:
    429 when every slot is held, 503 past the deadline."""
    if not slots.try_acquire():
        fail(
            429,
            f"at most {slots.limit} host-network reads run at once; retry shortly",
            "busy",
        )
    future = asyncio.get_running_loop().run_in_executor(None, work)

    def ended(done: asyncio.Future[HostNetwork]) -> None:
        slots.release()
        # NOTE: an observation that ends after the deadline has nobody waiting for
        # its outcome; retrieving it here keeps asyncio from logging it as lost.
        if not done.cancelled():
            done.exception()

    future.add_done_callback(ended)
    try:
        return await asyncio.wait_for(asyncio.shield(future), deadline)
    except TimeoutError:
        fail(
            503,
            f"the host-network read did not finish within {deadline:g} seconds",
            "timeout",
        )


class HostNetworkController(Controller):
    path = "/v1/plugins/host-network"
    tags = ("Plugins",)
    # NOTE: as for the other plugin routes: the guard admits loopback without proxy
    # headers, or the operator listener; the handler applies the owner / scope rule.
    opt = declare(Requirement.DIRECT_LOOPBACK)
    response_headers = tuple(ResponseHeader(name=k, value=v) for k, v in NO_STORE_HEADERS.items())
    exception_handlers = NO_STORE_EXCEPTION_HANDLERS

    @get(
        "/",
        summary="This node's live fabric listeners, for plugin transport attachment",
        responses=errors(OPENAI, 429, 503),
    )
    async def host_network(
        self,
        request: HttpRequest,
        authority: OperatorPairingService | None,
        node: Node,
        cluster: ClusterAgent | None,
    ) -> HostNetwork:
        await authorize(request, authority, PLUGINS_READ)
        return await read_within(READS, lambda: observe(node, cluster))
