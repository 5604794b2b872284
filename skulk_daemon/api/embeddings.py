"""POST /v1/embeddings."""

from __future__ import annotations

from litestar import Controller


class EmbeddingsController(Controller):
    tags = ("OpenAI",)
