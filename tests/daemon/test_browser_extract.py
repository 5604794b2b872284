"""The browser tools' pure parts: readable text, content types, the address policy,
DuckDuckGo's results page and the provider registry. No sockets here."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Sequence

import pytest

from skulk_core.config import BrowserToolsConfig, SearchProviderName
from skulk_daemon.browser.addresses import Resolver, refusal, resolve_allowed
from skulk_daemon.browser.content import ContentKind, decode_text, kind_of, parse_content_type
from skulk_daemon.browser.errors import (
    AddressRefused,
    InvalidUrl,
    SearchNotConfigured,
    UpstreamError,
)
from skulk_daemon.browser.extract import (
    MAX_TITLE_CHARS,
    clip,
    decode_html,
    page_title,
    parse_html,
    readable_html,
)
from skulk_daemon.browser.fetch import parse_url
from skulk_daemon.browser.search import search_provider
from skulk_daemon.browser.search.duckduckgo import parse_results, unwrap_link

LONG = "Foxes are small omnivores that live on every continent but Antarctica. " * 3

NOISY_PAGE = f"""<!doctype html>
<html><head><title>  Foxes \n at dusk </title>
<meta property="og:title" content="OG title">
<style>body {{ color: red }} STYLE-NOISE</style>
<script>var tracker = "SCRIPT-NOISE";</script></head>
<body>
<nav><a href="/">NAV-NOISE Home</a></nav>
<header>HEADER-NOISE site banner</header>
<form><input name="q"><button>FORM-NOISE</button></form>
<main>
  <article>
    <header><h1>Foxes at dusk</h1><p>By A. Writer</p></header>
    <p>Red   foxes hunt
       at dusk,<br>listening for voles.</p>
    <!-- COMMENT-NOISE -->
    <p>{LONG}</p>
    <ul><li>Voles</li><li>Rabbits</li></ul>
    <div hidden>HIDDEN-NOISE</div>
    <div style="display: none">STYLE-HIDDEN-NOISE</div>
    <svg><title>SVG-NOISE</title><text>SVG-NOISE</text></svg>
    <pre>def fox():
    return "den"</pre>
  </article>
  <aside>ASIDE-NOISE related links</aside>
