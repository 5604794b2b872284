"""``python -m skulk_daemon``: start a node, serve until SIGINT/SIGTERM, exit 0.

Start-up failures an operator can fix (a port in use, an unwritable data dir, a bad
``skulk.yaml``, a corrupt event log) print one clear line and exit 1; nothing that
was already on disk is changed by a failed start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING

import uvicorn

from skulk_core.cluster.telemetry import TELEMETRY_INTERVAL_SECONDS, NodeIdentityInfo
from skulk_core.config import ConfigError, LogLevel, SkulkConfig
from skulk_core.effective import EffectiveSetting
from skulk_core.version import SKULK_VERSION
from skulk_daemon.api.app import create_app
from skulk_daemon.capabilities.service import CapabilityService
from skulk_daemon.extensions.lifecycle import ExtensionHost
from skulk_daemon.fabric.cluster import ClusterAgent
from skulk_daemon.fabric.cluster_settings import ClusterSettingsFollower
from skulk_daemon.fabric.peers import fabric_address
from skulk_daemon.fabric.setup import resolve_fabric
from skulk_daemon.fabric.transport import FabricBindError, FabricTransport, FrameHandler
from skulk_daemon.in_effect import LOG_LEVEL_ENV, StartFlags, in_effect
from skulk_daemon.models.embedding_demo import with_embedding_demo
from skulk_daemon.models.installed import load_installed_models
from skulk_daemon.models.media_test_cards import with_media_test_cards
from skulk_daemon.models.speech_demo import with_speech_demos
from skulk_daemon.node.config_store import ConfigStore, kv_cache_for, load_config_file
from skulk_daemon.node.eventlog import EventLog, EventLogCorrupt
from skulk_daemon.node.identity import IdentityError, load_identity
from skulk_daemon.node.keys import derive_curve_keys, derive_rpc_gate_key, load_cluster_key
from skulk_daemon.node.node import Node
from skulk_daemon.node.snapshot import SNAPSHOT_FILE, SnapshotCorrupt, load_snapshot
from skulk_daemon.node_admin.restart import RestartLatch, reexec
from skulk_daemon.operator.errors import AuthorityError
from skulk_daemon.operator.listener import ListenerBindError, OperatorListener
from skulk_daemon.operator.service import OperatorPairingService
from skulk_daemon.placement.keep_alive import KeepAliveAgent
from skulk_daemon.placement.repair import RepairAgent
from skulk_daemon.providers.vad import VadProvider
from skulk_daemon.runner.client import spawned_runner_pids
from skulk_daemon.services import Services
from skulk_daemon.speech.providers import SpeechTags, SttProvider, TtsProvider
from skulk_daemon.system.buildinfo import source_commit
from skulk_daemon.system.event_loop import loop_factory, loop_name
from skulk_daemon.system.http_server import UVICORN_LIMITS, BoundedH11Protocol, LargeBodyLimiter
from skulk_daemon.system.listeners import BindError, bind_listener
from skulk_daemon.system.logs import configure_logging, node_secrets
from skulk_daemon.system.netinfo import advertised_api_urls
from skulk_daemon.system.settings import Settings, resolve_settings
from skulk_daemon.system.stopping import StopGuard
from skulk_daemon.telemetry.publisher import TelemetrySource, run_publisher
from skulk_daemon.worker.supervisor import Supervisor
from skulk_host.fsutil import ensure_private_dir

if TYPE_CHECKING:
    from skulk_daemon.fabric.discovery import MdnsDiscovery

log = logging.getLogger("skulk")

SHUTDOWN_FLUSH_SECONDS = 5.0


class StartupError(Exception):
    """A start-up problem the operator can fix; the message says how."""


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="skulk serve", description="Run a Skulk node.")
    parser.add_argument("--host", help="address to listen on (default 0.0.0.0, env SKULK_HOST)")
    parser.add_argument(
        "--api-port", type=int, help="HTTP port (default 52415, env SKULK_API_PORT)"
    )
    parser.add_argument(
        "--operator-api-port",
        type=int,
        help="loopback TLS operator listener port, 0 for any (default 52417, "
        "env SKULK_OPERATOR_API_PORT)",
    )
    parser.add_argument("--data-dir", help="node data dir (env SKULK_DATA_DIR)")
    parser.add_argument("--models-dir", help="models dir (env SKULK_MODELS_DIR)")
    parser.add_argument("--config-home", help="dir holding skulk.yaml (env SKULK_CONFIG_HOME)")
    parser.add_argument(
        "--fabric-port",
        type=int,
        help="cluster fabric port (default 52416, env SKULK_FABRIC_PORT, cluster.fabric_port)",
    )
    parser.add_argument(
        "--peer",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a peer's fabric address; repeatable (env SKULK_PEERS, cluster.peers)",
    )
    parser.add_argument(
        "--force-master",
        action="store_true",
        help="always win master elections (env SKULK_FORCE_MASTER=1)",
    )
    parser.add_argument(
        "--no-mdns", action="store_true", help="do not use mDNS discovery (env SKULK_MDNS=0)"
    )
    parser.add_argument(
        "--log-level",
        choices=[level.value for level in LogLevel],
        help="log level (default info, env SKULK_LOG_LEVEL, logging.level)",
    )
    return parser.parse_args(list(argv))


def bind_api_socket(host: str, port: int) -> socket.socket:
    """Bind the API port ourselves so a port in use is one clear message, not a traceback."""
    try:
        sock = bind_listener(host, port, what="API", flag="--api-port", backlog=2048)
    except BindError as exc:
        raise StartupError(str(exc)) from None
    sock.set_inheritable(True)
    return sock


def builtin_providers(
    node: Node, services: Services, capabilities: CapabilityService
) -> list[object]:
    """The first-party capability providers every node serves (``vad@1.0.0``, and
    ``tts@1.0.0``/``stt@1.0.0`` with their telemetry tags kept in step with the
    speech runners placed here)."""
    builtins: list[object] = [VadProvider()]
    if services.speech is not None:
        builtins += [TtsProvider(services.speech), SttProvider(services.speech)]
        speech_tags = SpeechTags(node, capabilities.advertise, capabilities.withdraw)
        node.on_applied(speech_tags.refresh)
    return builtins


def build_node(settings: Settings) -> Node:
    try:
        config_store = ConfigStore.load(settings.config_path)
        kv_cache_for(config_store.config)
    except ConfigError as exc:
        raise StartupError(str(exc)) from None
    models_dir = settings.models_dir(config_store.config.model_store.models_dir)
    for directory in (settings.data_dir, models_dir):
        try:
            ensure_private_dir(directory)
        except OSError as exc:
            raise StartupError(f"data directory {directory} is unusable: {exc}") from None
    try:
        identity = load_identity(settings.identity_key_path, settings.install_id_path)
    except (IdentityError, OSError) as exc:
        raise StartupError(str(exc)) from None
    try:
        snapshot = load_snapshot(settings.data_dir / SNAPSHOT_FILE)
        event_log, replayed, torn = EventLog.open(settings.event_log_path)
    except (EventLogCorrupt, SnapshotCorrupt) as exc:
        raise StartupError(str(exc)) from None
    if torn is not None:
        log.warning("%s", torn.describe(settings.event_log_path))
    return Node(
        settings=settings,
        identity=identity,
        config_store=config_store,
        event_log=event_log,
        replayed=replayed,
        installed_models=with_media_test_cards(
            with_speech_demos(
                with_embedding_demo(load_installed_models(models_dir), models_dir), models_dir
            ),
            models_dir,
        ),
        models_dir=models_dir,
        snapshot=snapshot,
    )


def telemetry_source(node: Node) -> TelemetrySource:
    """The readings this node publishes about itself (memory, disk, backends)."""
    config = node.config
    source = TelemetrySource(
        node_id=node.node_id,
        identity=NodeIdentityInfo(
            friendly_name=config.node.friendly_name or socket.gethostname(),
            node_install_id=node.identity.install_id,
            skulk_version=SKULK_VERSION,
            skulk_commit=source_commit(),
        ),
        models_dir=node.models_dir,
        participation=config.node.participation,
        memory_reserve_bytes=int(config.node.memory_reserve_gb * 1024**3),
        memory_limit_bytes=_gib_bytes(config.node.memory_limit_gb),
        api_urls=advertised_api_urls(node.settings.host, node.settings.api_port),
        runner_pids=spawned_runner_pids,
        kv_cache=lambda: kv_cache_for(node.config),
        llama_cpp_slots=lambda: node.config.inference.parallel_requests,
    )
    source.prompt_prefixes = lambda: node.routed_prompts.published(node.state.instances)
    return source


def run_node_loops(
    node: Node, source: TelemetrySource, worker: Supervisor, stop: asyncio.Event
) -> list[asyncio.Task[None]]:
    """Start the node's own loops, which run until ``stop`` is set: the telemetry
    publisher and the worker's reconciliation (and follow State's cluster-wide
    settings)."""
    node.on_applied(ClusterSettingsFollower(node).applied)
    return [
        asyncio.create_task(
            run_publisher(source, node.record_telemetry, TELEMETRY_INTERVAL_SECONDS, stop)
        ),
        asyncio.create_task(worker.run(stop)),
    ]


class _Server(uvicorn.Server):
    # NOTE: uvicorn re-raises the signal it caught once serving stops, which turns a
    # clean Ctrl-C into exit 130 / -15. We own the signals instead and exit 0.
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def _start_fabric(
    node: Node, worker: Supervisor, settings: Settings, args: argparse.Namespace
) -> tuple[ClusterAgent, MdnsDiscovery | None]:
    config = node.config
    try:
        fabric, mdns = resolve_fabric(
            bind_host=settings.host,
            config=config.cluster,
            port=args.fabric_port,
            peers=args.peer,
            force_master=args.force_master,
            no_mdns=args.no_mdns,
        )
        psk = load_cluster_key(settings.data_dir, config.cluster.key)
        keys = derive_curve_keys(psk)
        worker.attach_rpc_pool(derive_rpc_gate_key(psk))
    except (ValueError, OSError) as exc:
        raise StartupError(str(exc)) from None

    def transport(on_frames: FrameHandler) -> FabricTransport:
        return FabricTransport(
            bind_host=fabric.bind_host, port=fabric.port, keys=keys, on_frames=on_frames
        )

    agent = ClusterAgent(node, fabric, transport)
    try:
        await agent.start()
    except FabricBindError as exc:
        raise StartupError(f"{exc}; stop the other node or pass --fabric-port") from None
    discovery: MdnsDiscovery | None = None
    if mdns:
        # NOTE: zeroconf loads only where mDNS is on (issue 43).
        from zeroconf import InterfaceChoice  # noqa: PLC0415

        from skulk_daemon.fabric.discovery import (  # noqa: PLC0415
            DiscoveredPeer,
            MdnsDiscovery,
        )

        def found(peer: DiscoveredPeer) -> None:
            if peer.addresses:
                agent.dial_discovered(fabric_address(peer.addresses[0], peer.port))

        def departed(peer: DiscoveredPeer) -> None:
            if peer.addresses:
                agent.departed(fabric_address(peer.addresses[0], peer.port))

        # Announce the addresses the fabric is reachable on: all of them for a
        # wildcard bind, else just the one it is bound to.
        wildcard = fabric.bind_host in ("0.0.0.0", "::", "")
        discovery = MdnsDiscovery(
            node_id=node.node_id,
            fabric_port=agent.transport.port,
            version=SKULK_VERSION,
            on_peer=found,
            on_departed=departed,
            interfaces=InterfaceChoice.All if wildcard else [fabric.bind_host],
        )
        await discovery.start()
    return agent, discovery


async def _serve(
    settings: Settings,
    args: argparse.Namespace,
    guard: StopGuard,
    restart: RestartLatch | None = None,
    in_effect: tuple[EffectiveSetting, ...] = (),
) -> None:
    sock = bind_api_socket(settings.host, settings.api_port)
    try:
        authority = OperatorPairingService.open(settings.data_dir)
        listener = OperatorListener(authority, port=settings.operator_api_port)
        listener.bind_if_gateway()
    except (ListenerBindError, AuthorityError, OSError) as exc:
        sock.close()
        raise StartupError(str(exc)) from None
    node = await asyncio.to_thread(build_node, settings)
    node.config_store.in_effect = in_effect
    stop = asyncio.Event()
    source = telemetry_source(node)
    node.record_telemetry(await asyncio.to_thread(source.read))
    background: list[asyncio.Task[None]] = []
    worker = Supervisor(node)
    node.on_applied(worker.wake)
    repair = RepairAgent(node)
    keep_alive = KeepAliveAgent(node)
    try:
        agent, discovery = await _start_fabric(node, worker, settings, args)
    except BaseException:
        await keep_alive.close()
        node.close()
        sock.close()
        await listener.close()
        raise
    agent.remote.attach(worker)
    agent.speech.attach(worker)
    agent.images.attach(worker)
    worker.attach_remote(agent.remote)
    capabilities = CapabilityService(node, cluster=agent)
    agent.capabilities.attach(capabilities)
    source.gossip = capabilities.gossip
    services = Services.build(
        node,
        worker,
        cluster=agent,
        operator=authority,
        capabilities=capabilities,
        restart=restart,
    )
    # Installed extensions load here, before the app exists: a refused one is logged.
    builtins = builtin_providers(node, services, capabilities)
    extensions = ExtensionHost.open(node, services.embeddings, capabilities, builtins=builtins)
    services.chat.attach_hooks(extensions.chat)

    async def started() -> None:
        # NOTE: the API serves while the election settles (a second or more on a
        # new cluster): what needs a master (placement, tasks) waits for one itself.
        await node.start(wait=False)
        background.extend(run_node_loops(node, source, worker, stop))
        if services.steward is not None:
            services.steward.start()
        listener.start(app)
        log.info(
            "skulk node %s serving on http://%s:%d", node.node_id, settings.host, settings.api_port
        )
        log.info("event loop: %s", loop_name(asyncio.get_running_loop()))
        await extensions.start()

    async def stopping() -> None:
        # First: capability discovery closes, then the extensions' on_stop hooks.
        guard.step("the extensions' on_stop hooks")
        await extensions.stop()
        stop.set()
        guard.step("the operator listener to close")
        await listener.close()
        guard.step("the telemetry and worker loops to end")
        for task in background:
            await task
        guard.step("the repair agent to close")
        await repair.close()
        await keep_alive.close()
        if services.steward is not None:
            await services.steward.close()
        if services.on_demand is not None:
            await services.on_demand.close()
        guard.step("the runners to stop")
        await worker.shutdown()
        guard.step("the node's reports to reach the master")
        with contextlib.suppress(TimeoutError):
            # Reports need a master; one that has gone must not hang the shutdown.
            await asyncio.wait_for(node.flush_reports(), SHUTDOWN_FLUSH_SECONDS)
        if discovery is not None:
            guard.step("mDNS discovery to close")
            await discovery.close()
        guard.step("the fabric to close")
        await agent.close()
        guard.step("the HTTP server to finish")

    app = create_app(
        services,
        on_startup=[started],
        on_shutdown=[stopping],
    )
    server = _Server(
        uvicorn.Config(
            LargeBodyLimiter(app),
            http=BoundedH11Protocol,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=10,
            **UVICORN_LIMITS,
        )
    )
    loop = asyncio.get_running_loop()

    def request_stop(signame: str) -> None:
        # NOTE: a second signal exits inside signalled(); the first sets should_exit,
        # and the guard's deadline (a thread) bounds whatever the stop then awaits.
        if guard.signalled(signame):
            server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, request_stop, sig.name)
    if restart is not None:
        # POST /admin/restart stops the node as SIGTERM would; main() then re-executes.
        restart.attach(lambda: request_stop("a restart request"))
    try:
        await server.serve(sockets=[sock])
    finally:
        guard.step("the node to close")
        stop.set()
        await listener.close()
        node.close()
        sock.close()
        guard.step("the event loop's remaining tasks and threads")
    if not server.started:
        raise StartupError("the HTTP server failed to start; see the log above")
    if extensions.abandoned:
        # NOTE: asyncio.run would wait forever for a hook that swallows its cancellation;
        # everything of ours is closed, so leave without it.
        log.error(
            "on_stop of %s ignored cancellation; exiting without it",
            ", ".join(extensions.abandoned),
        )
        logging.shutdown()
        os._exit(0)


def start_logging(args: argparse.Namespace, settings: Settings) -> tuple[EffectiveSetting, ...]:
    """Log at the level in effect, to stderr and the data dir's log file; the settings
    this node starts with, each with its source (``GET /config`` shows them)."""
    try:
        config = load_config_file(settings.config_path)
    except ConfigError:
        config = SkulkConfig()  # build_node refuses the file with its message
    level = args.log_level or _env_log_level() or config.logging.level.value
    log_file = configure_logging(level, settings.data_dir, node_secrets(config))
    rows = in_effect(
        flags=StartFlags(
            host=args.host,
            api_port=args.api_port,
            operator_api_port=args.operator_api_port,
            data_dir=args.data_dir,
            models_dir=args.models_dir,
            config_home=args.config_home,
            fabric_port=args.fabric_port,
            peers=tuple(args.peer),
            no_mdns=args.no_mdns,
            log_level=args.log_level,
        ),
        settings=settings,
        config=config,
        log_level=level,
        log_file=None if log_file is None else str(log_file),
    )
    for row in rows:
        log.debug("in effect: %s = %s (%s)", row.key, row.value, row.source)
    return rows


def _env_log_level() -> str | None:
    raw = os.environ.get(LOG_LEVEL_ENV, "").strip().lower()
    if not raw:
        return None
    if raw not in {level.value for level in LogLevel}:
        choices = ", ".join(level.value for level in LogLevel)
        raise ValueError(f"{LOG_LEVEL_ENV} must be one of {choices}, got {raw!r}")
    return raw


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        settings = resolve_settings(
            host=args.host,
            api_port=args.api_port,
            config_home=args.config_home,
            data_dir=args.data_dir,
            models_dir=args.models_dir,
            operator_api_port=args.operator_api_port,
        )
        rows = start_logging(args, settings)
        guard = StopGuard()
        restart = RestartLatch()
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(_serve(settings, args, guard, restart, rows))
    except (StartupError, ValueError) as exc:
        print(f"skulk: {exc}", file=sys.stderr)
        return 1
    guard.done()
    log.info("stopped cleanly")
    if restart.requested:
        reexec()
    return 0


if __name__ == "__main__":
    sys.exit(main())


def _gib_bytes(gib: float | None) -> int | None:
    return None if gib is None else int(gib * 1024**3)
