from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engines.demo_model import demo_model_path
from tests.engines.serving import Served, serve


@pytest.fixture(scope="session")
def demo_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_model_path(tmp_path_factory)


@pytest.fixture(scope="module")
def served(demo_gguf: Path) -> Iterator[Served]:
    yield from serve(demo_gguf)
