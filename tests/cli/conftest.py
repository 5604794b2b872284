"""Fixtures for the CLI tests: a stand-in node on a real socket, and a dead URL."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from .fake_node import (
    CHAT_COMMAND_ID,
    COMPLETION,
    CONFIG,
    DELETE_RESPONSE,
    IDENTITY,
    INSTANCE_DETAIL,
    MODELS,
    PLACE_RESPONSE,
    PREVIEWS,
    STATE,
    Answer,
    FakeNode,
    Recorded,
    chat_stream,
    sse_reply,
    start,
)


def _chat(request: Recorded) -> Answer:
    streaming = isinstance(request.body, dict) and request.body.get("stream")
    return sse_reply(chat_stream()) if streaming else (200, COMPLETION)


@pytest.fixture
def node() -> Iterator[FakeNode]:
    fake = FakeNode(
        routes={
            ("GET", "/node/identity"): (200, IDENTITY),
            ("GET", "/state"): (200, STATE),
            ("GET", "/v1/models"): (200, MODELS),
            ("GET", "/config"): (200, CONFIG),
            ("GET", "/instance/previews"): (200, PREVIEWS),
            ("POST", "/place_instance"): (200, PLACE_RESPONSE),
            ("GET", "/instance/inst-1"): (200, INSTANCE_DETAIL),
            ("DELETE", "/instance/inst-1"): (200, DELETE_RESPONSE),
            ("POST", "/v1/chat/completions"): _chat,
            ("POST", f"/v1/cancel/{CHAT_COMMAND_ID}"): (
                200,
                {"message": "Command cancelled.", "command_id": CHAT_COMMAND_ID},
            ),
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
