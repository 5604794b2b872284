"""Every route declares the authority it needs; the mutations the spec names get theirs."""

from __future__ import annotations

import warnings

import pytest
from litestar import Litestar
from litestar.di import Provide
from litestar.handlers import HTTPRouteHandler, WebsocketRouteHandler

from skulk_daemon.api.app import CONTROLLERS
from skulk_daemon.api.authority import route_authority
from skulk_daemon.api.realtime import REALTIME_HANDLERS
from skulk_daemon.authority.policy import Requirement


def _routes() -> dict[tuple[str, str], HTTPRouteHandler | WebsocketRouteHandler]:
    # The bare route table: no guard, no app default, so only declarations count.
    services = ("node", "chat", "embeddings", "placement", "cluster", "authority")
    with warnings.catch_warnings():
        # Litestar 2.25 deprecates inferred dependencies (what create_app relies on too).
        warnings.simplefilter("ignore", DeprecationWarning)
        app = Litestar(
            route_handlers=[*CONTROLLERS, *REALTIME_HANDLERS],
            openapi_config=None,
            dependencies={
                name: Provide(lambda: None, sync_to_thread=False)
                for name in (*services, "capabilities", "authority_guard")
            },
        )
    table: dict[tuple[str, str], HTTPRouteHandler | WebsocketRouteHandler] = {}
    for route in app.routes:
        for handler in getattr(route, "route_handlers", ()):
            if isinstance(handler, HTTPRouteHandler):
                for method in handler.http_methods:
                    table[(method, route.path)] = handler
        if isinstance(getattr(route, "route_handler", None), WebsocketRouteHandler):
            table[("WS", route.path)] = route.route_handler
    return table


def test_every_route_declares_its_authority() -> None:
    routes = _routes()
    assert len(routes) > 40
    undeclared = sorted(key for key, handler in routes.items() if route_authority(handler) is None)
    assert undeclared == []


@pytest.mark.parametrize(
    ("method", "path", "requirement"),
    [
        ("PUT", "/config", Requirement.TRUSTED_FABRIC),
        ("POST", "/place_instance", Requirement.TRUSTED_FABRIC),
        ("POST", "/instance", Requirement.TRUSTED_FABRIC),
        ("DELETE", "/instance/{instance_id:str}", Requirement.TRUSTED_FABRIC),
        ("DELETE", "/models/custom/{model_id:path}", Requirement.TRUSTED_FABRIC),
        ("POST", "/onboarding", Requirement.TRUSTED_FABRIC),
        ("GET", "/events", Requirement.TRUSTED_FABRIC),
        ("POST", "/models/add-card", Requirement.DIRECT_LOOPBACK),
        ("POST", "/models/add", Requirement.TRUSTED_FABRIC),
        ("POST", "/models/import", Requirement.DIRECT_LOOPBACK),
        ("POST", "/download/start", Requirement.TRUSTED_FABRIC),
        ("DELETE", "/download/{node_id:str}/{model_id:path}", Requirement.TRUSTED_FABRIC),
        ("GET", "/models/search", Requirement.OPEN),
        ("GET", "/store/registry", Requirement.OPEN),
        ("GET", "/store/models/{rest:path}", Requirement.OPEN),
        ("POST", "/store/models/{rest:path}", Requirement.TRUSTED_FABRIC),
        ("DELETE", "/store/models/{rest:path}", Requirement.TRUSTED_FABRIC),
        ("POST", "/v1/capabilities/stream", Requirement.TRUSTED_FABRIC),
        ("GET", "/state", Requirement.OPEN),
        ("POST", "/v1/chat/completions", Requirement.OPEN),
        ("POST", "/v1/completions", Requirement.OPEN),
        ("POST", "/v1/auth/pairing-sessions/challenge", Requirement.PAIRING),
        ("GET", "/v1/plugins", Requirement.DIRECT_LOOPBACK),
        ("GET", "/v1/plugins/managed", Requirement.DIRECT_LOOPBACK),
        (
            "POST",
            "/v1/plugins/managed/installations/{plugin_id:str}/operations",
            Requirement.DIRECT_LOOPBACK,
        ),
        ("POST", "/v1/plugins/managed/catalog/source", Requirement.DIRECT_LOOPBACK),
        ("PUT", "/v1/auth/plugin-grants/{device_id:str}", Requirement.PAIRING),
        ("WS", "/v1/realtime", Requirement.OPEN),
        ("WS", "/v1/fabric/chains/speech", Requirement.OPEN),
    ],
)
def test_the_spec_classes_are_declared(method: str, path: str, requirement: Requirement) -> None:
    declared = route_authority(_routes()[(method, path)])
    assert declared is not None
    assert declared.requirement is requirement


def test_only_the_exact_card_routes_take_the_service_bearer() -> None:
    takes = sorted(
        key
        for key, handler in _routes().items()
        if (declared := route_authority(handler)) is not None and declared.service_bearer
    )
    assert takes == [("DELETE", "/models/custom/{model_id:path}"), ("POST", "/models/add-card")]
