"""Fixtures for the store suites: the hub suites' demo GGUF and seeded models dirs, the
fake hub, and one store-host app on the real Litestar app per module (a module that
needs another kind of app defines its own ``app``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.in_process import AppNode
from tests.daemon_process import free_port
from tests.hub.conftest import demo_gguf, models_dir
from tests.hub.fake_hub import FakeHub
from tests.store.store_app import fake_hub, fetch_tiny, store_host_app

__all__ = ["app", "demo_gguf", "hub", "models_dir", "store_port", "stored"]


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    with fake_hub() as served:
        yield served


@pytest.fixture(scope="module")
def store_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def app(
    hub: FakeHub, tmp_path_factory: pytest.TempPathFactory, models_dir: Path, store_port: int
) -> Iterator[AppNode]:
    """A store-host app on ``store_port``, pointed at the fake hub."""
    with store_host_app(tmp_path_factory.mktemp("store-app"), models_dir, store_port) as node:
        yield node


@pytest.fixture(scope="module")
def stored(app: AppNode) -> str:
    """TINY, added and fetched into the store."""
    return fetch_tiny(app)
