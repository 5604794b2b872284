"""Fixtures for the CLI tests: a stand-in node on a real socket, and a dead URL."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from .fake_node import CONFIG, IDENTITY, MODELS, STATE, FakeNode, start


@pytest.fixture
def node() -> Iterator[FakeNode]:
    fake = FakeNode(
        routes={
            ("GET", "/node/identity"): (200, IDENTITY),
            ("GET", "/state"): (200, STATE),
            ("GET", "/v1/models"): (200, MODELS),
            ("GET", "/config"): (200, CONFIG),
        }
    )
    server, thread = start(fake)
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def closed_url() -> str:
    """A loopback URL with nothing listening on it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
