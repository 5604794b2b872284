"""Readable text and a title from an HTML page (BeautifulSoup, stdlib ``html.parser``).

The aim is what a person would read: the article, not the menus. Noise elements are
skipped, ``<article>``/``<main>`` is preferred when the page has one, whitespace is
collapsed within a block and blocks are kept apart by a blank line.
"""

from __future__ import annotations

import codecs
import re
import warnings

import msgspec
from bs4 import BeautifulSoup, MarkupResemblesLocatorWarning, XMLParsedAsHTMLWarning
from bs4.dammit import EncodingDetector
from bs4.element import CData, NavigableString, PageElement, PreformattedString, Tag

# NOTE: filtered process-wide rather than per call: warnings.catch_warnings() is not
# thread-safe and pages are parsed in worker threads. Both only say that the markup
# looks like a URL or like XHTML, which is expected of pages from the web.
warnings.filterwarnings("ignore", category=MarkupResemblesLocatorWarning)
warnings.filterwarnings("ignore", category=XMLParsedAsHTMLWarning)

MAX_TITLE_CHARS = 300
# An <article> shorter than this is a teaser card, not the page's content.
MIN_ARTICLE_CHARS = 140
# Where <meta charset> is looked for.
_DECLARATION_BYTES = 4096
# When clipping, back up to a word boundary if one is this close to the limit.
_WORD_BACKOFF_CHARS = 200

NOISE_TAGS = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "nav",
        "footer",
        "header",
        "aside",
        "form",
        "head",
        "title",
        "iframe",
        "object",
        "embed",
        "canvas",
        "button",
        "select",
        "dialog",
    }
)
BLOCK_TAGS = frozenset(
    {
        "address",
        "article",
        "blockquote",
        "body",
        "caption",
        "center",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "hr",
        "html",
        "li",
        "main",
        "ol",
        "p",
        "section",
        "summary",
        "table",
        "tbody",
        "tfoot",
        "thead",
        "tr",
        "ul",
    }
)
_CELL_TAGS = frozenset({"td", "th"})
_DISPLAY_NONE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)


class ReadablePage(msgspec.Struct, frozen=True, kw_only=True):
    title: str | None
    text: str


class _BlockEnd:
    """A marker on the walk's stack: the block element opened earlier ends here."""


_BLOCK_END = _BlockEnd()


def _squash(text: str) -> str:
    return " ".join(text.split())


def _attr(tag: Tag, name: str) -> str:
    value = tag.get(name)
    if value is None:
        return ""
    return value if isinstance(value, str) else " ".join(value)


def page_title(soup: BeautifulSoup) -> str | None:
    """``<title>``, else ``og:title``, else the first ``<h1>``; ``None`` when none has text."""
    candidates: list[str] = []
    for element in soup.find_all("title"):
        if isinstance(element, Tag) and element.find_parent("svg") is None:
            candidates.append(element.get_text())
            break
    for meta in soup.find_all("meta"):
        if isinstance(meta, Tag) and "og:title" in (_attr(meta, "property"), _attr(meta, "name")):
            candidates.append(_attr(meta, "content"))
            break
    h1 = soup.find("h1")
    if isinstance(h1, Tag):
        candidates.append(h1.get_text())
    for candidate in candidates:
        squashed = _squash(candidate)
        if squashed:
            return squashed[:MAX_TITLE_CHARS]
    return None


def _content_root(soup: BeautifulSoup) -> Tag:
    body = soup.body or soup
    articles = body.find_all("article")
    main = body.find("main")
    candidate = articles[0] if len(articles) == 1 else main
    if isinstance(candidate, Tag) and len(_squash(candidate.get_text())) >= MIN_ARTICLE_CHARS:
        return candidate
    if isinstance(main, Tag) and main is not candidate and len(_squash(main.get_text())) > 0:
        return main
    return body


def _hidden(tag: Tag) -> bool:
    return (
        tag.has_attr("hidden")
        or _attr(tag, "aria-hidden").lower() == "true"
        or bool(_DISPLAY_NONE.search(_attr(tag, "style")))
    )


