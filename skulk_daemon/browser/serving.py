"""The three browser tools: request in, response out, ``BrowserToolError`` on failure."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from skulk_core.config import BrowserToolsConfig
from skulk_daemon.browser.content import ContentKind, decode_text, kind_of
from skulk_daemon.browser.errors import InvalidRequest, UnsupportedContent, UpstreamStatus
from skulk_daemon.browser.fetch import PROVIDER, FetchedPage, FetchSettings, fetch
from skulk_daemon.browser.protocol import (
    ExtractPageRequest,
    ExtractPageResponse,
    OpenUrlRequest,
    OpenUrlResponse,
    WebSearchRequest,
    WebSearchResponse,
)
from skulk_daemon.browser.search import search_provider

if TYPE_CHECKING:
    from skulk_daemon.browser.extract import ReadablePage

# NOTE: ``extract`` (BeautifulSoup) is imported where a page is read, not when the
# daemon starts: bs4 and soupsieve were about a thirtieth of its import time (issue 43).

# extract_page reads at most this much of a body (decoded); the rest is never read.
MAX_BODY_BYTES = 5 * 1024 * 1024
# open_url only wants the title, which sits in the first few KiB of any sane page.
TITLE_BODY_BYTES = 512 * 1024

_BLANK_LINES = re.compile(r"\n{3,}")


async def web_search(
    request: WebSearchRequest, config: BrowserToolsConfig, settings: FetchSettings | None = None
) -> WebSearchResponse:
    """Search through the configured provider, whose URL is held to the SSRF policy.

    ``settings`` default to the config's; tests pass a resolver or transport.
    """
    query = request.query.strip()
    if not query:
        raise InvalidRequest("query must not be blank")
    provider = search_provider(config, settings)
    hits = await provider.search(query, request.top_k)
    return WebSearchResponse(query=request.query, provider=provider.name, results=hits)


async def open_url(request: OpenUrlRequest, settings: FetchSettings) -> OpenUrlResponse:
    def body_limit(content_type: str | None) -> int:
        # Only an HTML page has a title to read; a missing type is sniffed.
        html = content_type is None or kind_of(content_type) is ContentKind.HTML
        return TITLE_BODY_BYTES if html else 0

    page = await fetch(request.url, settings, body_limit)
    title = None
    if page.body and kind_of(page.content_type, page.body) is ContentKind.HTML:
        from skulk_daemon.browser.extract import page_title, parse_html  # noqa: PLC0415

        # NOTE: parsing is CPU work; it runs off the event loop.
        title = await asyncio.to_thread(lambda: page_title(parse_html(page.body, page.charset)))
    return OpenUrlResponse(
        url=request.url,
        final_url=page.final_url,
        title=title,
        status_code=page.status_code,
        content_type=page.content_type,
        provider=PROVIDER,
    )


async def extract_page(request: ExtractPageRequest, settings: FetchSettings) -> ExtractPageResponse:
    def body_limit(content_type: str | None) -> int:
        readable = content_type is None or kind_of(content_type) is not ContentKind.OTHER
        return MAX_BODY_BYTES if readable else 0

    page = await fetch(request.url, settings, body_limit)
    if page.status_code >= 400:
        raise UpstreamStatus(f"{page.final_url} answered HTTP {page.status_code}")
    kind = kind_of(page.content_type, page.body)
    if kind is ContentKind.OTHER:
        described = page.content_type or "of an unknown type"
        raise UnsupportedContent(
            f"extract_page reads HTML and text pages; {page.final_url} is {described} "
            "(open_url reports its metadata)"
        )
    readable = await asyncio.to_thread(_readable, page, kind)
    from skulk_daemon.browser.extract import clip  # noqa: PLC0415 (see the note above)

    text, clipped = clip(readable.text, request.max_chars)
    return ExtractPageResponse(
        url=request.url,
        final_url=page.final_url,
        title=readable.title,
        text=text,
        # A body cut at MAX_BODY_BYTES gives incomplete text too.
        truncated=clipped or page.body_truncated,
        provider=PROVIDER,
    )


def _readable(page: FetchedPage, kind: ContentKind) -> ReadablePage:
    from skulk_daemon.browser.extract import (  # noqa: PLC0415 (see the note above)
        ReadablePage,
        parse_html,
        readable_html,
    )

    if kind is ContentKind.HTML:
        return readable_html(parse_html(page.body, page.charset))
    lines = (line.rstrip() for line in decode_text(page.body, page.charset).split("\n"))
    return ReadablePage(title=None, text=_BLANK_LINES.sub("\n\n", "\n".join(lines)).strip())
