from __future__ import annotations

from pathlib import Path

import pytest

from tests.engines.demo_model import demo_model_path


@pytest.fixture(scope="session")
def demo_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_model_path(tmp_path_factory)
