"""Request-scoped images: decoded from the request, bounded, never stored.

Only inline images are accepted (``data:`` URLs, base64 blocks): fetching a remote
URL on a client's behalf would let any caller make the node fetch anything.
"""

from __future__ import annotations

import base64
import binascii
import re

from skulk_daemon.chat.task import ImageInput
from skulk_daemon.errors import ApiError

_DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^,;]*)*?)(;base64)?,", re.I)


def _bad(message: str) -> ApiError:
    return ApiError(400, message, code="invalid_image")


def image_from_base64(data: str, media_type: str = "image/png") -> ImageInput:
    if not media_type.lower().startswith("image/"):
        raise _bad(f"unsupported image media type {media_type!r}")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise _bad("image data is not valid base64") from None
    if not raw:
        raise _bad("image data is empty")
    return ImageInput(media_type=media_type.lower(), data=raw, encoded_bytes=len(data))


def image_from_url(url: str) -> ImageInput:
    """An image from a ``data:`` URL; any other URL is refused."""
    match = _DATA_URL.match(url)
    if match is None:
        raise _bad("only inline data: URLs are accepted for images")
    if not url[: match.end()].lower().rstrip(",").endswith(";base64"):
        raise _bad("image data: URLs must be base64-encoded")
    return image_from_base64(url[match.end() :], match.group("type") or "image/png")
