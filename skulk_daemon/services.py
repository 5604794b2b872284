"""The node's services, built once and handed to the HTTP layer as its dependencies.

Controllers take one service each (``chat``, ``embeddings``, ``placement``, ...); this is
where they are made, sharing one registry of cancellable commands so
``POST /v1/cancel/{command_id}`` reaches chats and embeddings alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from skulk_core.ids import NodeId
from skulk_daemon.capabilities.service import CapabilityService
from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.chat.hooks import NO_HOOKS, ChatHooks
from skulk_daemon.chat.service import ChatService
from skulk_daemon.diagnostics.otlp import OtlpExport
from skulk_daemon.diagnostics.service import DiagnosticsService
from skulk_daemon.diagnostics.trace_service import TraceService
from skulk_daemon.diagnostics.tracing import MasterTraces, Tracer, TraceStore
from skulk_daemon.embeddings.service import EmbeddingService
from skulk_daemon.fabric.cluster import ClusterAgent
from skulk_daemon.hub.service import HubService
from skulk_daemon.images.service import ImageService
from skulk_daemon.images.store import ImageStore
from skulk_daemon.media.services import MediaServices
from skulk_daemon.node.node import Node
from skulk_daemon.node_admin.restart import RestartLatch
from skulk_daemon.node_admin.service import NodeAdminService
from skulk_daemon.node_admin.tailscale import TailscaleProbe
from skulk_daemon.operator.service import OperatorPairingService
from skulk_daemon.placement.idle_clocks import IdleClocks
from skulk_daemon.placement.on_demand import OnDemandLoader
from skulk_daemon.placement.service import PlacementService
from skulk_daemon.plugins.access import ManagerAccess
from skulk_daemon.registry.client import RegistryClient
from skulk_daemon.speech.realtime_provider import register_realtime
from skulk_daemon.speech.service import SpeechService
from skulk_daemon.steward.service import StewardService
from skulk_daemon.store.service import StoreService
from skulk_daemon.telemetry.field_queue import FieldQueue
from skulk_daemon.telemetry.metrics import NodeMetrics
from skulk_daemon.worker.supervisor import Supervisor


@dataclass(frozen=True, slots=True)
class Services:
    node: Node
    chat: ChatService
    embeddings: EmbeddingService
    placement: PlacementService
    diagnostics: DiagnosticsService
    metrics: NodeMetrics
    traces: TraceService
    on_demand: OnDemandLoader | None = None
    cluster: ClusterAgent | None = None
    operator: OperatorPairingService | None = None
    capabilities: CapabilityService | None = None
    admin: NodeAdminService | None = None
    speech: SpeechService | None = None
    registry: RegistryClient | None = None
    hub: HubService | None = None
    plugins: ManagerAccess | None = None
    store: StoreService | None = None
    media: MediaServices | None = None
    steward: StewardService | None = None
    images: ImageService | None = None
    idle_clocks: IdleClocks | None = None

    @classmethod
    def build(
        cls,
        node: Node,
        worker: Supervisor,
        *,
        hooks: ChatHooks = NO_HOOKS,
        cluster: ClusterAgent | None = None,
        operator: OperatorPairingService | None = None,
        capabilities: CapabilityService | None = None,
        restart: RestartLatch | None = None,
    ) -> Services:
        """Every service of one node; the chat service calls ``hooks`` on every turn
        (extensions attach theirs later, once they have loaded). ``restart`` is the
        latch ``serve.py`` re-executes the process on; without it a restart is refused."""
        commands = ActiveCommands()
        otlp = OtlpExport(node.node_id, lambda: node.config.tracing.otlp_endpoint)
        store = TraceStore(node.settings.data_dir, node.node_id, exported=otlp.export)
        worker.tracer = Tracer(store)
        node.on_ordered(MasterTraces(store).ordered)
        # The signed catalog: the node merges whatever verified catalog is usable.
        registry = RegistryClient(lambda: node.config.registry, node.settings.data_dir)
        node.registry_catalog = registry.current
        placement = PlacementService(node)
        # Inference requests place an unplaced model first when the config says so.
        on_demand = OnDemandLoader(node, placement)
        embeddings = EmbeddingService(node, worker, commands, on_demand)
        chat = ChatService(
            node,
            worker,
            commands=commands,
            hooks=hooks,
            on_demand=on_demand,
        )
        hub = HubService(node)
        worker.attach_downloads(hub.downloads)  # placement stages missing bytes
        # One probe for the connectivity routes and the diagnostics bundle: one cache.
        tailscale = TailscaleProbe()
        diagnostics = DiagnosticsService(
            node, worker, cluster=cluster, capabilities=capabilities, tailscale=tailscale
        )

        async def cancel_download(node_id: NodeId, model_id: str, attempt_id: str) -> None:
            # The worker repeats the attempt check: a retry since approval is not cancelled.
            if node_id == node.node_id:
                await hub.cancel_download(node_id, model_id, attempt_id)
            else:
                path = f"/download/{node_id}/{model_id}"
                await hub.forward(node_id, "DELETE", path, None, {"attempt_id": attempt_id})

        steward = StewardService(node, worker, commands, diagnostics, cancel_download)
        chat.attach_steward(steward)
        if capabilities is not None:
            register_realtime(node, worker, commands, capabilities)
        field_queue = FieldQueue(node)
        worker.generation_listeners.append(field_queue.generation_ended)
        return cls(
            node=node,
            chat=chat,
            embeddings=embeddings,
            placement=placement,
            on_demand=on_demand,
            diagnostics=diagnostics,
            metrics=NodeMetrics(node, worker, cluster),
            traces=TraceService(node, store),
            cluster=cluster,
            operator=operator,
            capabilities=capabilities,
            admin=NodeAdminService(
                node, restart=restart, tailscale=tailscale, field_queue=field_queue
            ),
            speech=SpeechService(
                node, worker, commands, remote=cluster.speech if cluster is not None else None
            ),
            registry=registry,
            hub=hub,
            plugins=ManagerAccess(node.settings.config_home),
            store=StoreService(node, hub),
            media=MediaServices.build(node, worker, commands),
            steward=steward,
            images=ImageService(
                node,
                worker,
                commands,
                ImageStore(node.settings.data_dir / "images"),
                remote=cluster.images if cluster is not None else None,
            ),
            idle_clocks=IdleClocks(node),
        )
