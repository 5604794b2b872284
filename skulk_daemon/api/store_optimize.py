"""``POST /store/models/{model_id}/optimize`` and ``GET .../optimize/status``.

Model ids carry ``/``, so the store's routes are one ``{rest:path}`` per method in
:class:`~skulk_daemon.api.store.StoreController` (a second controller's path route
under ``/store/models/`` would never be reached: Litestar matches the path parameter
first); those handlers hand the ``/optimize`` suffixes to the two functions here.

On the store host the optimizer answers directly
(:class:`~skulk_daemon.store.optimizer.Optimizer`); any other node relays the request
to the store host's internal transport, which answers from the same optimizer. 400
for a malformed body, 404 for a model the store lacks or a job it does not know, 409
for a conflicting job or an existing result, 503 where no store or no optimizer is.
"""

from __future__ import annotations

from typing import Final, TypeVar

import msgspec

from skulk_core.store.optimize import (
    OptimizeRequest,
    OptimizeStarted,
    OptimizeStatus,
    request_problem,
)
from skulk_daemon.errors import ApiError
from skulk_daemon.store.optimizer import OptimizeRefused
from skulk_daemon.store.service import NOT_CONFIGURED, StoreService, StoreUnavailable

OPTIMIZE: Final = "/optimize"
OPTIMIZE_STATUS: Final = "/optimize/status"
_DECODER: Final = msgspec.json.Decoder(OptimizeRequest)
T = TypeVar("T")


def decode_request(body: bytes) -> OptimizeRequest:
    """The optional body (empty: the defaults), or a 400 saying what is wrong."""
    if not body.strip():
        return OptimizeRequest()
    try:
        request = _DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise ApiError(400, f"invalid optimize body: {exc}", code="invalid_request") from None
    problem = request_problem(request)
    if problem is not None:
        raise ApiError(400, problem, code="invalid_request")
    return request


def _refused(exc: OptimizeRefused) -> ApiError:
    return ApiError(exc.status, exc.message, code=exc.code)


async def start_optimization(
    store: StoreService, model_id: str, request: OptimizeRequest
) -> OptimizeStarted:
    if store.host is not None:
        try:
            return await store.optimizer.start(model_id, request)
        except OptimizeRefused as exc:
            raise _refused(exc) from None
    body = msgspec.to_builtins(request)
    return await _relayed(
        store, "POST", store.model_path(model_id, OPTIMIZE), OptimizeStarted, body
    )


async def optimization_status(store: StoreService, model_id: str) -> OptimizeStatus:
    if store.host is not None:
        problem = store.optimizer.available()
        if problem is not None:
            raise ApiError(503, problem, code="optimizer_unavailable")
        try:
            return store.optimizer.status(model_id)
        except OptimizeRefused as exc:
            raise _refused(exc) from None
    path = store.model_path(model_id, OPTIMIZE_STATUS)
    return await _relayed(store, "GET", path, OptimizeStatus)


async def _relayed(
    store: StoreService, method: str, path: str, into: type[T], body: object = None
) -> T:
    if not store.configured():
        raise ApiError(503, NOT_CONFIGURED, code="store_not_configured")
    try:
        status, answer = await store.relay(method, path, body)
    except StoreUnavailable as exc:
        raise ApiError(
            502, f"the store host could not be reached: {exc}", code="store_unreachable"
        ) from None
    if status >= 400 or not isinstance(answer, dict):
        error = answer.get("error") if isinstance(answer, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        raise ApiError(
            status if status >= 400 else 502,
            str(message or "the store answered an unexpected body"),
            code=str(code or "store_error"),
        )
    try:
        return msgspec.convert(answer, into)
    except msgspec.ValidationError as exc:
        raise ApiError(
            502, f"the store answered a malformed body: {exc}", code="store_error"
        ) from None
