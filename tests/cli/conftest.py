"""Fixtures for the CLI tests: a stand-in node on a real socket, and a dead URL."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from .fake_node import (
    CHAT_COMMAND_ID,
    CLAUDE_MESSAGE,
    COMPLETION,
    CONFIG,
    DELETE_RESPONSE,
    IDENTITY,
    INSTANCE_DETAIL,
    MODELS,
    OLLAMA_CHAT,
    PLACE_RESPONSE,
    PREVIEWS,
    STATE,
    Answer,
    FakeNode,
    Recorded,
    bench_response,
    chat_stream,
    claude_stream,
    ndjson_reply,
    ollama_stream,
    sse_reply,
    start,
)


def _streaming(request: Recorded, default: bool) -> bool:
    return bool(request.body.get("stream", default)) if isinstance(request.body, dict) else default


def _chat(request: Recorded) -> Answer:
    return sse_reply(chat_stream()) if _streaming(request, False) else (200, COMPLETION)


def _messages(request: Recorded) -> Answer:
    return sse_reply(claude_stream()) if _streaming(request, False) else (200, CLAUDE_MESSAGE)


def _ollama_chat(request: Recorded) -> Answer:
    # Ollama streams unless the request says otherwise.
    return ndjson_reply(ollama_stream()) if _streaming(request, True) else (200, OLLAMA_CHAT)


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
            ("POST", "/v1/messages"): _messages,
            ("POST", "/ollama/api/chat"): _ollama_chat,
            ("POST", "/bench/chat/completions"): (200, bench_response()),
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
