"""Content codings: which ones a response may use, and decoding one within a byte bound.

httpx decodes every coding a response lists, all of it, before the caller sees a byte,
so ``Content-Encoding: gzip, gzip`` turns 1.4 KB into 1.5 GiB ahead of any body limit.
The browser tools therefore read the raw stream and decode it here: one coding at
most, gzip or deflate, inflated a bounded step at a time and only until the caller's
limit of *decoded* bytes is reached; the rest of the compressed stream is never read.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterable

from skulk_daemon.browser.errors import UpstreamError

# Asked for on every request. One coding besides identity: nothing legitimate needs
# more, and only what :class:`BoundedDecoder` can decode incrementally is offered
# (brotli and zstd are not installed, and would need the same bounded treatment).
ACCEPT_ENCODING = "gzip, identity"
SUPPORTED_CODINGS = frozenset({"gzip", "x-gzip", "deflate"})
# The most one decompression step may produce, whatever room the caller has left:
# a 64 KiB chunk of zeros inflates to 64 MiB in one call otherwise.
MAX_INFLATE_STEP_BYTES = 256 * 1024

_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = zlib.MAX_WBITS | 16
# "deflate" is zlib-wrapped by the spec and raw deflate from some servers.
_ZLIB_WBITS = zlib.MAX_WBITS
_RAW_DEFLATE_WBITS = -zlib.MAX_WBITS


def response_coding(header_values: Iterable[str], source: str) -> str | None:
    """The single content coding of a response (``None``: identity).

    ``header_values`` are all of its ``Content-Encoding`` lines. More than one coding,
    or one this module cannot decode, is an :class:`UpstreamError` naming ``source``.
    """
    codings = [item.strip().lower() for value in header_values for item in value.split(",")]
    codings = [coding for coding in codings if coding and coding != "identity"]
    if len(codings) > 1:
        raise UpstreamError(
            f"{source} sent a body with more than one content coding "
            f"({', '.join(codings)}); refused, as stacked codings are how "
            "decompression bombs are built"
        )
    if not codings:
        return None
    if codings[0] not in SUPPORTED_CODINGS:
        raise UpstreamError(
            f"{source} sent a body in an unsupported content coding ({codings[0]!r}); "
            "the browser tools decode gzip and deflate"
        )
    return codings[0]


class BoundedDecoder:
    """Decodes one coding a step at a time; no step returns more than it is allowed."""

    def __init__(self, coding: str | None) -> None:
        self._coding = coding
        self._wbits = _GZIP_WBITS if coding in ("gzip", "x-gzip") else _ZLIB_WBITS
        self._inflater = zlib.decompressobj(self._wbits) if coding else None
        self._produced = False

    def step(self, data: bytes, max_length: int) -> tuple[bytes, bytes]:
        """Up to ``max_length`` decoded bytes from ``data``, and the input left over."""
        if self._inflater is None:
            return data[:max_length], data[max_length:]
        try:
            output = self._inflater.decompress(data, max_length)
        except zlib.error:
            if self._wbits != _ZLIB_WBITS or self._produced:
                raise
            # NOTE: as httpx does: a "deflate" body that is not zlib-wrapped from its
            # first byte is raw deflate.
            self._wbits = _RAW_DEFLATE_WBITS
            self._inflater = zlib.decompressobj(self._wbits)
            output = self._inflater.decompress(data, max_length)
        self._produced = self._produced or bool(output)
        leftover = self._inflater.unconsumed_tail
        if self._inflater.eof:
            rest = self._inflater.unused_data
            # A gzip body may be several members back to back; anything else after
            # the end of the stream is padding and ignored.
            if self._wbits == _GZIP_WBITS and rest.startswith(_GZIP_MAGIC):
                self._inflater = zlib.decompressobj(self._wbits)
                leftover = rest
            else:
                leftover = b""
        return output, leftover


async def read_decoded(
    raw: AsyncIterator[bytes], coding: str | None, limit: int, source: str
) -> tuple[bytes, bool]:
    """Up to ``limit`` decoded bytes of ``raw``; the flag says the body went on past them.

    Reading stops as soon as the limit is passed, so memory stays bounded by the
    limit however far the body would inflate.
    """
    if limit <= 0:
        return b"", False
    decoder = BoundedDecoder(coding)
    body = bytearray()
    try:
        async for chunk in raw:
            pending = chunk
            while pending:
                # One byte past the limit tells a body that goes on from one that ends.
                room = min(limit + 1 - len(body), MAX_INFLATE_STEP_BYTES)
                output, left = decoder.step(pending, room)
                body += output
                if len(body) > limit:
                    del body[limit:]
                    return bytes(body), True
                if not output and left == pending:
                    break
                pending = left
    except zlib.error as exc:
        raise UpstreamError(f"{source} sent a body that is not valid {coding}: {exc}") from None
    return bytes(body), False
