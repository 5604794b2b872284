"""Search providers for ``/v1/tools/web_search``."""

from skulk_daemon.browser.search.base import SearchHit, SearchProvider
from skulk_daemon.browser.search.registry import search_provider

__all__ = ["SearchHit", "SearchProvider", "search_provider"]
