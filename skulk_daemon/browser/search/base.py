"""The search-provider seam: one protocol, one module per provider, ``registry.py`` chooses.

Provider hosts are chosen by the operator, so the SSRF policy does not apply to them;
the results are returned to the client, never fetched here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

import httpx
import msgspec

from skulk_daemon.browser.errors import UpstreamError, UpstreamTimeout
from skulk_daemon.browser.fetch import USER_AGENT

MIN_TOP_K = 1
MAX_TOP_K = 10
DEFAULT_TOP_K = 5
MAX_QUERY_CHARS = 2000
# A results page is small; anything past this is not one.
MAX_SEARCH_RESPONSE_BYTES = 2 * 1024 * 1024
MAX_RESULT_TITLE_CHARS = 300
MAX_SNIPPET_CHARS = 1000
MAX_SEARCH_REDIRECTS = 5


class SearchHit(msgspec.Struct, frozen=True, kw_only=True):
    title: str
    url: str
    snippet: str


class SearchProvider(Protocol):
    """A web search backend."""

    @property
    def name(self) -> str:
        """The ``provider`` field of a ``web_search`` response ("searxng")."""
        ...

    async def search(self, query: str, top_k: int) -> list[SearchHit]:
        """At most ``top_k`` results, best first. Raises ``BrowserToolError``."""
        ...


class ProviderResponse(msgspec.Struct, frozen=True, kw_only=True):
    status_code: int
    body: bytes


async def provider_request(
    *,
    label: str,
    method: str,
    url: str,
    timeout_seconds: float,
    params: Mapping[str, str] | None = None,
    data: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> ProviderResponse:
    """One bounded request to a provider; transport failures become ``BrowserToolError``."""
    client = httpx.AsyncClient(
        follow_redirects=True,
        max_redirects=MAX_SEARCH_REDIRECTS,
        timeout=httpx.Timeout(timeout_seconds),
        headers={"User-Agent": USER_AGENT},
    )
    try:
        async with client:
            request = client.build_request(
                method, url, params=params, data=data, headers=dict(headers or {})
            )
            response = await client.send(request, stream=True)
            try:
                body = await _read_limited(response)
            finally:
                await response.aclose()
    except httpx.TimeoutException:
        raise UpstreamTimeout(
            f"{label} did not answer within {timeout_seconds:g} seconds"
        ) from None
    except httpx.HTTPError as exc:
        # NOTE: the message names the provider, not the request: the request's
        # headers may carry the API key.
        raise UpstreamError(f"{label} could not be reached: {type(exc).__name__}: {exc}") from None
    return ProviderResponse(status_code=response.status_code, body=body)


async def _read_limited(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_SEARCH_RESPONSE_BYTES:
            raise UpstreamError(
                f"the search response is larger than {MAX_SEARCH_RESPONSE_BYTES} bytes"
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _clean(text: str | None, limit: int) -> str:
    return " ".join((text or "").split())[:limit]


def ranked(
    hits: Iterable[tuple[str | None, str | None, str | None]], top_k: int
) -> list[SearchHit]:
    """``(title, url, snippet)`` in rank order -> up to ``top_k`` http(s) hits, no repeats."""
    seen: set[str] = set()
    results: list[SearchHit] = []
    for title, raw_url, snippet in hits:
        url = (raw_url or "").strip()
        if not url.lower().startswith(("http://", "https://")) or url in seen:
            continue
        seen.add(url)
        results.append(
            SearchHit(
                title=_clean(title, MAX_RESULT_TITLE_CHARS) or url,
                url=url,
                snippet=_clean(snippet, MAX_SNIPPET_CHARS),
            )
        )
        if len(results) == top_k:
            break
    return results
