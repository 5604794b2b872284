"""A one-node cluster in the test process: the real Litestar app over the real services.

:class:`AppNode` assembles a node as ``skulk_daemon.serve`` does, less what needs a
process of its own (the fabric, the operator listener, signals): the real
:class:`~skulk_daemon.node.node.Node` with its event log in a temp dir, master of
term 1 (a cluster of one), a real :class:`~skulk_daemon.worker.supervisor.Supervisor`
whose runners are real ``skulk_daemon.runner`` subprocesses, the telemetry publisher
(so placement has memory facts), the capability service and the extension host.
Litestar's ``TestClient`` runs the lifespan on its portal loop; requests go through
:class:`~tests.api.app_transport.AppTransport`, which streams.

Usage::

    with AppNode(root=tmp_path, models_dir=models) as app:
        assert app.get("/node_id").status_code == 200
"""

from __future__ import annotations

import asyncio
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import httpx
import httpx2
from litestar import Litestar
from litestar.testing import TestClient

from skulk_daemon.api.app import create_app
from skulk_daemon.capabilities.service import CapabilityService
from skulk_daemon.extensions.lifecycle import ExtensionHost
from skulk_daemon.node.node import Node
from skulk_daemon.operator.service import OperatorPairingService
from skulk_daemon.serve import (
    build_node,
    builtin_providers,
    run_node_loops,
    telemetry_source,
)
from skulk_daemon.services import Services
from skulk_daemon.system.settings import Settings, resolve_settings
from skulk_daemon.worker.supervisor import Supervisor
from tests.api.app_transport import AppTransport, AppTransport2
from tests.daemon_process import (
    LEAN_RUNNER_THREADS,
    NodePaths,
    free_port,
    pin_runner_threads,
    runner_status,
)

REQUEST_TIMEOUT_SECONDS = 120.0


@dataclass
class AppNode(NodePaths):
    """One node's app, served in-process while the ``with`` block lasts."""

    root: Path
    models_dir: Path
    config_yaml: str | None = None
    """``skulk.yaml`` written before the node is built, if any."""
    runner_threads: int | None = LEAN_RUNNER_THREADS
    """``inference.runner_threads``, added to that file unless it sets it (``None``:
    the product default, all cores); see :data:`tests.daemon_process.LEAN_RUNNER_THREADS`."""
    port: int = field(default_factory=free_port)
    """The API port the node believes it has (nothing is bound)."""
    node: Node = field(init=False)
    services: Services = field(init=False)
    http: httpx.Client = field(init=False)
    _test_client: TestClient[Litestar] = field(init=False)
    _transport: AppTransport = field(init=False)
    _transport2: AppTransport2 = field(init=False)

    def settings(self) -> Settings:
        return resolve_settings(
            host="127.0.0.1",
            api_port=self.port,
            config_home=str(self.config_home),
            data_dir=str(self.data_dir),
            models_dir=str(self.models_dir),
        )

    def __enter__(self) -> AppNode:
        if self.config_yaml is not None:
            self.config_home.mkdir(parents=True, exist_ok=True)
            (self.config_home / "skulk.yaml").write_text(self.config_yaml)
        if self.runner_threads is not None:
            pin_runner_threads(self.config_home / "skulk.yaml", self.runner_threads)
        settings = self.settings()
        self.node = node = build_node(settings)
        source = telemetry_source(node)
        node.record_telemetry(source.read())
        worker = Supervisor(node)
        node.on_applied(worker.wake)
        node.become_master(term=1)
        capabilities = CapabilityService(node)
        source.gossip = capabilities.gossip
        services = Services.build(
            node,
            worker,
            operator=OperatorPairingService.open(settings.data_dir),
            capabilities=capabilities,
        )
        extensions = ExtensionHost.open(
            node,
            services.embeddings,
            capabilities,
            builtins=builtin_providers(node, services, capabilities),
        )
        services.chat.attach_hooks(extensions.chat)
        self.services = services
        background: list[asyncio.Task[None]] = []
        stop = asyncio.Event()

        async def started() -> None:
            await node.start()
            background.extend(run_node_loops(node, source, worker, stop))
            if services.steward is not None:
                services.steward.start()
            await extensions.start()

        async def stopping() -> None:
            await extensions.stop()
            if services.steward is not None:
                await services.steward.close()
            stop.set()
            for task in background:
                await task
            await worker.shutdown()
            node.close()

        with warnings.catch_warnings():
            # NOTE: some handlers still use Litestar 2 forms that Litestar 3 drops
            # (inferred dependencies, Parameter(query=...)); Litestar warns about them
            # while it builds the routes. The daemon does not run with warnings as
            # errors, so building the app here must not fail the suite either.
            warnings.simplefilter("ignore", DeprecationWarning)
            app = create_app(services, on_startup=[started], on_shutdown=[stopping])
        self._test_client = TestClient(app, base_url=self.url)
        self._test_client.__enter__()
        portal = self._test_client.blocking_portal
        self._transport = AppTransport(app, portal)
        self._transport2 = AppTransport2(app, portal)
        self.http = self.new_http()
        return self

    @property
    def transport(self) -> httpx.BaseTransport:
        """For an SDK that builds its own ``httpx`` client (``ollama.Client(transport=)``)."""
        return self._transport

    def new_http(self) -> httpx.Client:
        """Another client of this app, for an SDK that closes the one it is given."""
        return httpx.Client(
            transport=self._transport, base_url=self.url, timeout=REQUEST_TIMEOUT_SECONDS
        )

    def new_http2(self) -> httpx2.Client:
        """:meth:`new_http` for an SDK built on ``httpx2`` (``anthropic``)."""
        return httpx2.Client(
            transport=self._transport2, base_url=self.url, timeout=REQUEST_TIMEOUT_SECONDS
        )

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.http.close()
        self._test_client.__exit__(kind, value, traceback)

    # The calls tests make, shaped like tests.daemon_process.DaemonProcess's.

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.get(path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.post(path, **kwargs)

    def runner_status(self, instance_id: str) -> str | None:
        """The tag of the instance's first runner status (``"RunnerReady"``), if any."""
        return runner_status(self.get("/state").json(), instance_id)

    def settle(self) -> None:
        """Wait until every report the node has made so far (a task started or
        finished, a runner's status) is applied to the state ``/state`` shows.

        Reports are applied in the background, so an answered request's task may
        otherwise still show as running, or not show yet."""
        self._test_client.blocking_portal.call(self.node.flush_reports)


@dataclass(frozen=True)
class Served:
    """An app serving the demo model, and the instance that serves it."""

    app: AppNode
    instance_id: str


class AppFactory(Protocol):
    """``make_app``: a fresh app for one test, with its own ``skulk.yaml`` if given."""

    def __call__(self, name: str = "node", *, config_yaml: str | None = None) -> AppNode: ...
