"""The Litestar application: controllers, the node dependency, errors, OpenAPI."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from litestar import Litestar
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import RedocRenderPlugin, SwaggerRenderPlugin

from skulk_core.version import SKULK_VERSION
from skulk_daemon.api.config import ConfigController
from skulk_daemon.api.errors import EXCEPTION_HANDLERS
from skulk_daemon.api.models import ModelsController
from skulk_daemon.api.node import NodeController
from skulk_daemon.api.state import StateController
from skulk_daemon.node import Node

CONTROLLERS = [NodeController, StateController, ConfigController, ModelsController]


def create_app(
    node: Node,
    *,
    on_startup: Sequence[Callable[[], Any]] = (),
    on_shutdown: Sequence[Callable[[], Any]] = (),
) -> Litestar:
    def provide_node() -> Node:
        return node

    return Litestar(
        route_handlers=CONTROLLERS,
        dependencies={"node": Provide(provide_node, sync_to_thread=False)},
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
