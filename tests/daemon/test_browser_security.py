"""The browser tools against hostile responses and addresses, in process.

A local HTTP server on 127.0.0.1 serves decompression bombs (1 GiB of text gzipped
to 1 MiB, and that gzipped again to a few KiB under ``Content-Encoding: gzip, gzip``),
ordinary pages in each coding, and a fake SearXNG. The real fetcher and real httpx
read them; loopback is allowed through ``allow_private_addresses`` where a test wants
a page read, and left refused where it checks the address policy.
"""

from __future__ import annotations

import asyncio
import json
import struct
import threading
import tracemalloc
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

from skulk_core.config import BrowserToolsConfig, SearchProviderName
from skulk_daemon.browser import serving
from skulk_daemon.browser.addresses import Resolver
from skulk_daemon.browser.errors import AddressRefused, UpstreamError
from skulk_daemon.browser.fetch import FetchSettings, fetch
from skulk_daemon.browser.protocol import ExtractPageRequest, OpenUrlRequest, WebSearchRequest
from skulk_daemon.browser.search.base import MAX_SEARCH_RESPONSE_BYTES

# Well above the 5 MiB a page may decode to, and far below the 1 GiB a bomb inflates to.
MAX_PEAK_BYTES = 64 * 1024 * 1024
BOMB_BYTES = 1 << 30
BOMB_TITLE = "Fox bomb"
LOOPBACK_HINT = "set browser_tools.allow_private_addresses"

ARTICLE_TEXT = "Red foxes hunt at dusk, listening for voles under the snow."
ARTICLE = (
    f"<!doctype html><html><head><title>Foxes at dusk</title></head>"
    f"<body><main><p>{ARTICLE_TEXT}</p></main></body></html>"
).encode()
SEARX_RESULTS = {"results": [{"title": "Skulk", "url": "https://skulk.example/", "content": "x"}]}


def _gzip_bomb(prefix: bytes, pattern: bytes, total: int) -> bytes:
    """A valid gzip member: ``prefix``, then ``total`` bytes of ``pattern`` repeated.

    Built without compressing ``total`` bytes: after a full flush the compressor's
    output for the same 1 MiB block is the same every time, so it is repeated.
    """
    block = pattern * ((1 << 20) // len(pattern))
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    head = deflate.compress(prefix) + deflate.flush(zlib.Z_FULL_FLUSH)
    first = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    again = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    assert again == first
    end = deflate.flush()
    count = total // len(block)
    crc = zlib.crc32(prefix)
    for _ in range(count):
        crc = zlib.crc32(block, crc)
    size = len(prefix) + count * len(block)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc, size & 0xFFFFFFFF)
    return header + head + first * count + end + trailer


class _Site(ThreadingHTTPServer):
    bomb: bytes
    double_bomb: bytes
    # (path, Authorization header) of every search request, in order.
    search_auth: list[tuple[str, str | None]]


class _Pages(BaseHTTPRequestHandler):
    server: _Site

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, body: bytes, content_type: str, *codings: str, **headers: str) -> None:
        try:
            self.send_response(int(headers.pop("status", "200")))
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for coding in codings:
                self.send_header("Content-Encoding", coding)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # The fetcher stops reading at its bound and hangs up: that is the point.
            pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        html, text, site = "text/html; charset=utf-8", "text/plain", self.server
        match parts.path:
            case "/article":
                self._send(ARTICLE, html)
            case "/article.gz":
                self._send(zlib.compress(ARTICLE, wbits=31), html, "gzip")
            case "/article.gz-members":
                members = [zlib.compress(part, wbits=31) for part in (ARTICLE[:40], ARTICLE[40:])]
                self._send(b"".join(members), html, "gzip")
            case "/article.zlib":
                self._send(zlib.compress(ARTICLE), html, "deflate")
            case "/article.deflate":
                self._send(zlib.compress(ARTICLE, wbits=-15), html, "deflate")
            case "/article.br":
                self._send(b"\x0b\x02\x80not really brotli", html, "br")
            case "/bomb.gz.gz":
                self._send(site.double_bomb, html, "gzip, gzip")
            case "/bomb.gz.gz-two-lines":
                self._send(site.double_bomb, html, "gzip", "gzip")
            case "/bomb.html.gz":
                self._send(site.bomb, html, "gzip")
            case "/bomb.txt.gz":
                self._send(site.bomb, text, "gzip")
            case "/searx/search" | "/searx-moved/search" | "/searx-slash/search":
                site.search_auth.append((parts.path, self.headers.get("Authorization")))
                if parts.path == "/searx-moved/search":
                    port = site.server_address[1]
                    where = f"http://other.test:{port}/searx/search?{parts.query}"
                    self._send(b"", text, status="307", Location=where)
                elif parts.path == "/searx-slash/search":
                    self._send(b"", text, status="308", Location=f"/searx/search?{parts.query}")
                else:
                    self._send(json.dumps(SEARX_RESULTS).encode(), "application/json")
            case "/searx-bomb/search":
                self._send(site.bomb, "application/json", "gzip")
            case _:
                self._send(b"no such page", text, status="404")


