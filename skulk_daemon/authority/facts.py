"""What a request shows the policy, read from its raw ASGI scope.

Framework-free, so that every listener that applies the one policy (the API port's
Litestar guard, the store port's) reads a request the same way.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping

from skulk_core.config import SkulkConfig
from skulk_daemon.authority.hosts import OwnNames
from skulk_daemon.authority.peers import (
    classify,
    classify_name,
    forwarding_header,
    origin_host,
    origin_port,
    split_host,
)
from skulk_daemon.authority.policy import RequestFacts


def _headers(scope: Mapping[str, object]) -> list[tuple[str, str]]:
    raw = scope.get("headers", [])
    pairs = raw if isinstance(raw, list | tuple) else []
    return [(bytes(k).decode("latin-1").lower(), bytes(v).decode("latin-1")) for k, v in pairs]


def _values(headers: list[tuple[str, str]], name: str) -> list[str]:
    return [value for key, value in headers if key == name]


def _presented_secrets(headers: list[tuple[str, str]]) -> list[str]:
    """Credentials a client may send an API key in: OpenAI's ``Authorization: Bearer``,
    Anthropic's ``x-api-key``."""
    found = [value.strip() for value in _values(headers, "x-api-key")]
    for value in _values(headers, "authorization"):
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            found.append(token.strip())
    return found


def matches(presented: list[str], secrets: Iterable[str]) -> bool:
    # NOTE: every pair is compared (no early exit on the first miss), in constant time.
    hit = False
    for secret in secrets:
        for value in presented:
            hit |= hmac.compare_digest(value.encode(), secret.encode())
    return hit


def request_facts(
    scope: Mapping[str, object],
    *,
    config: SkulkConfig,
    names: OwnNames,
    api_keys: tuple[str, ...] = (),
    service_token: str | None = None,
    operator: bool = False,
) -> RequestFacts:
    """The facts of the request ``scope`` describes; ``operator`` says whether the
    operator listener admitted it."""
    headers = _headers(scope)
    configured = config.api.hostnames
    hosts = _values(headers, "host")
    host = split_host(hosts[0]) if len(hosts) == 1 else None
    origins = _values(headers, "origin")
    origin = origins[0].strip() if origins else None
    named = origin_host(origin) if origin is not None else None
    client = scope.get("client")
    address = client[0] if isinstance(client, list | tuple) and client else None
    content_types = _values(headers, "content-type")
    content_type = content_types[0] if content_types else None
    lengths = _values(headers, "content-length")
    has_body = bool(_values(headers, "transfer-encoding")) or any(
        value.strip() not in ("", "0") for value in lengths
    )
    presented = _presented_secrets(headers)
    return RequestFacts(
        method=str(scope.get("method", "GET")).upper(),
        peer=classify(address),
        forwarded=forwarding_header([name for name, _ in headers]),
        host=host,
        host_is_own=host is not None and names.is_own(host, configured),
        origin=origin,
        origin_is_own=named is not None
        and names.is_own(named, configured)
        and _same_port(origin, scope),
        origin_class=classify_name(named),
        origin_allowed=origin is not None
        and origin.lower().rstrip("/") in {o.lower().rstrip("/") for o in config.api.cors_origins},
        content_type=content_type.split(";", 1)[0].strip().lower() if content_type else None,
        has_body=has_body,
        operator=operator,
        api_keys_configured=bool(api_keys),
        api_key_valid=bool(api_keys) and matches(presented, api_keys),
        service_bearer=service_token is not None and matches(presented, [service_token]),
        websocket=str(scope.get("type")) == "websocket",
    )


def _same_port(origin: str | None, scope: Mapping[str, object]) -> bool:
    """Whether ``origin`` names the port this request arrived on: a page this node
    serves has exactly that origin, while another port on the same host (any local
    web server) is another site."""
    server = scope.get("server")
    if origin is None or not isinstance(server, list | tuple) or len(server) < 2:
        return False
    if server[1] is None:
        return False
    return origin_port(origin) == int(server[1])
