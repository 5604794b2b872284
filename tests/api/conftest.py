"""In-process apps for the API suites (see ``tests/api/in_process.py``).

``bare_app`` and ``demo_app`` are shared by the whole session: a test that uses one
leaves it as it found it (no instance placed on ``bare_app`` at its end, no generation
left running on ``demo_app``). ``make_app`` builds a fresh one for a test that needs
its own ``skulk.yaml`` or environment.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.api.in_process import AppFactory, AppNode, Served
from tests.daemon.serving import CONTEXT, place


@pytest.fixture(scope="session")
def bare_app(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[AppNode]:
    """A node with nothing placed."""
    with AppNode(root=tmp_path_factory.mktemp("bare-app"), models_dir=shared_models_dir) as app:
        yield app


@pytest.fixture(scope="session")
def demo_app(tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path) -> Iterator[Served]:
    """A node serving the demo model (context 1024) on one runner."""
    with AppNode(root=tmp_path_factory.mktemp("demo-app"), models_dir=shared_models_dir) as app:
        yield Served(app, place(app, context=CONTEXT))


@pytest.fixture
def make_app(tmp_path: Path, shared_models_dir: Path) -> Iterator[AppFactory]:
    """Fresh apps for one test, closed when it ends."""
    with ExitStack() as stack:

        def factory(name: str = "node", *, config_yaml: str | None = None) -> AppNode:
            app = AppNode(
                root=tmp_path / name, models_dir=shared_models_dir, config_yaml=config_yaml
            )
            return stack.enter_context(app)

        yield factory
