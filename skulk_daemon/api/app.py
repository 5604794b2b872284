"""The Litestar application: controllers, the node dependency, errors, OpenAPI."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from litestar import Litestar
from litestar.config.cors import CORSConfig
from litestar.di import Provide
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import RedocRenderPlugin, SwaggerRenderPlugin

from skulk_core.version import SKULK_VERSION
from skulk_daemon.api import openapi
from skulk_daemon.api.audio import AudioController
from skulk_daemon.api.auth import AuthController
from skulk_daemon.api.authority import AuthorityGuard, declare
from skulk_daemon.api.bench import BenchController
from skulk_daemon.api.browser_tools import BrowserToolsController
from skulk_daemon.api.capabilities import CapabilitiesController
from skulk_daemon.api.claude_messages import ClaudeMessagesController
from skulk_daemon.api.config import ConfigController
from skulk_daemon.api.dashboard import DashboardController
from skulk_daemon.api.diagnostics import DiagnosticsController
from skulk_daemon.api.embeddings import EmbeddingsController
from skulk_daemon.api.errors import EXCEPTION_HANDLERS
from skulk_daemon.api.host_network import HostNetworkController
from skulk_daemon.api.hub import HubController
from skulk_daemon.api.images import ImagesController
from skulk_daemon.api.lean_litestar import LeanLitestar
from skulk_daemon.api.metrics import MetricsController
from skulk_daemon.api.models import ModelsController
from skulk_daemon.api.music import MusicController
from skulk_daemon.api.node import NodeController
from skulk_daemon.api.node_admin import NodeAdminController
from skulk_daemon.api.ollama import OllamaController
from skulk_daemon.api.openai_chat import OpenAIChatController
from skulk_daemon.api.openai_completions import OpenAICompletionsController
from skulk_daemon.api.placement import PlacementController
from skulk_daemon.api.plugin_grants import PluginGrantsController
from skulk_daemon.api.plugin_nodes import PluginNodesController
from skulk_daemon.api.plugin_releases import PluginReleasesController
from skulk_daemon.api.plugins import PluginsController
from skulk_daemon.api.realtime import REALTIME_HANDLERS
from skulk_daemon.api.registry import RegistryController
from skulk_daemon.api.responses import ResponsesController
from skulk_daemon.api.state import StateController
from skulk_daemon.api.steward import StewardController
from skulk_daemon.api.store import StoreController
from skulk_daemon.api.traces import TracesController
from skulk_daemon.api.videos import VideosController
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.hub.service import HubService
from skulk_daemon.node_admin.service import NodeAdminService
from skulk_daemon.placement.idle_clocks import IdleClocks
from skulk_daemon.plugins.access import ManagerAccess
from skulk_daemon.plugins.configuration import NodeConfigurations
from skulk_daemon.plugins.owners.adapter import ManagedOwners
from skulk_daemon.registry.client import RegistryClient
from skulk_daemon.services import Services
from skulk_daemon.store.service import StoreService
from skulk_daemon.telemetry.metrics import MetricsMiddleware

CONTROLLERS = [
    NodeController,
    NodeAdminController,
    StateController,
    ConfigController,
    ModelsController,
    HubController,
    OpenAIChatController,
    OpenAICompletionsController,
    ResponsesController,
    ClaudeMessagesController,
    OllamaController,
    EmbeddingsController,
    AudioController,
    BenchController,
    ImagesController,
    BrowserToolsController,
    PlacementController,
    DiagnosticsController,
    MetricsController,
    TracesController,
    AuthController,
    CapabilitiesController,
    RegistryController,
    PluginsController,
    PluginReleasesController,
    PluginNodesController,
    PluginGrantsController,
    HostNetworkController,
    StoreController,
    StewardController,
    DashboardController,
    VideosController,
    MusicController,
]


def create_app(
    services: Services,
    *,
    on_startup: Sequence[Callable[[], object]] = (),
    on_shutdown: Sequence[Callable[[], object]] = (),
) -> Litestar:
    """The API over ``services``: each controller's dependency is one of them."""

    def provider(value: object) -> Provide:
        return Provide(lambda: value, sync_to_thread=False)

    registry = services.registry
    if registry is None:
        registry = RegistryClient(
            lambda: services.node.config.registry, services.node.settings.data_dir
        )
        services.node.registry_catalog = registry.current
    # The registry's refresh loop lives as long as the app serves.
    registry_stop = asyncio.Event()
    registry_loop: list[asyncio.Task[None]] = []

    async def start_registry() -> None:
        registry_loop.append(asyncio.create_task(registry.run(registry_stop)))

    async def stop_registry() -> None:
        # NOTE: a refresh in flight is a thread blocked on the network for at most its
        # timeouts; the stop does not wait for it (its result is simply not used).
        registry_stop.set()
        for task in registry_loop:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    hub = services.hub or HubService(services.node)
    # The store host's internal transport lives as long as the app serves.
    store = services.store or StoreService(services.node, hub)

    # Managed plugin owners: observed while the app serves; their capabilities join the
    # node's fabric and their nodes the configuration routes.
    plugins = services.plugins or ManagerAccess(services.node.settings.config_home)
    owners = ManagedOwners(plugins, services.capabilities)
    configurations = NodeConfigurations.for_node(services.node)
    configurations.attach_owners(owners)

    media = services.media
    assert media is not None, "Services.build makes the media job services"
    guard = AuthorityGuard(lambda: services.node.config)
    services.metrics.refusals = guard.refusals
    cors = services.node.config.api.cors_origins
    app = LeanLitestar(
        route_handlers=[*CONTROLLERS, *REALTIME_HANDLERS],
        # NOTE: one guard on every route: each controller (or route) declares what it
        # requires; the app's default covers only Litestar's own documentation routes.
        guards=[guard],
        middleware=[DefineMiddleware(MetricsMiddleware, metrics=services.metrics)],
        opt=declare(Requirement.OPEN),
        cors_config=CORSConfig(allow_origins=list(cors)) if cors else None,
        dependencies={
            "node": provider(services.node),
            "chat": provider(services.chat),
            "embeddings": provider(services.embeddings),
            "speech": provider(services.speech),
            "images": provider(services.images),
            "placement": provider(services.placement),
            "diagnostics": provider(services.diagnostics),
            "metrics": provider(services.metrics),
            "traces": provider(services.traces),
            "cluster": provider(services.cluster),
            "authority": provider(services.operator),
            "capabilities": provider(services.capabilities),
            "admin": provider(services.admin or NodeAdminService(services.node)),
            "authority_guard": provider(guard),
            "hub": provider(hub),
            "store": provider(store),
            "registry": provider(registry),
            "plugins": provider(plugins),
            "configurations": provider(configurations),
            "videos": provider(media.videos),
            "music_jobs": provider(media.music),
            "steward": provider(services.steward),
            "idle_clocks": provider(services.idle_clocks or IdleClocks(services.node)),
        },
        exception_handlers=EXCEPTION_HANDLERS,
        on_startup=[*on_startup, start_registry, store.start, owners.start, media.start],
        on_shutdown=[owners.stop, stop_registry, store.stop, media.stop, *on_shutdown],
        # The daemon configures logging once (serve.py); Litestar must not add its own.
        logging_config=None,
        openapi_config=OpenAPIConfig(
            title="Skulk",
            version=SKULK_VERSION,
            description="One HTTP API for a cluster of Skulk nodes.",
            path="/api",
            render_plugins=[
                SwaggerRenderPlugin(path="/docs"),
                RedocRenderPlugin(path="/redoc"),
            ],
        ),
    )
    openapi.complete_when_built(app)
    return app
