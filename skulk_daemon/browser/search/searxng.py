"""SearXNG's JSON API: ``GET {base}/search?q=...&format=json``."""

from __future__ import annotations

import msgspec

from skulk_daemon.browser.errors import UpstreamError
from skulk_daemon.browser.fetch import FetchSettings, Outbound
from skulk_daemon.browser.search.base import SearchHit, provider_request, ranked


class _Result(msgspec.Struct, frozen=True):
    title: str | None = None
    url: str | None = None
    content: str | None = None


class _Results(msgspec.Struct, frozen=True):
    results: list[_Result] = []


_decoder = msgspec.json.Decoder(_Results)


class SearxngProvider:
    name = "searxng"

    def __init__(self, base_url: str, *, settings: FetchSettings, api_key: str | None) -> None:
        self._endpoint = base_url.rstrip("/") + "/search"
        self._settings = settings
        self._api_key = api_key
        self._label = f"SearXNG ({host_of(base_url)})"

    async def search(self, query: str, top_k: int) -> list[SearchHit]:
        # For instances behind an authenticating reverse proxy.
        credentials = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        outbound = Outbound(
            url=self._endpoint,
            params={"q": query, "format": "json"},
            headers={"Accept": "application/json"},
            credentials=credentials,
            label=self._label,
        )
        response = await provider_request(outbound, self._settings)
        if response.status_code == 403:
            raise UpstreamError(
                f"{self._label} refused the JSON API (HTTP 403); enable it with "
                "search.formats: [html, json] in the instance's settings.yml"
            )
        if response.status_code != 200:
            raise UpstreamError(f"{self._label} answered HTTP {response.status_code}")
        try:
            decoded = _decoder.decode(response.body)
        except msgspec.DecodeError:
            raise UpstreamError(
                f"{self._label} did not answer with its JSON search results"
            ) from None
        return ranked(((r.title, r.url, r.content) for r in decoded.results), top_k)


def host_of(url: str) -> str:
    """The host of a provider URL, for messages (never its path, query or credentials)."""
    rest = url.split("://", 1)[-1]
    authority = rest.split("/", 1)[0].split("?", 1)[0]
    return authority.rsplit("@", 1)[-1]
