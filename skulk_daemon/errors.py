"""Refusals a client should see, free of any web framework.

Services (chat, embeddings, placement, operator, extensions) raise :class:`ApiError`
with the HTTP status the spec names; ``skulk_daemon/api/errors.py`` renders it in the
envelope of the surface that answers (OpenAI's, Anthropic's, Ollama's).
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

T = TypeVar("T")

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
    504: "timeout_error",
}


class ApiError(Exception):
    """An error a client should see, with the HTTP status the spec names."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        code: str,
        type: str | None = None,
        headers: dict[str, str] | None = None,
        detail: object = None,
    ) -> None:
        super().__init__(message)
        self.detail = detail
        """Extra JSON the body carries beside the envelope as ``detail`` (the steward's
        503 carries its status there)."""
        self.status_code = status_code
        self.message = message
        self.code = code
        self.type = type or _TYPE_BY_STATUS.get(status_code, "api_error")
        self.headers = headers or {}


def bad_request(message: str, code: str = "invalid_request") -> ApiError:
    """A 400 with the given message and code."""
    return ApiError(400, message, code=code)


def nested_too_deeply() -> ApiError:
    """What a body nested past the interpreter's recursion limit gets: msgspec (like
    Python's own decoders) recurses once per array or object, so about 1,000 levels
    raise ``RecursionError``. Every surface maps that error to this 400."""
    return bad_request("the body nests JSON arrays or objects too deeply", code="invalid_json")


def decode_json(raw: bytes, decoder: msgspec.json.Decoder[T]) -> T:
    """A request body decoded strictly: a 400 naming the problem when it is not
    JSON (``invalid_json``) or not the expected shape (``invalid_request``)."""
    try:
        return decoder.decode(raw)
    except RecursionError:
        raise nested_too_deeply() from None
    except msgspec.ValidationError as exc:
        raise bad_request(f"invalid request: {exc}") from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"the body is not valid JSON: {exc}", code="invalid_json") from None


# Every response of the operator authority may carry a secret (or answer a request that
# did): no browser, proxy or client cache may keep it.
NO_STORE_HEADERS = {"Cache-Control": "no-store, max-age=0", "Pragma": "no-cache"}


def error_body(message: str, type_: str, code: str | None) -> dict[str, object]:
    return {"error": {"message": message, "type": type_, "code": code}}
