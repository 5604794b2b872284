"""The official SDK clients, imported when a test first uses one, not at collection.

``anthropic`` and ``openai`` (their pydantic types) were about half of everything that
collecting the suite imports, and every xdist worker collects every module; most
workers never run a test that uses them. ``from tests.lazy_sdk import openai`` binds a
stand-in that imports the real module on the first public attribute a test reads
(``openai.OpenAI``); annotations (``from __future__ import annotations``) never touch it.

Collection looks at every name a test module holds (pytest asks for ``__test__``,
``_mock_name``, ``__wrapped__``...): those private names answer ``AttributeError``
without importing anything, as no SDK's public API starts with ``_``.
"""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    def __init__(self, name: str) -> None:
        self._lazy_name = name

    def __getattr__(self, attribute: str) -> Any:
        # NOTE: only called for what the stand-in lacks; a private name is collection
        # probing the object, never a test using the SDK.
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        return getattr(importlib.import_module(self._lazy_name), attribute)

    def __repr__(self) -> str:
        return f"<lazy module {self._lazy_name!r}>"


anthropic: Any = LazyModule("anthropic")
ollama: Any = LazyModule("ollama")
openai: Any = LazyModule("openai")
