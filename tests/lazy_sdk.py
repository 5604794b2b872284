"""The official SDK clients, imported when a test first touches one, not at collection.

``anthropic`` and ``openai`` (their pydantic types) are about half of everything that
collecting the suite imports, and every xdist worker collects every module; most
workers never run a test that uses them. ``from tests.lazy_sdk import openai`` binds a
module whose body runs on its first attribute access (``importlib.util.LazyLoader``);
annotations (``from __future__ import annotations``) never touch it.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy(name: str) -> ModuleType:
    """``name`` as a module that is imported on first use (the real one if it already is)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None, name
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


anthropic = lazy("anthropic")
ollama = lazy("ollama")
openai = lazy("openai")
