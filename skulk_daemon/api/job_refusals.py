"""How a media job family's refusals leave the API, for every media controller.

The services below raise :class:`~skulk_core.media.jobs.JobRefused` with the spec's
status; the controllers (``/v1/videos*``, ``/v1/music*``) answer it in the OpenAI
envelope through this one handler instead of catching it in every route."""

from __future__ import annotations

from typing import Final

from litestar.types import ExceptionHandlersMap

from skulk_core.media.jobs import JobRefused
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.errors import ErrorResponse, handle_api_error
from skulk_daemon.errors import ApiError


def refused(exc: JobRefused) -> ApiError:
    return ApiError(exc.status, exc.message, code=exc.code)


def handle_job_refused(request: HttpRequest, exc: JobRefused) -> ErrorResponse:
    return handle_api_error(request, refused(exc))


JOB_REFUSALS: Final[ExceptionHandlersMap] = {JobRefused: handle_job_refused}
"""A media controller's ``exception_handlers``."""
