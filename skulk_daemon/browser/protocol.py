"""Wire types of ``/v1/tools/web_search``, ``open_url`` and ``extract_page``."""

from __future__ import annotations

from typing import Annotated

import msgspec

from skulk_daemon.browser.fetch import MAX_URL_CHARS
from skulk_daemon.browser.search.base import (
    DEFAULT_TOP_K,
    MAX_QUERY_CHARS,
    MAX_TOP_K,
    MIN_TOP_K,
    SearchHit,
)

Url = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=MAX_URL_CHARS,
        description="An absolute http:// or https:// URL.",
    ),
]

# extract_page's bounds on the text it returns (kept here, not beside the extractor,
# so the wire types load without BeautifulSoup).
MIN_MAX_CHARS = 500
MAX_MAX_CHARS = 50_000
DEFAULT_MAX_CHARS = 12_000


class WebSearchRequest(msgspec.Struct, frozen=True, kw_only=True):
    query: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_QUERY_CHARS)]
    top_k: Annotated[int, msgspec.Meta(ge=MIN_TOP_K, le=MAX_TOP_K)] = DEFAULT_TOP_K


class WebSearchResponse(msgspec.Struct, frozen=True, kw_only=True):
    query: str
    provider: str
    results: list[SearchHit]


class OpenUrlRequest(msgspec.Struct, frozen=True, kw_only=True):
    url: Url


class OpenUrlResponse(msgspec.Struct, frozen=True, kw_only=True):
    url: str
    final_url: str
    title: str | None
    status_code: int
    content_type: str | None
    provider: str


class ExtractPageRequest(msgspec.Struct, frozen=True, kw_only=True):
    url: Url
    max_chars: Annotated[int, msgspec.Meta(ge=MIN_MAX_CHARS, le=MAX_MAX_CHARS)] = DEFAULT_MAX_CHARS


class ExtractPageResponse(msgspec.Struct, frozen=True, kw_only=True):
    url: str
    final_url: str
    title: str | None
    text: str
    truncated: bool
    provider: str
