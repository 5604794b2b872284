"""Fixtures for the store suites: the hub suites' demo GGUF and seeded models dirs."""

from __future__ import annotations

from tests.hub.conftest import demo_gguf, models_dir

__all__ = ["demo_gguf", "models_dir"]
