from __future__ import annotations

import pytest

from skulk_core.operator.scopes import (
    CHAT_WRITE,
    CLUSTER_READ,
    DEVICES_MANAGE,
    DIRECT_OWNER_ONLY,
    MODELS_READ,
    OPERATIONS_WRITE,
    PAIRED_SCOPES,
    required_scope,
)


def test_pairing_grants_the_five_canonical_scopes_and_no_plugin_scope() -> None:
    assert set(PAIRED_SCOPES) == {
        "cluster:read",
        "models:read",
        "chat:write",
        "operations:write",
        "devices:manage",
    }
    assert not [scope for scope in PAIRED_SCOPES if scope.startswith("plugins:")]
    assert DIRECT_OWNER_ONLY not in PAIRED_SCOPES


@pytest.mark.parametrize(
    ("method", "path", "scope"),
    [
        ("POST", "/v1/auth/pairing-sessions/challenge", None),
        ("POST", "/v1/auth/pairing-sessions/exchange", None),
        ("POST", "/v1/auth/token", None),
        ("GET", "/v1/auth/token", DIRECT_OWNER_ONLY),
        ("GET", "/v1/auth/devices", DEVICES_MANAGE),
        ("DELETE", "/v1/auth/devices/7d0e8b1c-0000-4000-8000-000000000000", DEVICES_MANAGE),
        ("POST", "/v1/auth/pairing-invitations", DIRECT_OWNER_ONLY),
        ("GET", "/v1/auth/pairing-invitations", DIRECT_OWNER_ONLY),
        ("GET", "/state", CLUSTER_READ),
        ("HEAD", "/node/identity", CLUSTER_READ),
        ("GET", "/v1/diagnostics/node", CLUSTER_READ),
        ("GET", "/v1/models", MODELS_READ),
        ("GET", "/models", MODELS_READ),
        ("GET", "/ollama/api/tags", MODELS_READ),
        ("POST", "/ollama/api/show", MODELS_READ),
        ("POST", "/v1/chat/completions", CHAT_WRITE),
        ("POST", "/v1/responses", CHAT_WRITE),
        ("POST", "/v1/messages", CHAT_WRITE),
        ("POST", "/v1/embeddings", CHAT_WRITE),
        ("POST", "/ollama/api/chat", CHAT_WRITE),
        ("POST", "/ollama/api/v1/generate", CHAT_WRITE),
        ("POST", "/bench/chat/completions", CHAT_WRITE),
        ("POST", "/v1/cancel/abc", CHAT_WRITE),
        ("GET", "/v1/realtime", CHAT_WRITE),
        ("POST", "/place_instance", OPERATIONS_WRITE),
        ("DELETE", "/instance/abc", OPERATIONS_WRITE),
        ("PUT", "/config", OPERATIONS_WRITE),
        ("POST", "/some/future/route", OPERATIONS_WRITE),
        ("post", "/v1/chat/completions/", CHAT_WRITE),
        ("GET", "/state?x=1", CLUSTER_READ),
    ],
)
def test_required_scope(method: str, path: str, scope: str | None) -> None:
    assert required_scope(method, path) == scope


def test_only_the_three_pre_auth_routes_need_no_scope() -> None:
    paths = ["/", "/state", "/v1/auth", "/v1/auth/pairing-sessions", "/v1/auth/token/x"]
    for method in ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"):
        for path in paths:
            assert required_scope(method, path) is not None
