"""An image request as the routes read it: a JSON body, or an edit's multipart form.

The form's fields mirror the JSON ones (numbers and booleans as text,
``advanced_params`` as a JSON string) plus the ``image`` upload (``image[]``, as
OpenAI's SDK names a list, is taken too) and ``input_fidelity``. Each is decoded into
the same :class:`~skulk_daemon.images.protocol.ImageGenerationRequest`, so both
routes share one admission.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec

from skulk_daemon.errors import bad_request as _bad
from skulk_daemon.errors import decode_json
from skulk_daemon.images.protocol import (
    MAX_EDIT_IMAGE_BYTES,
    AdvancedParams,
    ImageGenerationRequest,
)

_REQUEST: Final = msgspec.json.Decoder(ImageGenerationRequest)
_ADVANCED: Final = msgspec.json.Decoder(AdvancedParams)
TEXT_FIELDS: Final = ("model", "prompt", "size", "quality", "output_format", "response_format")
TRUE: Final = frozenset({"true", "1", "yes", "on"})
FALSE: Final = frozenset({"false", "0", "no", "off", ""})


@dataclass(frozen=True, slots=True)
class EditForm:
    body: ImageGenerationRequest
    image: bytes | None
    input_fidelity: str | None


def decode_generation(raw: bytes) -> ImageGenerationRequest:
    return decode_json(raw, _REQUEST)


def _int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise _bad(f"{name} must be an integer, got {value!r}") from None


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in TRUE:
        return True
    if lowered in FALSE:
        return False
    raise _bad(f"{name} must be true or false, got {value!r}")


async def edit_form(fields: dict[str, str], files: dict[str, object]) -> EditForm:
    """``fields`` are the form's text values, ``files`` its uploads (by field name);
    a file where text belongs, or text where the image belongs, is a 400."""
    for name in files:
        if name not in ("image", "image[]", "mask"):
            raise _bad(f"{name} must be a form field, not a file")
    if "mask" in files or "mask" in fields:
        raise _bad("mask is not supported: the edit changes the whole image")
    if "image" in fields or "image[]" in fields:
        raise _bad("image must be an uploaded file; server paths and URLs are not accepted")
    upload = files.get("image", files.get("image[]"))
    image = None
    if upload is not None:
        read = getattr(upload, "read", None)
        if read is None:
            raise _bad("image must be an uploaded file")
        image = await read(MAX_EDIT_IMAGE_BYTES + 1)
        assert isinstance(image, bytes)
    advanced = None
    if fields.get("advanced_params"):
        advanced = decode_json(fields["advanced_params"].encode(), _ADVANCED)
    values: dict[str, object] = {name: fields[name] for name in TEXT_FIELDS if name in fields}
    if "n" in fields:
        values["n"] = _int("n", fields["n"])
    if "partial_images" in fields:
        values["partial_images"] = _int("partial_images", fields["partial_images"])
    if fields.get("output_compression"):
        values["output_compression"] = _int("output_compression", fields["output_compression"])
    if "stream" in fields:
        values["stream"] = _bool("stream", fields["stream"])
    try:
        body = msgspec.convert(values, ImageGenerationRequest)
    except msgspec.ValidationError as exc:
        raise _bad(f"invalid form: {exc}") from None
    if advanced is not None:
        body = msgspec.structs.replace(body, advanced_params=advanced)
    return EditForm(body=body, image=image, input_fidelity=fields.get("input_fidelity"))
