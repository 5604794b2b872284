"""Every error leaves the API in the OpenAI-style envelope ``{"error": {...}}``.

Domain code raises :class:`ApiError` (or a domain exception mapped here); Litestar's
own exceptions (validation, not found, method not allowed) are rewrapped so a client
never sees two error shapes.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

import msgspec
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from skulk_daemon.node import CommandRefused
from skulk_daemon.operator.errors import AuthorityError

log = logging.getLogger(__name__)

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

_STATUS_BY_REFUSAL = {
    "not_found": 404,
    "instance_exists": 409,
    "no_master": 503,
    "event_log_unwritable": 503,
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
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.code = code
        self.type = type or _TYPE_BY_STATUS.get(status_code, "api_error")
        self.headers = headers or {}


def bad_request(message: str, code: str = "invalid_request") -> ApiError:
    """A 400 with the given message and code."""
    return ApiError(400, message, code=code)


def decode_json(raw: bytes, decoder: msgspec.json.Decoder[T]) -> T:
    """A request body decoded strictly: a 400 naming the problem when it is not
    JSON (``invalid_json``) or not the expected shape (``invalid_request``)."""
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise bad_request(f"invalid request: {exc}") from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"the body is not valid JSON: {exc}", code="invalid_json") from None


# Every response of the operator authority may carry a secret (or answer a request that
# did): no browser, proxy or client cache may keep it.
NO_STORE_HEADERS = {"Cache-Control": "no-store, max-age=0", "Pragma": "no-cache"}


def authority_api_error(exc: AuthorityError, *, status: int | None = None) -> ApiError:
    """The one mapping of a pairing-authority refusal to HTTP (``status`` overrides the
    class's own where a route's spec names another one); 429 carries ``Retry-After``."""
    headers = dict(NO_STORE_HEADERS)
    if exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, exc.retry_after))
    if exc.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return ApiError(status or exc.status, exc.message, code=exc.code, headers=headers)


def error_body(message: str, type_: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": code}}


def _respond(exc: ApiError) -> Response[dict[str, Any]]:
    return Response(
        content=error_body(exc.message, exc.type, exc.code),
        status_code=exc.status_code,
        media_type=MediaType.JSON,
        headers=exc.headers,
    )


def handle_api_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[dict[str, Any]]:
    return _respond(exc)


def handle_refused(_: Request[Any, Any, Any], exc: CommandRefused) -> Response[dict[str, Any]]:
    return _respond(ApiError(_STATUS_BY_REFUSAL.get(exc.code, 400), exc.message, code=exc.code))


def handle_authority_error(
    _: Request[Any, Any, Any], exc: AuthorityError
) -> Response[dict[str, Any]]:
    return _respond(authority_api_error(exc))


def handle_http_exception(
    _: Request[Any, Any, Any], exc: HTTPException
) -> Response[dict[str, Any]]:
    message = exc.detail
    if isinstance(exc, ValidationException) and isinstance(exc.extra, list) and exc.extra:
        details = "; ".join(
            f"{item.get('key', '')}: {item.get('message', '')}".strip(": ")
            for item in exc.extra
            if isinstance(item, dict)
        )
        if details:
            message = f"{exc.detail}: {details}"
    status = exc.status_code
    code = "validation_error" if isinstance(exc, ValidationException) else f"http_{status}"
    return _respond(ApiError(status, message, code=code, headers=dict(exc.headers or {})))


def handle_unexpected(_: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    # The traceback goes to the node's log; the client gets no internals.
    log.exception("unhandled error while serving a request", exc_info=exc)
    return _respond(
        ApiError(
            HTTP_500_INTERNAL_SERVER_ERROR,
            "internal error; see the node's log",
            code="internal_error",
            type="api_error",
        )
    )


EXCEPTION_HANDLERS = {
    ApiError: handle_api_error,
    CommandRefused: handle_refused,
    AuthorityError: handle_authority_error,
    HTTPException: handle_http_exception,
    Exception: handle_unexpected,
}
