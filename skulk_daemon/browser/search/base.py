"""The search-provider seam: one protocol, one module per provider, ``registry.py`` chooses.

Provider requests go through ``fetch.py`` like any page: the configured URL is held
to the same SSRF policy (no loopback or LAN search server unless
``browser_tools.allow_private_addresses`` is on), redirects are checked hop by hop,
and the body is decoded within a bound. The results are returned to the client,
never fetched here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import msgspec

from skulk_daemon.browser.errors import UpstreamError
from skulk_daemon.browser.fetch import FetchSettings, Outbound, fetch_request

MIN_TOP_K = 1
MAX_TOP_K = 10
DEFAULT_TOP_K = 5
MAX_QUERY_CHARS = 2000
# A results page is small; anything past this is not one.
MAX_SEARCH_RESPONSE_BYTES = 2 * 1024 * 1024
MAX_RESULT_TITLE_CHARS = 300
MAX_SNIPPET_CHARS = 1000


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


async def provider_request(outbound: Outbound, settings: FetchSettings) -> ProviderResponse:
    """One bounded request to a provider; failures become ``BrowserToolError``."""
    page = await fetch_request(outbound, settings, lambda _: MAX_SEARCH_RESPONSE_BYTES)
    if page.body_truncated:
        raise UpstreamError(
            f"{outbound.label} sent a search response larger than {MAX_SEARCH_RESPONSE_BYTES} bytes"
        )
    return ProviderResponse(status_code=page.status_code, body=page.body)


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
