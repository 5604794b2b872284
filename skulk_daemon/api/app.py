"""The Litestar application: controllers, the node dependency, errors, OpenAPI."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from litestar import Litestar
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import RedocRenderPlugin, SwaggerRenderPlugin

from skulk_core.version import SKULK_VERSION
from skulk_daemon.api.auth import AuthController
from skulk_daemon.api.bench import BenchController
from skulk_daemon.api.browser_tools import BrowserToolsController
from skulk_daemon.api.capabilities import CapabilitiesController
from skulk_daemon.api.claude_messages import ClaudeMessagesController
from skulk_daemon.api.config import ConfigController
from skulk_daemon.api.diagnostics import DiagnosticsController
from skulk_daemon.api.embeddings import EmbeddingsController
from skulk_daemon.api.errors import EXCEPTION_HANDLERS
from skulk_daemon.api.images import ImagesController
from skulk_daemon.api.models import ModelsController
from skulk_daemon.api.node import NodeController
from skulk_daemon.api.ollama import OllamaController
from skulk_daemon.api.openai_chat import OpenAIChatController
from skulk_daemon.api.placement import PlacementController
from skulk_daemon.api.responses import ResponsesController
from skulk_daemon.api.state import StateController
from skulk_daemon.capabilities.fabric import CapabilityFabric
from skulk_daemon.chat.commands import ActiveCommands
from skulk_daemon.extensions.middleware import ChatMiddlewareRunner
from skulk_daemon.fabric.cluster import ClusterAgent
from skulk_daemon.node import Node
from skulk_daemon.operator.service import OperatorPairingService
from skulk_daemon.worker.supervisor import Supervisor

CONTROLLERS = [
    NodeController,
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
    AuthController,
    CapabilitiesController,
]


def create_app(
    node: Node,
    worker: Supervisor,
    *,
    cluster: ClusterAgent | None = None,
    operator: OperatorPairingService | None = None,
    capabilities: CapabilityFabric | None = None,
    chat_middleware: ChatMiddlewareRunner | None = None,
    on_startup: Sequence[Callable[[], Any]] = (),
    on_shutdown: Sequence[Callable[[], Any]] = (),
) -> Litestar:
    commands = ActiveCommands()
    # No extensions loaded: an inert runner, and the chat path is the plain pipeline.
    middleware = chat_middleware if chat_middleware is not None else ChatMiddlewareRunner()

    def provide_node() -> Node:
        return node

    def provide_worker() -> Supervisor:
        return worker

    def provide_commands() -> ActiveCommands:
        return commands

    def provide_cluster() -> ClusterAgent | None:
        return cluster

    def provide_authority() -> OperatorPairingService | None:
        return operator

    def provide_capabilities() -> CapabilityFabric | None:
        return capabilities

    def provide_chat_middleware() -> ChatMiddlewareRunner:
        return middleware

    return Litestar(
        route_handlers=CONTROLLERS,
        dependencies={
            "node": Provide(provide_node, sync_to_thread=False),
            "worker": Provide(provide_worker, sync_to_thread=False),
            "commands": Provide(provide_commands, sync_to_thread=False),
            "cluster": Provide(provide_cluster, sync_to_thread=False),
            "authority": Provide(provide_authority, sync_to_thread=False),
            "capabilities": Provide(provide_capabilities, sync_to_thread=False),
            "chat_middleware": Provide(provide_chat_middleware, sync_to_thread=False),
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
