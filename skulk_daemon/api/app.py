"""The Litestar application: controllers, the node dependency, errors, OpenAPI."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from litestar import Litestar
from litestar.config.cors import CORSConfig
from litestar.di import Provide
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import RedocRenderPlugin, SwaggerRenderPlugin

from skulk_core.version import SKULK_VERSION
from skulk_daemon.api import openapi
from skulk_daemon.api.auth import AuthController
from skulk_daemon.api.authority import AuthorityGuard, declare
from skulk_daemon.api.bench import BenchController
from skulk_daemon.api.browser_tools import BrowserToolsController
from skulk_daemon.api.capabilities import CapabilitiesController
from skulk_daemon.api.claude_messages import ClaudeMessagesController
from skulk_daemon.api.config import ConfigController
from skulk_daemon.api.diagnostics import DiagnosticsController
from skulk_daemon.api.embeddings import EmbeddingsController
from skulk_daemon.api.errors import EXCEPTION_HANDLERS
from skulk_daemon.api.images import ImagesController
from skulk_daemon.api.metrics import MetricsController
from skulk_daemon.api.models import ModelsController
from skulk_daemon.api.node import NodeController
from skulk_daemon.api.node_admin import NodeAdminController
from skulk_daemon.api.ollama import OllamaController
from skulk_daemon.api.openai_chat import OpenAIChatController
from skulk_daemon.api.placement import PlacementController
from skulk_daemon.api.responses import ResponsesController
from skulk_daemon.api.state import StateController
from skulk_daemon.api.traces import TracesController
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.node_admin.service import NodeAdminService
from skulk_daemon.services import Services
from skulk_daemon.telemetry.metrics import MetricsMiddleware

CONTROLLERS = [
    NodeController,
    NodeAdminController,
    StateController,
    ConfigController,
    ModelsController,
    OpenAIChatController,
    ResponsesController,
    ClaudeMessagesController,
    OllamaController,
    EmbeddingsController,
    BenchController,
    ImagesController,
    BrowserToolsController,
    PlacementController,
    DiagnosticsController,
    MetricsController,
    TracesController,
    AuthController,
    CapabilitiesController,
]


def create_app(
    services: Services,
    *,
    on_startup: Sequence[Callable[[], Any]] = (),
    on_shutdown: Sequence[Callable[[], Any]] = (),
) -> Litestar:
    """The API over ``services``: each controller's dependency is one of them."""

    def provider(value: object) -> Provide:
        return Provide(lambda: value, sync_to_thread=False)

    guard = AuthorityGuard(lambda: services.node.config)
    services.metrics.refusals = guard.refusals
    cors = services.node.config.api.cors_origins
    app = Litestar(
        route_handlers=CONTROLLERS,
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
            "placement": provider(services.placement),
            "diagnostics": provider(services.diagnostics),
            "metrics": provider(services.metrics),
            "traces": provider(services.traces),
            "cluster": provider(services.cluster),
            "authority": provider(services.operator),
            "capabilities": provider(services.capabilities),
            "admin": provider(services.admin or NodeAdminService(services.node)),
            "authority_guard": provider(guard),
        },
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        on_startup=list(on_startup),
        on_shutdown=list(on_shutdown),
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
    # The document is built once, here, so that a route it cannot describe fails the
    # start rather than the first client that asks for it.
    openapi.complete(app.openapi_schema)
    return app
