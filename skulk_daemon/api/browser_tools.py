"""POST /v1/tools/web_search, /v1/tools/open_url and /v1/tools/extract_page."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from litestar import Controller, post

from skulk_daemon import browser
from skulk_daemon.api.authority import declare
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.browser.protocol import (
    ExtractPageRequest,
    ExtractPageResponse,
    OpenUrlRequest,
    OpenUrlResponse,
    WebSearchRequest,
    WebSearchResponse,
)
from skulk_daemon.errors import ApiError
from skulk_daemon.node.node import Node

# A tool call is a query or a URL and a number; nothing legitimate comes near this.
MAX_TOOL_BODY_BYTES = 64 * 1024

# Refused address or bad body (400), unsupported content (422), upstream failure (502),
# search not configured (503), timeout (504).
_TOOL_ERRORS = errors(OPENAI, 400, 413, 422, 502, 503, 504)


@contextmanager
def _as_api_error() -> Iterator[None]:
    # Browser-tool errors carry their own status and code (see _TOOL_ERRORS).
    try:
        yield
    except browser.BrowserToolError as exc:
        raise ApiError(exc.status, exc.message, code=exc.code) from None


class BrowserToolsController(Controller):
    tags = ("Tools",)
    opt = declare(Requirement.OPEN)

    @post(
        "/v1/tools/web_search",
        status_code=200,
        summary="Search the web through the configured provider",
        request_max_body_size=MAX_TOOL_BODY_BYTES,
        responses=_TOOL_ERRORS,
    )
    async def web_search(self, node: Node, data: WebSearchRequest) -> WebSearchResponse:
        with _as_api_error():
            return await browser.web_search(data, node.config.browser_tools)

    @post(
        "/v1/tools/open_url",
        status_code=200,
        summary="Fetch one http(s) URL and return its metadata",
        request_max_body_size=MAX_TOOL_BODY_BYTES,
        responses=_TOOL_ERRORS,
    )
    async def open_url(self, node: Node, data: OpenUrlRequest) -> OpenUrlResponse:
        with _as_api_error():
            settings = browser.fetch_settings(node.config.browser_tools)
            return await browser.open_url(data, settings)

    @post(
        "/v1/tools/extract_page",
        status_code=200,
        summary="Fetch one http(s) URL and return its readable text, bounded",
        request_max_body_size=MAX_TOOL_BODY_BYTES,
        responses=_TOOL_ERRORS,
    )
    async def extract_page(self, node: Node, data: ExtractPageRequest) -> ExtractPageResponse:
        with _as_api_error():
            settings = browser.fetch_settings(node.config.browser_tools)
            return await browser.extract_page(data, settings)