</main>
<noscript>NOSCRIPT-NOISE</noscript>
<template>TEMPLATE-NOISE</template>
<footer>FOOTER-NOISE copyright</footer>
</body></html>""".encode()


def _readable(html: str | bytes) -> tuple[str | None, str]:
    body = html.encode() if isinstance(html, str) else html
    page = readable_html(parse_html(body, None))
    return page.title, page.text


def test_readable_text_is_the_article_without_the_noise() -> None:
    title, text = _readable(NOISY_PAGE)
    assert title == "Foxes at dusk"
    assert "NOISE" not in text
    # The article's own header is content: headline and byline stay.
    assert text.startswith("Foxes at dusk\n\nBy A. Writer\n\nRed foxes hunt at dusk,\nlistening")
    assert "- Voles\n- Rabbits" in text
    assert 'def fox():\n    return "den"' in text
    assert "\n\n\n" not in text


def test_without_article_or_main_the_body_is_read() -> None:
    title, text = _readable(
        "<html><body><nav>NAV</nav><div><p>One.</p>\n\n\n<p>Two  \t three.</p></div></body></html>"
    )
    assert title is None
    assert text == "One.\n\nTwo three."


def test_a_teaser_article_does_not_hide_the_page() -> None:
    page = f"<body><main><p>{LONG}</p><article><p>Teaser</p></article></main></body>"
    _, text = _readable(page)
    assert LONG.strip() in text
    assert "Teaser" in text


def test_title_falls_back_to_og_title_then_h1_and_is_bounded() -> None:
    og = '<html><head><meta property="og:title" content=" From  OG "></head><h1>H</h1></html>'
    assert page_title(parse_html(og.encode(), None)) == "From OG"
    assert page_title(parse_html(b"<body><h1>The <em>heading</em></h1></body>", None)) == (
        "The heading"
    )
    assert page_title(parse_html(b"<body><p>no title</p></body>", None)) is None
    long_title = f"<title>{'x' * (MAX_TITLE_CHARS + 50)}</title>".encode()
    assert page_title(parse_html(long_title, None)) == "x" * MAX_TITLE_CHARS


def test_deeply_nested_markup_does_not_overflow() -> None:
    depth = 5000
    page = "<body>" + "<div>" * depth + "deep text" + "</div>" * depth + "</body>"
    assert _readable(page)[1] == "deep text"


def test_charset_from_header_then_meta_then_utf8() -> None:
    latin = "<p>café</p>".encode("latin-1")
    assert "café" in decode_html(latin, "iso-8859-1")
    meta = b'<meta charset="windows-1252"><p>caf\xe9</p>'
    assert "café" in decode_html(meta, None)
    assert "café" in decode_html("<p>café</p>".encode(), None)
    # A UTF-8 body cut inside a character is still read as UTF-8.
    assert decode_html("<p>café</p>é".encode()[:-1], None).startswith("<p>café</p>")
    assert decode_text(b"\xef\xbb\xbfline one\r\nline two\x00", None) == "line one\nline two"


def test_clip_is_exact_at_the_limit_and_prefers_word_boundaries() -> None:
    text = "word " * 200
    assert clip("a" * 500, 500) == ("a" * 500, False)
    clipped, truncated = clip("a" * 501, 500)
    assert truncated
    assert clipped == "a" * 500
    clipped, truncated = clip(text, 502)
    assert truncated
    assert len(clipped) <= 502
    assert clipped.endswith("word")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ('Text/HTML; Charset="UTF-8"', ("text/html", "utf-8")),
        ("application/pdf", ("application/pdf", None)),
        ("text/plain; charset=not-a-codec", ("text/plain", None)),
        ("nonsense", (None, None)),
        ("", (None, None)),
        (None, (None, None)),
    ],
)
def test_content_type_is_normalized(
    header: str | None, expected: tuple[str | None, str | None]
) -> None:
    assert parse_content_type(header) == expected


def test_content_kind_and_sniffing() -> None:
    assert kind_of("application/xhtml+xml") is ContentKind.HTML
    assert kind_of("text/plain") is ContentKind.TEXT
    assert kind_of("application/pdf", b"<html>") is ContentKind.OTHER
    assert kind_of(None, b"\n <!DOCTYPE html><html>") is ContentKind.HTML
    assert kind_of(None, b"just words") is ContentKind.TEXT
    assert kind_of(None, b"%PDF-1.7\x00\x01\x02") is ContentKind.OTHER


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "a loopback address"),
        ("::1", "a loopback address"),
        ("10.1.2.3", "a private address"),
        ("192.168.1.10", "a private address"),
        ("172.16.0.1", "a private address"),
        ("169.254.169.254", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("fc00::1", "a private address"),
        ("100.64.0.1", "not a publicly routable address"),
        # Python 3.11 calls 192.0.0.8 global; the policy refuses all of 192.0.0.0/24.
        ("192.0.0.8", "an IETF protocol assignment address"),
        ("192.0.0.255", "an IETF protocol assignment address"),
        ("::ffff:192.0.0.8", "mapped to 192.0.0.8, an IETF protocol assignment address"),
        ("240.0.0.1", "a reserved address"),
        ("0.0.0.0", "an unspecified address"),
        ("::", "an unspecified address"),
        ("224.0.0.1", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("::ffff:127.0.0.1", "mapped to 127.0.0.1, a loopback address"),
        ("::ffff:10.0.0.1", "mapped to 10.0.0.1, a private address"),
        ("64:ff9b::a9fe:a9fe", "mapped to 169.254.169.254, a link-local address"),
        ("2002:7f00:1::", "mapped to 127.0.0.1, a loopback address"),
        ("93.184.216.34", None),
        ("::ffff:93.184.216.34", None),
        ("2606:4700::1111", None),
    ],
)
def test_address_policy(address: str, reason: str | None) -> None:
    refused = refusal(ipaddress.ip_address(address), allow_private=False)
    assert (refused[0] if refused else None) == reason


def test_allowing_private_addresses_lifts_all_but_unspecified_and_multicast() -> None:
    for address in ("127.0.0.1", "::1", "10.0.0.1", "169.254.169.254", "::ffff:127.0.0.1"):
        assert refusal(ipaddress.ip_address(address), allow_private=True) is None
    for address in ("0.0.0.0", "224.0.0.1", "::ffff:0.0.0.0"):
        refused = refusal(ipaddress.ip_address(address), allow_private=True)
        assert refused is not None
        assert refused[1] is False


def _table(answers: dict[str, Sequence[str]]) -> Resolver:
    async def resolve(host: str, port: int) -> Sequence[str]:
        if host not in answers:
            raise OSError(-2, "Name or service not known")
        return answers[host]

    return resolve


def test_every_resolved_address_is_checked() -> None:
    resolver = _table({"mixed.test": ["93.184.216.34", "10.0.0.7"], "ok.test": ["8.8.8.8"]})
    with pytest.raises(AddressRefused) as refused:
        asyncio.run(resolve_allowed("mixed.test", 80, allow_private=False, resolver=resolver))
    # What an internal name resolves to is not told to whoever asked.
    assert str(refused.value) == (
        "refused: mixed.test resolves to a non-public address; "
        "set browser_tools.allow_private_addresses to allow LAN pages"
    )
    allowed = asyncio.run(resolve_allowed("ok.test", 80, allow_private=False, resolver=resolver))
    assert allowed == [ipaddress.ip_address("8.8.8.8")]
    with pytest.raises(UpstreamError, match=r"could not resolve nowhere\.test"):
        asyncio.run(resolve_allowed("nowhere.test", 80, allow_private=False, resolver=resolver))


def test_literal_addresses_are_not_resolved() -> None:
    resolver = _table({})
    with pytest.raises(AddressRefused, match=r"^refused: 127\.0\.0\.1 is a loopback address; set"):
        asyncio.run(resolve_allowed("127.0.0.1", 80, allow_private=False, resolver=resolver))
    with pytest.raises(AddressRefused, match=r"^refused: 192\.0\.0\.8 is an IETF protocol"):
        asyncio.run(resolve_allowed("192.0.0.8", 80, allow_private=False, resolver=resolver))


def test_refusals_name_only_addresses_the_caller_wrote() -> None:
    resolver = _table(
        {
            "internal.example": ["10.20.30.40"],
            "multicast.example": ["224.0.0.9"],
            "2130706433": ["127.0.0.1"],
        }
    )
    with pytest.raises(AddressRefused) as internal:
        asyncio.run(resolve_allowed("internal.example", 80, allow_private=False, resolver=resolver))
    assert str(internal.value).startswith(
        "refused: internal.example resolves to a non-public address; set "
    )
    assert "10.20.30.40" not in str(internal.value)
    with pytest.raises(AddressRefused) as multicast:
        asyncio.run(resolve_allowed("multicast.example", 80, allow_private=True, resolver=resolver))
    assert str(multicast.value) == (
        "refused: multicast.example resolves to an address no setting allows"
    )
    # A number is an address in another spelling: naming it tells the caller nothing.
    with pytest.raises(AddressRefused, match=r"2130706433 resolves to 127\.0\.0\.1, a loopback"):
        asyncio.run(resolve_allowed("2130706433", 80, allow_private=False, resolver=resolver))


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/file",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "example.com/no-scheme",
        "/relative/path",
        "http://",
        "http://user:secret@example.com/",
        "http://[::1",
        "https://" + "a" * 9000 + ".com/",
    ],
)
def test_only_absolute_http_urls_without_credentials(url: str) -> None:
    with pytest.raises(InvalidUrl) as refused:
        parse_url(url)
    assert "secret" not in str(refused.value)


DDG_PAGE = b"""<html><body><div class="serp__results">
<div class="result results_links result--ad">
  <h2 class="result__title"><a class="result__a"
    href="https://duckduckgo.com/y.js?ad_domain=ads.example&amp;ad_provider=x">Buy foxes</a></h2>
  <a class="result__snippet">AD-NOISE</a>
