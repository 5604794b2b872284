"""Canonical operator API scopes and which one each route needs on the operator listener."""

from __future__ import annotations

from typing import Final

CLUSTER_READ: Final = "cluster:read"
MODELS_READ: Final = "models:read"
CHAT_WRITE: Final = "chat:write"
OPERATIONS_WRITE: Final = "operations:write"
DEVICES_MANAGE: Final = "devices:manage"

# A scope no credential ever holds: routes that only the direct-owner dashboard may use
# (invitation management) are "explicitly unavailable through" the operator listener,
# "even to a valid fully scoped device", so the bearer guard answers 403 for them.
DIRECT_OWNER_ONLY: Final = "direct-owner"

# What a successful pairing grants. Plugin scopes (plugins:read/manage/approve) are never
# granted by pairing; the owner grants them separately.
PAIRED_SCOPES: Final[tuple[str, ...]] = (
    CLUSTER_READ,
    MODELS_READ,
    CHAT_WRITE,
    OPERATIONS_WRITE,
    DEVICES_MANAGE,
)

# The complete pre-access-token surface (spec: "Together with refresh rotation, these are
# the complete pre-access-token HTTP surface").
PRE_AUTH_ROUTES: Final = frozenset(
    {
        ("POST", "/v1/auth/pairing-sessions/challenge"),
        ("POST", "/v1/auth/pairing-sessions/exchange"),
        ("POST", "/v1/auth/token"),
    }
)

_SAFE_METHODS = frozenset({"GET", "HEAD"})
_OLLAMA_PREFIXES = ("/ollama/api/v1/", "/ollama/api/api/", "/ollama/api/")
_OLLAMA_INFERENCE = frozenset({"chat", "generate", "embed", "embeddings"})
_OLLAMA_MODEL_READS = frozenset({"tags", "show", "ps"})
_INFERENCE_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/embeddings",
        "/v1/images/generations",
        "/v1/images/edits",
        "/v1/audio/transcriptions",
        "/v1/audio/speech",
        "/v1/realtime",
    }
)
_INFERENCE_PREFIXES = ("/bench/", "/v1/cancel/", "/v1/responses/")
_MODEL_READ_PATHS = frozenset({"/v1/models", "/models"})
_MODEL_READ_PREFIXES = ("/v1/models/", "/models/")


def _normalize(path: str) -> str:
    path = path.split("?", 1)[0].split("#", 1)[0] or "/"
    if len(path) > 1:
        path = path.rstrip("/") or "/"
    return path


def _ollama_endpoint(path: str) -> str | None:
    for prefix in _OLLAMA_PREFIXES:
        if path.startswith(prefix):
            return path[len(prefix) :]
    return None


def required_scope(method: str, path: str) -> str | None:
    """The scope a bearer needs for ``method path``; ``None`` for the pre-auth routes.

    Safe reads need ``cluster:read`` (model listings ``models:read``); inference,
    cancellation and WebSocket-style routes ``chat:write``; ``/v1/auth/devices*``
    ``devices:manage``; invitation management is direct-owner only; every other
    mutation ``operations:write``. Unknown routes fall through to the strictest
    applicable rule for their method, never to "no scope".
    """
    method = method.upper()
    path = _normalize(path)
    if (method, path) in PRE_AUTH_ROUTES:
        return None
    if path == "/v1/auth/devices" or path.startswith("/v1/auth/devices/"):
        return DEVICES_MANAGE
    if path.startswith("/v1/auth/"):
        return DIRECT_OWNER_ONLY
    endpoint = _ollama_endpoint(path + "/" if path == "/ollama/api" else path)
    if endpoint is not None:
        if endpoint in _OLLAMA_INFERENCE:
            return CHAT_WRITE
        if endpoint in _OLLAMA_MODEL_READS:
            return MODELS_READ
    if path in _INFERENCE_PATHS or path.startswith(_INFERENCE_PREFIXES):
        if method in _SAFE_METHODS and path.startswith("/v1/responses/"):
            return CLUSTER_READ
        return CHAT_WRITE
    if method in _SAFE_METHODS:
        if path in _MODEL_READ_PATHS or path.startswith(_MODEL_READ_PREFIXES):
            return MODELS_READ
        return CLUSTER_READ
    return OPERATIONS_WRITE
