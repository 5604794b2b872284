"""POST /bench/chat/completions and /bench/images/*."""

from __future__ import annotations

from litestar import Controller


class BenchController(Controller):
    tags = ("Benchmark",)