@pytest.fixture(scope="module")
def site() -> Iterator[_Site]:
    server = _Site(("127.0.0.1", 0), _Pages)
    server.daemon_threads = True
    server.bomb = _gzip_bomb(f"<title>{BOMB_TITLE}</title>".encode(), b"fox ", BOMB_BYTES)
    server.double_bomb = zlib.compress(server.bomb, 9, wbits=31)
    server.search_auth = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def _base(site: _Site, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{site.server_address[1]}"


@contextmanager
def _peak_memory() -> Iterator[list[int]]:
    """Yields a list that holds the peak of traced allocations once the block ends."""
    peak: list[int] = []
    tracemalloc.start()
    try:
        yield peak
    finally:
        peak.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


def _resolver(answers: dict[str, Sequence[str]]) -> Resolver:
    async def resolve(host: str, port: int) -> Sequence[str]:
        return answers[host]

    return resolve


LAN = FetchSettings(allow_private=True)


# --- decompression bombs -----------------------------------------------------------


def test_the_bomb_is_what_it_claims() -> None:
    bomb = _gzip_bomb(b"<title>t</title>", b"fox ", 8 << 20)
    assert zlib.decompress(bomb, wbits=31) == b"<title>t</title>" + b"fox " * (2 << 20)


@pytest.mark.parametrize("path", ["/bomb.gz.gz", "/bomb.gz.gz-two-lines"])
def test_stacked_codings_are_refused_without_inflating(site: _Site, path: str) -> None:
    url = f"{_base(site)}{path}"
    for tool in (
        serving.extract_page(ExtractPageRequest(url=url), LAN),
        serving.open_url(OpenUrlRequest(url=url), LAN),
    ):
        with _peak_memory() as peak, pytest.raises(UpstreamError) as refused:
            asyncio.run(tool)
        assert refused.value.status == 502
        assert "more than one content coding (gzip, gzip)" in refused.value.message
        assert peak[0] < MAX_PEAK_BYTES


def test_a_single_gzip_bomb_is_read_only_up_to_the_cap(site: _Site) -> None:
    url = f"{_base(site)}/bomb.txt.gz"
    with _peak_memory() as peak:
        result = asyncio.run(serving.extract_page(ExtractPageRequest(url=url), LAN))
    assert result.truncated is True
    assert result.text.startswith(f"<title>{BOMB_TITLE}</title>fox fox ")
    assert peak[0] < MAX_PEAK_BYTES

    with _peak_memory() as peak:
        page = asyncio.run(fetch(url, LAN, lambda _: serving.MAX_BODY_BYTES))
    assert (len(page.body), page.body_truncated) == (serving.MAX_BODY_BYTES, True)
    assert peak[0] < MAX_PEAK_BYTES


def test_open_url_reads_a_bombs_title_within_bounds(site: _Site) -> None:
    url = f"{_base(site)}/bomb.html.gz"
    with _peak_memory() as peak:
        result = asyncio.run(serving.open_url(OpenUrlRequest(url=url), LAN))
    assert (result.title, result.content_type) == (BOMB_TITLE, "text/html")
    assert peak[0] < MAX_PEAK_BYTES


def test_a_search_provider_bomb_is_refused_at_its_cap(site: _Site) -> None:
    config = BrowserToolsConfig(
        allow_private_addresses=True,
        search_provider=SearchProviderName.SEARXNG,
        search_url=f"{_base(site)}/searx-bomb/",
    )
    with _peak_memory() as peak, pytest.raises(UpstreamError) as refused:
        asyncio.run(serving.web_search(WebSearchRequest(query="fox"), config))
    assert f"larger than {MAX_SEARCH_RESPONSE_BYTES} bytes" in refused.value.message
    assert peak[0] < MAX_PEAK_BYTES


@pytest.mark.parametrize(
    "path", ["/article", "/article.gz", "/article.gz-members", "/article.zlib", "/article.deflate"]
)
def test_identity_and_single_coded_pages_read_as_usual(site: _Site, path: str) -> None:
    url = f"{_base(site)}{path}"
    result = asyncio.run(serving.extract_page(ExtractPageRequest(url=url), LAN))
    assert (result.title, result.text, result.truncated) == ("Foxes at dusk", ARTICLE_TEXT, False)


def test_an_unknown_coding_is_refused_naming_it(site: _Site) -> None:
    url = f"{_base(site)}/article.br"
    with pytest.raises(UpstreamError, match=r"unsupported content coding \('br'\)"):
        asyncio.run(serving.extract_page(ExtractPageRequest(url=url), LAN))


# --- search providers under the address policy --------------------------------------


def _searxng(url: str, **extra: Any) -> BrowserToolsConfig:
    return BrowserToolsConfig(search_provider=SearchProviderName.SEARXNG, search_url=url, **extra)


def _search(config: BrowserToolsConfig, settings: FetchSettings | None = None) -> list[str]:
    response = asyncio.run(serving.web_search(WebSearchRequest(query="fox"), config, settings))
    return [hit.url for hit in response.results]


def test_a_loopback_search_url_is_refused_by_default(site: _Site) -> None:
    with pytest.raises(AddressRefused) as literal:
        _search(_searxng(f"{_base(site)}/searx/"))
    assert literal.value.message.startswith("refused: 127.0.0.1 is a loopback address; ")
    assert LOOPBACK_HINT in literal.value.message

    with pytest.raises(AddressRefused) as named:
        _search(_searxng(f"{_base(site, 'localhost')}/searx/"))
    assert named.value.message.startswith("refused: localhost resolves to a non-public address")
    assert "127.0.0.1" not in named.value.message
    assert "::1" not in named.value.message

    with pytest.raises(AddressRefused, match=r"^refused: 127\.0\.0\.1 is a loopback"):
        _search(BrowserToolsConfig(search_url=f"{_base(site)}/ddg/html/"))
    assert site.search_auth == []


def test_an_internal_search_host_is_refused_without_telling_its_address() -> None:
    settings = FetchSettings(resolver=_resolver({"searx.internal": ["10.20.30.40"]}))
    with pytest.raises(AddressRefused) as refused:
        _search(_searxng("http://searx.internal/", search_api_key="sk-search"), settings)
    assert refused.value.message == (
        "refused: searx.internal resolves to a non-public address; "
        "set browser_tools.allow_private_addresses to allow LAN pages"
    )


def test_the_ietf_protocol_block_is_refused() -> None:
    settings = FetchSettings(resolver=_resolver({"relay.example": ["192.0.0.8"]}))
    request = OpenUrlRequest(url="http://192.0.0.8/")
    with pytest.raises(AddressRefused, match=r"^refused: 192\.0\.0\.8 is an IETF protocol"):
        asyncio.run(serving.open_url(request, settings))
    with pytest.raises(AddressRefused, match=r"relay\.example resolves to a non-public address"):
        asyncio.run(serving.open_url(OpenUrlRequest(url="http://relay.example/"), settings))
    with pytest.raises(AddressRefused, match=r"192\.0\.0\.8 is an IETF protocol"):
        _search(_searxng("http://192.0.0.8/"), settings)


def test_allowed_search_keeps_its_key_on_its_own_origin_only(site: _Site) -> None:
    port = site.server_address[1]
    settings = FetchSettings(
        allow_private=True,
        resolver=_resolver({"searx.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}),
    )
    site.search_auth.clear()
    config = _searxng(f"http://searx.test:{port}/searx-slash/", search_api_key="sk-search")
    assert _search(config, settings) == ["https://skulk.example/"]
    # A redirect on the same origin still carries the key...
    assert site.search_auth == [
        ("/searx-slash/search", "Bearer sk-search"),
        ("/searx/search", "Bearer sk-search"),
    ]
    site.search_auth.clear()
    config = _searxng(f"http://searx.test:{port}/searx-moved/", search_api_key="sk-search")
    assert _search(config, settings) == ["https://skulk.example/"]
    # ...one to another origin does not.
    assert site.search_auth == [
        ("/searx-moved/search", "Bearer sk-search"),
        ("/searx/search", None),
    ]
