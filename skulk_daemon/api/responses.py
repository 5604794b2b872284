"""POST /v1/responses."""

from __future__ import annotations

from litestar import Controller


class ResponsesController(Controller):
    tags = ("OpenAI",)
