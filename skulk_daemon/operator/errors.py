"""Refusals the pairing authority raises, each carrying the HTTP status the spec names.

``message`` is safe to show a client or log: it never contains a nonce, challenge,
token, carrier credential or key.
"""

from __future__ import annotations

from typing import ClassVar

from skulk_daemon.errors import NO_STORE_HEADERS, ApiError


class AuthorityError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[str] = "authority_error"

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class NotGateway(AuthorityError):
    """This node has not been initialized as the operator gateway."""

    status = 503
    code = "not_gateway"


class Unknown(AuthorityError):
    status = 404
    code = "not_found"


class Conflict(AuthorityError):
    """Another transition already used the session, attempt or credential."""

    status = 409
    code = "conflict"


class Expired(AuthorityError):
    """The session, attempt or invitation is expired, revoked, exhausted or used up."""

    status = 410
    code = "gone"


class Invalid(AuthorityError):
    status = 422
    code = "invalid"


class TooManyAttempts(AuthorityError):
    """Ten invitation attempts are already live; ``retry_after`` says when one expires."""

    status = 429
    code = "too_many_attempts"


class Unauthorized(AuthorityError):
    status = 401
    code = "unauthorized"


class Forbidden(AuthorityError):
    status = 403
    code = "forbidden"


class StoreCorrupt(AuthorityError):
    """The authority store failed authentication or is truncated: refuse, never reset."""

    status = 503
    code = "authority_store_corrupt"


def authority_api_error(exc: AuthorityError, *, status: int | None = None) -> ApiError:
    """The one mapping of a pairing-authority refusal to HTTP (``status`` overrides the
    class's own where a route's spec names another one); 429 carries ``Retry-After``."""
    headers = dict(NO_STORE_HEADERS)
    if exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, exc.retry_after))
    if exc.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return ApiError(status or exc.status, exc.message, code=exc.code, headers=headers)