</div>
<div class="result results_links results_links_deep web-result">
  <div class="links_main links_deep result__body">
    <h2 class="result__title"><a rel="nofollow" class="result__a"
      href="//duckduckgo.com/l/?uddg=https%3A%2F%2Ffox.example%2Fa%3Fx%3D1%26y%3D2&amp;rut=abc">
      The <b>Fox</b>   Page</a></h2>
    <a class="result__snippet" href="#">Everything about <b>foxes</b>.</a>
  </div>
</div>
<div class="result results_links web-result">
  <h2 class="result__title"><a class="result__a" href="https://den.example/">Dens</a></h2>
</div>
<div class="result results_links web-result">
  <h2 class="result__title"><a class="result__a"
    href="//duckduckgo.com/l/?uddg=https%3A%2F%2Ffox.example%2Fa%3Fx%3D1%26y%3D2">Again</a></h2>
</div>
</div></body></html>"""


def test_duckduckgo_results_are_unwrapped_and_ads_skipped() -> None:
    hits = parse_results(DDG_PAGE, "https://html.duckduckgo.com/html/", 10)
    assert [(hit.title, hit.url, hit.snippet) for hit in hits] == [
        ("The Fox Page", "https://fox.example/a?x=1&y=2", "Everything about foxes."),
        ("Dens", "https://den.example/", ""),
    ]
    assert len(parse_results(DDG_PAGE, "https://html.duckduckgo.com/html/", 1)) == 1


def test_unwrap_link_keeps_ordinary_links() -> None:
    base = "https://html.duckduckgo.com/html/"
    assert unwrap_link("https://example.com/path/l", base) == "https://example.com/path/l"
    assert unwrap_link("/l/?uddg=http%3A%2F%2Fa.example%2F", base) == "http://a.example/"


def test_registry_chooses_and_explains_missing_configuration() -> None:
    assert search_provider(BrowserToolsConfig()).name == "duckduckgo"
    searx = BrowserToolsConfig(
        search_provider=SearchProviderName.SEARXNG, search_url="http://searx.lan:8888/"
    )
    assert search_provider(searx).name == "searxng"
    with pytest.raises(SearchNotConfigured, match=r"browser_tools\.search_url is not set"):
        search_provider(BrowserToolsConfig(search_provider=SearchProviderName.SEARXNG))
    with pytest.raises(SearchNotConfigured, match="absolute http"):
        search_provider(BrowserToolsConfig(search_url="searx.lan"))
