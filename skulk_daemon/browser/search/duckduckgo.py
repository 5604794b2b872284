"""DuckDuckGo's HTML endpoint: ``POST https://html.duckduckgo.com/html/`` with ``q=``.

No API key and no account, which makes it the default; it is also a page meant for
browsers, so it may answer automated traffic with a bot check (HTTP 202). An operator
who searches a lot should run SearXNG.
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, urljoin, urlsplit

from skulk_daemon.browser.errors import UpstreamError
from skulk_daemon.browser.fetch import FetchSettings, Outbound
from skulk_daemon.browser.search.base import SearchHit, provider_request, ranked
from skulk_daemon.browser.search.searxng import host_of

DEFAULT_DUCKDUCKGO_URL = "https://html.duckduckgo.com/html/"


class DuckDuckGoProvider:
    name = "duckduckgo"

    def __init__(self, base_url: str = DEFAULT_DUCKDUCKGO_URL, *, settings: FetchSettings) -> None:
        self._url = base_url
        self._settings = settings
        self._label = f"DuckDuckGo ({host_of(base_url)})"

    async def search(self, query: str, top_k: int) -> list[SearchHit]:
        outbound = Outbound(
            url=self._url,
            method="POST",
            form={"q": query},
            headers={"Accept": "text/html", "Referer": self._url},
            label=self._label,
        )
        response = await provider_request(outbound, self._settings)
        if response.status_code == 202:
            raise UpstreamError(
                f"{self._label} answered with its bot check (HTTP 202); try again later or "
                "set browser_tools.search_provider to searxng"
            )
        if response.status_code != 200:
            raise UpstreamError(f"{self._label} answered HTTP {response.status_code}")
        # NOTE: parsed off the event loop; the page is bounded but not tiny.
        return await asyncio.to_thread(parse_results, response.body, self._url, top_k)


def parse_results(page: bytes, base_url: str, top_k: int) -> list[SearchHit]:
    """The organic results of a DuckDuckGo HTML results page, ads left out."""
    from bs4 import BeautifulSoup, Tag  # noqa: PLC0415 (bs4 loads where a page is read: issue 43)

    soup = BeautifulSoup(page, "html.parser", from_encoding="utf-8")
    found: list[tuple[str | None, str | None, str | None]] = []
    for link in soup.select("a.result__a"):
        container = link.find_parent(class_="result")
        if isinstance(container, Tag) and "result--ad" in (container.get("class") or ()):
            continue
        href = link.get("href")
        url = unwrap_link(href, base_url) if isinstance(href, str) else None
        snippet = container.select_one(".result__snippet") if isinstance(container, Tag) else None
        found.append((link.get_text(), url, snippet.get_text() if snippet else None))
    return ranked(found, top_k)


def unwrap_link(href: str, base_url: str) -> str | None:
    """The target of a result link; DuckDuckGo wraps them as ``/l/?uddg=<target>``."""
    absolute = urljoin(base_url, href.strip())
    parts = urlsplit(absolute)
    query = parse_qs(parts.query)
    targets = query.get("uddg")
    if targets and parts.path.rstrip("/").endswith("/l"):
        return targets[0]
    if parts.path.endswith("/y.js") and query.keys() & {"ad_domain", "ad_provider", "ad_type"}:
        # An ad's click-tracking link.
        return None
    return absolute
