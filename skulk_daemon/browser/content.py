"""Response content types: normalizing the header, sniffing when it is missing, decoding."""

from __future__ import annotations

import codecs
from enum import Enum

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
# Read as they are: a model reads Markdown, CSV and JSON as well as prose.
TEXT_TYPES = frozenset(
    {"text/plain", "text/markdown", "text/x-markdown", "text/csv", "application/json"}
)

_SNIFF_BYTES = 1024
_HTML_MARKERS = (b"<!doctype html", b"<html", b"<head", b"<body")


class ContentKind(Enum):
    HTML = "html"
    TEXT = "text"
    OTHER = "other"


def parse_content_type(header: str | None) -> tuple[str | None, str | None]:
    """``"Text/HTML; charset=UTF-8"`` -> ``("text/html", "utf-8")``.

    The media type is lowercase without parameters, or ``None`` when the header is
    missing or malformed; the charset is ``None`` unless Python knows the codec.
    """
    if not header:
        return None, None
    media, *params = header.split(";")
    media = media.strip().lower()
    kind, slash, subtype = media.partition("/")
    if not (kind and slash and subtype) or " " in media:
        return None, None
    charset = None
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            candidate = value.strip().strip("'\"").lower()
            try:
                codecs.lookup(candidate)
            except LookupError:
                continue
            charset = candidate
    return media, charset


def kind_of(content_type: str | None, body_start: bytes | None = None) -> ContentKind:
    """What the page is; with no declared type, judge from the first bytes if given."""
    if content_type in HTML_TYPES:
        return ContentKind.HTML
    if content_type in TEXT_TYPES:
        return ContentKind.TEXT
    if content_type is not None or body_start is None:
        return ContentKind.OTHER
    head = body_start[:_SNIFF_BYTES].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if any(marker in head for marker in _HTML_MARKERS):
        return ContentKind.HTML
    if b"\x00" in head:
        return ContentKind.OTHER
    try:
        # A multi-byte character cut at the sniff boundary is still text.
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:
            return ContentKind.OTHER
    return ContentKind.TEXT


def decode_text(body: bytes, charset: str | None) -> str:
    """The body as text: the declared charset, else UTF-8 (BOM honoured), never failing."""
    text = body.decode(charset or "utf-8-sig", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
