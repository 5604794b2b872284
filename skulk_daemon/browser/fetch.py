"""Fetching one page under the SSRF policy, with a bounded time and body.

Redirects are followed here, not by httpx, so every hop is resolved and checked like
the first. Each request is sent to an address that was checked: the URL's host is
replaced by that address, while the ``Host`` header and the TLS server name (SNI,
and so certificate verification) keep the real hostname. DNS is asked once per hop;
a rebinding answer between the check and the connection has nothing to change.

Residual risk: an allowed *public* server can still be made to talk to whatever it
likes; only this node's own connections are policed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from skulk_core.version import SKULK_VERSION
from skulk_daemon.browser.addresses import (
    IPAddress,
    Resolver,
    resolve_allowed,
    system_resolver,
)
from skulk_daemon.browser.content import parse_content_type
from skulk_daemon.browser.errors import InvalidUrl, UpstreamError, UpstreamTimeout

PROVIDER = "httpx"
MAX_REDIRECTS = 5
MAX_URL_CHARS = 8192
DEFAULT_TIMEOUT_SECONDS = 15.0
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = f"Mozilla/5.0 (compatible; Skulk/{SKULK_VERSION}; browser tools)"
_ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5"

# How many body bytes to read for a content type (``None``: the header was missing).
BodyLimit = Callable[[str | None], int]


@dataclass(frozen=True, kw_only=True)
class FetchSettings:
    allow_private: bool = False
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    resolver: Resolver = system_resolver
    # Tests stand in for the network here; the policy above it is the real one.
    transport: httpx.AsyncBaseTransport | None = None


@dataclass(frozen=True, kw_only=True)
class FetchedPage:
    url: str
    final_url: str
    status_code: int
    content_type: str | None
    charset: str | None
    body: bytes
    # The body went past the limit and was cut there.
    body_truncated: bool


def parse_url(text: str) -> httpx.URL:
    """An absolute http(s) URL without credentials, or :class:`InvalidUrl` saying why."""
    text = text.strip()
    if len(text) > MAX_URL_CHARS:
        raise InvalidUrl(f"the URL is longer than {MAX_URL_CHARS} characters")
    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, UnicodeError) as exc:
        raise InvalidUrl(f"not a valid URL: {exc}") from None
    if url.scheme not in ("http", "https"):
        raise InvalidUrl(f"only absolute http:// and https:// URLs can be opened, not {text!r}")
    if not url.host:
        raise InvalidUrl(f"the URL has no host: {text!r}")
    if url.userinfo:
        # Credentials in a URL end up in logs and redirects; this tool sends none.
        raise InvalidUrl("URLs with credentials (user:password@host) are refused")
    return url


async def fetch(url_text: str, settings: FetchSettings, body_limit: BodyLimit) -> FetchedPage:
    """GET ``url_text``, following up to :data:`MAX_REDIRECTS` checked redirects."""
    url = parse_url(url_text)
    client = httpx.AsyncClient(
        transport=settings.transport or httpx.AsyncHTTPTransport(retries=0),
        follow_redirects=False,
        # NOTE: no proxies from the environment: a proxy would make the connection
        # for us and the checked address would mean nothing.
        trust_env=False,
        timeout=httpx.Timeout(settings.timeout_seconds),
        # NOTE: no connection reuse: a pooled connection is keyed by address, and one
        # opened for another hostname (SNI, certificate) must not serve this one.
        limits=httpx.Limits(max_keepalive_connections=0),
        headers={"User-Agent": USER_AGENT, "Accept": _ACCEPT},
    )
    try:
        async with client, asyncio.timeout(settings.timeout_seconds):
            return await _follow(client, url, settings, body_limit)
    except (TimeoutError, httpx.TimeoutException):
        raise UpstreamTimeout(
            f"{url} did not answer within {settings.timeout_seconds:g} seconds"
        ) from None
    except httpx.HTTPError as exc:
        raise UpstreamError(f"fetching {url} failed: {_describe(exc)}") from None


async def _follow(
    client: httpx.AsyncClient, url: httpx.URL, settings: FetchSettings, body_limit: BodyLimit
) -> FetchedPage:
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        port = current.port or (443 if current.scheme == "https" else 80)
        addresses = await resolve_allowed(
            current.raw_host.decode("ascii"),
            port,
            allow_private=settings.allow_private,
            resolver=settings.resolver,
        )
        response = await _send_pinned(client, current, addresses)
        try:
            location = response.headers.get("location")
            if response.status_code in REDIRECT_STATUSES and location:
                current = _redirect_target(current, location)
                continue
            content_type, charset = parse_content_type(response.headers.get("content-type"))
            body, truncated = await _read_bounded(response, body_limit(content_type))
            return FetchedPage(
                url=str(url),
                final_url=str(current),
                status_code=response.status_code,
                content_type=content_type,
                charset=charset,
                body=body,
                body_truncated=truncated,
            )
        finally:
            await response.aclose()
    raise UpstreamError(f"{url} redirected more than {MAX_REDIRECTS} times")


def _redirect_target(current: httpx.URL, location: str) -> httpx.URL:
    try:
        target = current.join(location)
    except (httpx.InvalidURL, UnicodeError) as exc:
        raise UpstreamError(f"{current} redirected to an invalid URL: {exc}") from None
    try:
        return parse_url(str(target))
    except InvalidUrl as exc:
        raise UpstreamError(
            f"{current} redirected somewhere this tool cannot follow: {exc}"
        ) from None


async def _send_pinned(
    client: httpx.AsyncClient, url: httpx.URL, addresses: Sequence[IPAddress]
) -> httpx.Response:
    # ``netloc`` is the host (IDNA-encoded, IPv6 in brackets) and any explicit port:
    # exactly the Host header the URL would have had.
    host_header = url.netloc.decode("ascii")
    server_name = url.raw_host.decode("ascii")
    for index, address in enumerate(addresses):
        request = client.build_request(
            "GET",
            url.copy_with(host=str(address)),
            headers={"Host": host_header},
            extensions={"sni_hostname": server_name},
        )
        try:
            return await client.send(request, stream=True)
        except httpx.ConnectError:
            # Another address of the same (checked) name may answer: dual-stack
            # hosts often list an IPv6 address this machine cannot reach.
            if index == len(addresses) - 1:
                raise
    raise AssertionError("resolve_allowed never returns an empty list")


async def _read_bounded(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` decoded bytes; the flag says the body went on past them."""
    if limit <= 0:
        return b"", False
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        room = limit - size
        if len(chunk) > room:
            chunks.append(chunk[:room])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def _describe(exc: httpx.HTTPError) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__