def _skipped(tag: Tag) -> bool:
    if tag.name in NOISE_TAGS:
        # An article's own header holds its headline and byline: that is content.
        return not (tag.name == "header" and tag.find_parent("article") is not None)
    return _hidden(tag)


def _blocks(root: Tag) -> list[str]:
    blocks: list[str] = []
    line: list[str] = []

    def flush() -> None:
        lines = (_squash(part) for part in "".join(line).split("\n"))
        text = "\n".join(part for part in lines if part)
        line.clear()
        if text:
            blocks.append(text)

    # NOTE: an explicit stack, not recursion: pages nest deeper than Python's recursion
    # limit often enough (generated markup, hostile pages).
    stack: list[PageElement | _BlockEnd] = list(reversed(list(root.children)))
    while stack:
        item = stack.pop()
        if isinstance(item, _BlockEnd):
            flush()
        elif isinstance(item, Tag):
            if _skipped(item):
                continue
            name = item.name
            if name == "br":
                line.append("\n")
                continue
            if name == "pre":
                flush()
                text = "\n".join(part.rstrip() for part in item.get_text().split("\n"))
                if text.strip():
                    blocks.append(text.strip("\n"))
                continue
            if name in BLOCK_TAGS:
                flush()
                if name == "li":
                    line.append("- ")
                stack.append(_BLOCK_END)
            elif name in _CELL_TAGS:
                line.append(" ")
            stack.extend(reversed(list(item.children)))
        elif isinstance(item, CData) or (
            isinstance(item, NavigableString) and not isinstance(item, PreformattedString)
        ):
            # Source line breaks are whitespace; only <br> and blocks break lines.
            line.append(str(item).replace("\n", " "))
        # Comments, doctypes and processing instructions carry no readable text.
    flush()
    return blocks


def decode_html(body: bytes, charset: str | None) -> str:
    """The page as text: BOM, then the header's charset, then ``<meta charset>``, then UTF-8.

    NOTE: decoded here rather than by BeautifulSoup, whose fallback is a statistical
    charset detector run over the whole (up to 5 MiB) body.
    """
    body, bom_encoding = EncodingDetector.strip_byte_order_mark(body)
    encoding = bom_encoding or charset
    if encoding is None:
        declared = EncodingDetector.find_declared_encoding(body[:_DECLARATION_BYTES], is_html=True)
        encoding = _known_codec(declared)
    if encoding is not None:
        return body.decode(encoding, errors="replace")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A body clipped at the size limit can end inside a character: still UTF-8.
        fallback = "utf-8" if exc.start >= len(body) - 4 else "windows-1252"
        return body.decode(fallback, errors="replace")


def _known_codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def parse_html(body: bytes, charset: str | None) -> BeautifulSoup:
    return BeautifulSoup(decode_html(body, charset), "html.parser")


def readable_html(soup: BeautifulSoup) -> ReadablePage:
    """The page's title and readable text (unclipped)."""
    title = page_title(soup)
    return ReadablePage(title=title, text=_join(_blocks(_content_root(soup))))


def _join(blocks: list[str]) -> str:
    # Blank lines between blocks, but list items stay together as one list.
    parts: list[str] = []
    for index, block in enumerate(blocks):
        if index:
            both_items = block.startswith("- ") and blocks[index - 1].startswith("- ")
            parts.append("\n" if both_items else "\n\n")
        parts.append(block)
    return "".join(parts)


def clip(text: str, max_chars: int) -> tuple[str, bool]:
    """``text`` cut to at most ``max_chars``, at a word boundary when one is near."""
    if len(text) <= max_chars:
        return text, False
    cut = text[:max_chars]
    boundary = max(cut.rfind(" "), cut.rfind("\n"))
    if boundary >= max_chars - _WORD_BACKOFF_CHARS and boundary > 0:
        cut = cut[:boundary]
    return cut.rstrip(), True
