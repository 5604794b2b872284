"""Chooses the search provider the node's config names."""

from __future__ import annotations

from skulk_core.config import BrowserToolsConfig, SearchProviderName
from skulk_daemon.browser.errors import SearchNotConfigured
from skulk_daemon.browser.fetch import FetchSettings, fetch_settings
from skulk_daemon.browser.search.base import SearchProvider
from skulk_daemon.browser.search.duckduckgo import DEFAULT_DUCKDUCKGO_URL, DuckDuckGoProvider
from skulk_daemon.browser.search.searxng import SearxngProvider


def search_provider(
    config: BrowserToolsConfig, settings: FetchSettings | None = None
) -> SearchProvider:
    """The configured provider; its requests follow ``settings`` (default: the config's)."""
    settings = settings or fetch_settings(config)
    base_url = (config.search_url or "").strip() or None
    if base_url is not None and not base_url.lower().startswith(("http://", "https://")):
        raise SearchNotConfigured(
            "browser_tools.search_url must be an absolute http:// or https:// URL"
        )
    match config.search_provider:
        case SearchProviderName.DUCKDUCKGO:
            return DuckDuckGoProvider(base_url or DEFAULT_DUCKDUCKGO_URL, settings=settings)
        case SearchProviderName.SEARXNG:
            if base_url is None:
                raise SearchNotConfigured(
                    "web_search is set to use SearXNG but browser_tools.search_url is not "
                    "set; point it at the instance (https://searx.example.org)"
                )
            return SearxngProvider(base_url, settings=settings, api_key=config.search_api_key)
