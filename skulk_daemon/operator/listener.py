"""The operator listener: the node's app again, on loopback TLS, behind the bearer guard.

A second uvicorn server in the daemon, bound to ``127.0.0.1``: port
``--operator-api-port`` / ``SKULK_OPERATOR_API_PORT`` (0 for a kernel-chosen port, which
is logged), else the port ``configure-relay`` stored (the relay connector dials that
one), else 52417. It serves the very same Litestar app as the main port, wrapped in
:class:`~skulk_daemon.operator.guards.OperatorGate`, with the gateway's pinned
self-signed TLS identity from the authority store. The relay's connector and paired
devices reach the node only through it.

It exists only on a gateway: when the authority store is initialized at start-up it
binds before the node serves (a port in use is one clear start-up error); otherwise it
watches the store and starts within :data:`POLL_SECONDS` after ``skulk operator pair``
initializes it on the running node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable, Generator
from typing import Final

import uvicorn
from litestar.types import ASGIApp

from skulk_daemon.operator import listener_record
from skulk_daemon.operator.errors import AuthorityError
from skulk_daemon.operator.guards import OperatorGate
from skulk_daemon.operator.service import OperatorPairingService
from skulk_daemon.system.listeners import BindError, bind_listener
from skulk_daemon.system.settings import DEFAULT_OPERATOR_API_PORT

log = logging.getLogger("skulk.operator")

OPERATOR_HOST: Final = "127.0.0.1"
# How often a node that is not (yet) a gateway looks at the authority store.
POLL_SECONDS: Final = 1.0
# After a failed bind on a running node, how long before trying the port again.
REBIND_SECONDS: Final = 5.0
GRACEFUL_SHUTDOWN_SECONDS: Final = 5


class ListenerBindError(Exception):
    """The operator port cannot be bound; the message says what to change."""


def bind_operator_socket(port: int) -> socket.socket:
    """Bind the loopback operator port (0: any free one), as one clear error if taken."""
    try:
        return bind_listener(
            OPERATOR_HOST, port, what="operator listener", flag="--operator-api-port", backlog=128
        )
    except BindError as exc:
        raise ListenerBindError(str(exc)) from None


def server_tls_context(cert_path: str, key_path: str) -> ssl.SSLContext:
    """TLS 1.2+ with the pinned identity; clients authenticate by bearer, not by cert."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_path, key_path)
    return context


class _Server(uvicorn.Server):
    # NOTE: the daemon owns SIGINT/SIGTERM (serve.py); this server must not install
    # handlers of its own or re-raise the signal when it stops.
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class OperatorListener:
    """The operator listener's lifecycle: bind, serve, and stop with the node."""

    def __init__(self, service: OperatorPairingService, *, port: int | None) -> None:
        self.service = service
        self.port = port
        self._sock: socket.socket | None = None
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def bound_port(self) -> int | None:
        """The port actually listened on, once bound (the kernel's choice for port 0)."""
        if self._sock is None:
            return None
        port: int = self._sock.getsockname()[1]
        return port

    def bind_if_gateway(self) -> None:
        """At start-up: bind now when the store is already initialized.

        Raises :class:`ListenerBindError` (the port) or
        :class:`~skulk_daemon.operator.errors.AuthorityError` (a damaged store), both
        start-up errors the operator can fix.
        """
        if self.service.is_gateway():
            self._sock = bind_operator_socket(self._port())

    def start(self, app: ASGIApp) -> None:
        """Serve ``app`` once this node is a gateway (now, or when it becomes one).

        Also publishes the port it serves (or will serve) for ``skulk operator pair``,
        whose pairing packages must name it.
        """
        if self._task is None and not self._closed:
            self._publish(self._planned_port())
            self._task = asyncio.create_task(self._run(app), name="operator-listener")

    async def close(self) -> None:
        """Stop serving (in-flight requests get a short grace) and release the port."""
        self._closed = True
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            if self._server is None:
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._sock is not None:
            self._sock.close()
        with contextlib.suppress(OSError):
            listener_record.withdraw(self.service.directory)

    def _planned_port(self) -> int | None:
        """The bound port, else the one a bind will use (``None`` for port 0)."""
        if self.bound_port is not None:
            return self.bound_port
        if self.port is not None:
            return None if self.port == 0 else self.port
        try:
            return self._port() if self.service.is_gateway() else DEFAULT_OPERATOR_API_PORT
        except AuthorityError:
            return DEFAULT_OPERATOR_API_PORT  # the bind will report the damaged store

    def _publish(self, port: int | None) -> None:
        try:
            listener_record.publish(self.service.directory, port)
        except OSError as exc:
            # Pairing still works with --exchange-url; serving must not fail for this.
            log.warning("could not record the operator port for `skulk operator pair`: %s", exc)

    def _port(self) -> int:
        """The flag's port, else the one ``configure-relay`` stored, else the default."""
        if self.port is not None:
            return self.port
        stored = self.service.gateway_identity().operator_api_port
        return DEFAULT_OPERATOR_API_PORT if stored is None else stored

    async def _run(self, app: ASGIApp) -> None:
        try:
            await self._serve(app)
        except Exception:
            # A background task: its failure must reach the log, not vanish with it.
            log.exception("the operator listener stopped")

    async def _serve(self, app: ASGIApp) -> None:
        sock = self._sock or await self._wait_and_bind()
        identity = await asyncio.to_thread(self.service.gateway_identity)
        context = server_tls_context(str(identity.cert_path), str(identity.key_path))
        config = uvicorn.Config(
            OperatorGate(app, self.service),
            lifespan="off",  # the main server runs the app's start-up and shutdown
            log_config=None,
            log_level="warning",
            access_log=False,
            # NOTE: the socket peer is always the relay connector or a local client;
            # never let a header rewrite who or what the request came from.
            proxy_headers=False,
            server_header=False,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
            ssl_context_factory=_factory(context),
        )
        self._server = _Server(config)
        if self._closed:
            return
        log.info("operator listener serving on https://%s:%d", OPERATOR_HOST, self.bound_port)
        await self._server.serve(sockets=[sock])
        if not self._server.started and not self._closed:
            log.error("the operator listener failed to start; see the log above")

    async def _wait_and_bind(self) -> socket.socket:
        reported: str | None = None
        while True:
            problem: str | None = None
            try:
                if await asyncio.to_thread(self.service.is_gateway):
                    self._sock = bind_operator_socket(await asyncio.to_thread(self._port))
                    await asyncio.to_thread(self._publish, self.bound_port)
                    return self._sock
            except (ListenerBindError, AuthorityError) as exc:
                problem = str(exc)
            if problem is not None and problem != reported:
                log.error("operator listener not started: %s", problem)
            reported = problem
            await asyncio.sleep(REBIND_SECONDS if problem else POLL_SECONDS)


def _factory(
    context: ssl.SSLContext,
) -> Callable[[uvicorn.Config, Callable[[], ssl.SSLContext]], ssl.SSLContext]:
    def factory(_: uvicorn.Config, __: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        return context

    return factory
