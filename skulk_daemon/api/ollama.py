"""The Ollama-compatible group under /ollama."""

from __future__ import annotations

from litestar import Controller


class OllamaController(Controller):
    tags = ("Ollama",)
