"""POST /v1/tools/web_search, /v1/tools/open_url and /v1/tools/extract_page."""

from __future__ import annotations

from litestar import Controller


class BrowserToolsController(Controller):
    tags = ("Tools",)
