"""Builtin browser tools: web search, open a URL, extract a page's readable text.

``serving`` is the entry point; ``fetch`` and ``addresses`` hold the SSRF policy;
``extract`` turns HTML into text; ``search`` holds the providers.
"""

from skulk_daemon.browser.errors import BrowserToolError
from skulk_daemon.browser.fetch import fetch_settings
from skulk_daemon.browser.serving import extract_page, open_url, web_search

__all__ = ["BrowserToolError", "extract_page", "fetch_settings", "open_url", "web_search"]
