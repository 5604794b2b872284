"""Fetching one URL under the SSRF policy, with a bounded time and body.

Every request a browser tool makes goes through here: the page ``open_url`` and
``extract_page`` read, and the search provider's endpoint (an operator's URL is no
more trusted than a model's: it may point at this node or its LAN all the same).

Redirects are followed here, not by httpx, so every hop is resolved and checked like
the first. Each request is sent to an address that was checked: the URL's host is
replaced by that address, while the ``Host`` header and the TLS server name (SNI,
and so certificate verification) keep the real hostname. DNS is asked once per hop;
a rebinding answer between the check and the connection has nothing to change.
Bodies are read raw and decoded within the caller's limit (see ``codings.py``).

Residual risk: an allowed *public* server can still be made to talk to whatever it
likes; only this node's own connections are policed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from skulk_core.config import BrowserToolsConfig
from skulk_core.version import SKULK_VERSION
from skulk_daemon.browser.addresses import (
    IPAddress,
    Resolver,
    resolve_allowed,
    system_resolver,
)
from skulk_daemon.browser.codings import ACCEPT_ENCODING, read_decoded, response_coding
from skulk_daemon.browser.content import parse_content_type
from skulk_daemon.browser.errors import InvalidUrl, UpstreamError, UpstreamTimeout

if TYPE_CHECKING:
    import httpx

PROVIDER = "httpx"
MAX_REDIRECTS = 5
MAX_URL_CHARS = 8192
DEFAULT_TIMEOUT_SECONDS = 15.0
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Redirects that keep the method and body; the others turn a POST into a bare GET.
_METHOD_KEEPING_REDIRECTS = frozenset({307, 308})
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


def fetch_settings(config: BrowserToolsConfig) -> FetchSettings:
    return FetchSettings(
        allow_private=config.allow_private_addresses, timeout_seconds=config.timeout_seconds
    )


@dataclass(frozen=True, kw_only=True)
class Outbound:
    """One request: a page's GET, or a search provider's GET or form POST."""

    url: str
    method: str = "GET"
    params: Mapping[str, str] | None = None
    form: Mapping[str, str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # Sent only while the request stays on the first URL's origin (an API key):
    # a redirect elsewhere must not carry it along.
    credentials: Mapping[str, str] = field(default_factory=dict)
    # Names the destination in messages instead of the URL.
    label: str | None = None


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
    import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

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
    return await fetch_request(Outbound(url=url_text), settings, body_limit)


async def fetch_request(
    outbound: Outbound, settings: FetchSettings, body_limit: BodyLimit
) -> FetchedPage:
    """Send ``outbound`` under the SSRF policy, following checked redirects."""
    import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

    url = parse_url(outbound.url)
    if outbound.params:
        url = url.copy_merge_params(dict(outbound.params))
    label = outbound.label or str(url)
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
        headers={"User-Agent": USER_AGENT, "Accept": _ACCEPT, "Accept-Encoding": ACCEPT_ENCODING},
    )
    try:
        async with client, asyncio.timeout(settings.timeout_seconds):
            return await _follow(
                client, url, outbound, label=label, settings=settings, body_limit=body_limit
            )
    except (TimeoutError, httpx.TimeoutException):
        raise UpstreamTimeout(
            f"{label} did not answer within {settings.timeout_seconds:g} seconds"
        ) from None
    except httpx.HTTPError as exc:
        # NOTE: the message names the destination, never the request's headers,
        # which may carry an API key.
        raise UpstreamError(f"fetching {label} failed: {_describe(exc)}") from None


async def _follow(
    client: httpx.AsyncClient,
    url: httpx.URL,
    outbound: Outbound,
    *,
    label: str,
    settings: FetchSettings,
    body_limit: BodyLimit,
) -> FetchedPage:
    current = url
    method, form = outbound.method, outbound.form
    for _ in range(MAX_REDIRECTS + 1):
        port = current.port or (443 if current.scheme == "https" else 80)
        addresses = await resolve_allowed(
            current.raw_host.decode("ascii"),
            port,
            allow_private=settings.allow_private,
            resolver=settings.resolver,
        )
        headers = dict(outbound.headers)
        if _origin(current) == _origin(url):
            headers.update(outbound.credentials)
        response = await _send_pinned(
            client, current, addresses, method=method, headers=headers, form=form
        )
        try:
            location = response.headers.get("location")
            if response.status_code in REDIRECT_STATUSES and location:
                current = _redirect_target(current, location)
                if response.status_code not in _METHOD_KEEPING_REDIRECTS:
                    method, form = "GET", None
                continue
            content_type, charset = parse_content_type(response.headers.get("content-type"))
            limit = body_limit(content_type)
            body, truncated = b"", False
            if limit > 0:
                coding = response_coding(response.headers.get_list("content-encoding"), label)
                body, truncated = await read_decoded(response.aiter_raw(), coding, limit, label)
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
    raise UpstreamError(f"{label} redirected more than {MAX_REDIRECTS} times")


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


def _redirect_target(current: httpx.URL, location: str) -> httpx.URL:
    import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

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
    client: httpx.AsyncClient,
    url: httpx.URL,
    addresses: Sequence[IPAddress],
    *,
    method: str,
    headers: Mapping[str, str],
    form: Mapping[str, str] | None,
) -> httpx.Response:
    # ``netloc`` is the host (IDNA-encoded, IPv6 in brackets) and any explicit port:
    # exactly the Host header the URL would have had.
    import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

    host_header = url.netloc.decode("ascii")
    server_name = url.raw_host.decode("ascii")
    for index, address in enumerate(addresses):
        request = client.build_request(
            method,
            url.copy_with(host=str(address)),
            headers={**headers, "Host": host_header},
            data=dict(form) if form is not None else None,
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


def _describe(exc: httpx.HTTPError) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__
