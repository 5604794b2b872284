"""Every error leaves the API in the OpenAI-style envelope ``{"error": {...}}``.

Services raise :class:`~skulk_daemon.errors.ApiError` (or a domain exception mapped
here); Litestar's own exceptions (validation, not found, method not allowed) are
rewrapped so a client never sees two error shapes. The Claude and Ollama controllers
re-render the same errors in their own envelopes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, TypeVar

from litestar import MediaType, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from litestar.types import ExceptionHandlersMap

from skulk_core.state.decide import CARD_CONFLICT
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.errors import NO_STORE_HEADERS, ApiError, error_body, nested_too_deeply
from skulk_daemon.node.node import CommandRefused
from skulk_daemon.operator.errors import AuthorityError, authority_api_error

log = logging.getLogger(__name__)

ErrorResponse = Response[dict[str, object]]
"""An error in the ``{"error": {...}}`` envelope."""
E = TypeVar("E", bound=Exception)

_STATUS_BY_REFUSAL = {
    "not_found": 404,
    "instance_exists": 409,
    CARD_CONFLICT: 409,
    "no_master": 503,
    "event_log_unwritable": 503,
}


def _respond(exc: ApiError) -> ErrorResponse:
    body = error_body(exc.message, exc.type, exc.code)
    if exc.detail is not None:
        body["detail"] = exc.detail
    return Response(
        content=body,
        status_code=exc.status_code,
        media_type=MediaType.JSON,
        headers=exc.headers,
    )


def handle_api_error(_: HttpRequest, exc: ApiError) -> ErrorResponse:
    return _respond(exc)


def handle_refused(_: HttpRequest, exc: CommandRefused) -> ErrorResponse:
    return _respond(ApiError(_STATUS_BY_REFUSAL.get(exc.code, 400), exc.message, code=exc.code))


def handle_authority_error(_: HttpRequest, exc: AuthorityError) -> ErrorResponse:
    return _respond(authority_api_error(exc))


def handle_http_exception(_: HttpRequest, exc: HTTPException) -> ErrorResponse:
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


def handle_recursion(request: HttpRequest, _: RecursionError) -> ErrorResponse:
    # NOTE: a body nested past the recursion limit raises while it is decoded, in
    # msgspec, Litestar or a handler's own decoding alike; mapping the error here (and
    # in the Claude and Ollama maps) covers every route at once.
    log.warning("refused a request nested too deeply: %s %s", request.method, request.url.path)
    return _respond(nested_too_deeply())


def handle_unexpected(_: HttpRequest, exc: Exception) -> ErrorResponse:
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


EXCEPTION_HANDLERS: Final[ExceptionHandlersMap] = {
    ApiError: handle_api_error,
    CommandRefused: handle_refused,
    AuthorityError: handle_authority_error,
    HTTPException: handle_http_exception,
    RecursionError: handle_recursion,
    Exception: handle_unexpected,
}


def _no_store(
    handler: Callable[[HttpRequest, E], ErrorResponse],
) -> Callable[[HttpRequest, E], ErrorResponse]:
    def handle(request: HttpRequest, exc: E) -> ErrorResponse:
        response = handler(request, exc)
        for name, value in NO_STORE_HEADERS.items():
            response.headers[name] = value
        return response

    return handle


NO_STORE_EXCEPTION_HANDLERS: Final[ExceptionHandlersMap] = {
    kind: _no_store(handler) for kind, handler in EXCEPTION_HANDLERS.items()
}
"""The same handlers, every answer marked ``Cache-Control: no-store``: for controllers
whose refusals must not be cached either, the guard's (raised before any handler, so
a controller's ``response_headers`` never reach them) included."""
