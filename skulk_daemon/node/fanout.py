"""Asking other nodes' APIs, fail-fast: the diagnostics sweeps, the hub and admin proxies.

Each topology member advertises its API URLs in telemetry. One attempt per URL
with a short timeout, all members at once: one unroutable address cannot stall the
sweep, and a member no URL answers for is an explicit ``ok: false`` entry.

A member's answer is bounded as a whole, not per read: it must be complete within the
budget (a server dripping a byte a second never trips a per-read timeout) and at most
:data:`MAX_ANSWER_BYTES`; a ``200`` that is not JSON is no answer. Redirects are never
followed, so the API key goes only to the URLs a member advertises.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from skulk_core.ids import NodeId
from skulk_daemon.node.node import Node

if TYPE_CHECKING:
    import httpx

PROBE_TIMEOUT_SECONDS: Final = 3.0
# A proxied capture may sample processes for up to its own bound.
CAPTURE_TIMEOUT_SECONDS: Final = 20.0
NO_ROUTE: Final = "no reachable API route"
_SEGMENT: Final = re.compile(r"[A-Za-z0-9._~:@+-]+")
"""What one segment of a forwarded path may hold: ids and model names, never an
escape, a query or fragment mark, or a separator of its own."""


class UnsafePath(ValueError):
    """A path a proxy must not forward; the message is safe to show a user."""


def checked_path(path: str) -> str:
    """``path``, when it is a plain absolute path whose every segment names something
    (no ``.``/``..``, empty segments, ``?``, ``#``, ``%`` escapes or backslashes).

    The paths forwarded here are built from ids a caller supplies (a runner id, a model
    id), and the request carries this node's API key: one that could walk out of its
    route would spend that key on another route of the peer.
    """
    segments = path.split("/")
    if segments[0] != "" or len(segments) < 2:
        raise UnsafePath("a forwarded path must be absolute")
    for segment in segments[1:]:
        if segment in (".", "..") or not _SEGMENT.fullmatch(segment):
            raise UnsafePath(
                f"{segment!r} is not a valid id: ids hold letters, digits and . _ ~ : @ + -"
            )
    return path


MAX_ANSWER_BYTES: Final = 16 * 1024 * 1024
"""The most a member's answer may hold (a diagnostics bundle is far smaller)."""


class _Unusable(Exception):
    """An answer that came, but is not one: too large, or a 200 that is not JSON."""


@dataclass(frozen=True, slots=True)
class PeerAnswer:
    node_id: NodeId
    status: int | None
    body: Any
    url: str | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


def api_urls(node: Node, node_id: NodeId) -> tuple[str, ...]:
    """Where ``node_id``'s API may be asked from here. A loopback URL names the machine
    that reads it, so another machine's (an old node's, or one bound to loopback) would
    reach this machine's own API: it is kept only for a member on this same machine."""
    telemetry = node.view().telemetry
    reading = telemetry.get(node_id)
    if reading is None:
        return ()
    own = telemetry.get(node.node_id)
    same_machine = own is not None and own.system.hostname == reading.system.hostname
    return tuple(
        url for url in reading.resources.api_urls if same_machine or not is_loopback_url(url)
    )


def is_loopback_url(url: str) -> bool:
    """Whether ``url`` names the loopback of the machine that reads it."""
    import httpx  # noqa: PLC0415 (httpx loads where a peer is asked: issue 43)

    host = httpx.URL(url).host
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _headers(node: Node) -> dict[str, str]:
    keys = [*node.config.api.keys, *os.environ.get("SKULK_API_KEYS", "").split(",")]
    key = next((k.strip() for k in keys if k.strip()), None)
    headers = {"Accept": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return headers


async def ask(
    node: Node,
    node_id: NodeId,
    method: str,
    path: str,
    *,
    body: object = None,
    params: Mapping[str, str] | None = None,
    budget_seconds: float = PROBE_TIMEOUT_SECONDS,
) -> PeerAnswer:
    """``method path`` on ``node_id``'s API: the first advertised URL that answers.
    Raises :class:`UnsafePath` (nothing is sent) for a path :func:`checked_path` refuses;
    a query goes in ``params`` (encoded by the client), never in ``path``."""
    import httpx  # noqa: PLC0415 (httpx loads where a peer is asked: issue 43)

    checked_path(path)
    urls = api_urls(node, node_id)
    if not urls:
        return PeerAnswer(node_id, None, None, None, f"{NO_ROUTE} (none advertised)")
    errors: list[str] = []
    async with httpx.AsyncClient(
        timeout=budget_seconds, headers=_headers(node), follow_redirects=False
    ) as client:
        for url in urls:
            try:
                # NOTE: httpx's timeout bounds each read, not the answer; this bounds it.
                async with asyncio.timeout(budget_seconds):
                    status, parsed = await _exchange(client, method, f"{url}{path}", body, params)
            except httpx.HTTPError as exc:
                errors.append(f"{url}: {type(exc).__name__}")
                continue
            except TimeoutError:
                errors.append(f"{url}: no complete answer within {budget_seconds:g}s")
                continue
            except _Unusable as exc:
                errors.append(f"{url}: {exc}")
                continue
            return PeerAnswer(node_id, status, parsed, url)
    return PeerAnswer(node_id, None, None, None, f"{NO_ROUTE} ({'; '.join(errors)})")


async def _exchange(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    body: Any,
    params: Mapping[str, str] | None = None,
) -> tuple[int, Any]:
    """(status, parsed body) of one request, the body read to at most its bound."""
    async with client.stream(method, url, json=body, params=params) as response:
        raw = bytearray()
        async for chunk in response.aiter_bytes():
            raw += chunk
            if len(raw) > MAX_ANSWER_BYTES:
                raise _Unusable(f"an answer over {MAX_ANSWER_BYTES} bytes")
        status = response.status_code
        text = raw.decode(response.encoding or "utf-8", errors="replace")
    try:
        return status, json.loads(raw)
    except ValueError:
        if status == 200:
            raise _Unusable("a 200 answer that is not JSON") from None
        return status, {"error": {"message": text[:200]}}


async def ask_all(
    node: Node, node_ids: Sequence[NodeId], method: str, path: str
) -> list[PeerAnswer]:
    return list(await asyncio.gather(*(ask(node, n, method, path) for n in node_ids)))
