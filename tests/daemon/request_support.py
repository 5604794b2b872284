"""Helpers for the request-decoding tests: bodies in, tasks or refusals out."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest

from skulk_daemon.chat import claude_request, ollama_request, openai_request, responses_request
from skulk_daemon.chat.task import ChatTask
from skulk_daemon.errors import ApiError

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
"""An image's bytes as base64 (the magic number is enough: nothing decodes pixels)."""
DATA_URL = f"data:image/png;base64,{PNG}"

Body = dict[str, Any]
Adapter = Callable[[Body], ChatTask]

FREE_FORM = frozenset({"schema", "parameters", "input_schema", "input", "arguments", "metadata"})
"""Keys whose value is arbitrary JSON (a schema, tool input): an extra key there is data."""


def _raw(body: Body) -> bytes:
    return json.dumps(body).encode()


def openai(body: Body) -> ChatTask:
    return openai_request.to_task(openai_request.decode_chat_request(_raw(body)))


def responses(body: Body) -> ChatTask:
    return responses_request.to_task(responses_request.decode_responses_request(_raw(body)))


def claude(body: Body) -> ChatTask:
    return claude_request.to_task(claude_request.decode_messages_request(_raw(body)))


def ollama_chat(body: Body) -> ChatTask:
    return ollama_request.chat_to_task(ollama_request.decode_chat(_raw(body)), "m")


def ollama_generate(body: Body) -> ChatTask:
    return ollama_request.generate_to_task(ollama_request.decode_generate(_raw(body)), "m")


def refusal(adapter: Adapter, body: Body) -> ApiError:
    """The refusal ``body`` gets; fails the test if it is accepted."""
    with pytest.raises(ApiError) as raised:
        adapter(body)
    return raised.value


def assert_refused(adapter: Adapter, body: Body, code: str, says: str = "") -> None:
    error = refusal(adapter, body)
    assert (error.status_code, error.code) == (400, code), error.message
    assert says in error.message


def with_unknown_fields(value: Any) -> Any:
    """``value`` with an unknown key added to every object that is not free-form JSON."""
    if isinstance(value, list):
        return [with_unknown_fields(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {
        key: item if key in FREE_FORM else with_unknown_fields(item) for key, item in value.items()
    }
    out["x_future_field"] = {"nested": [1, "two"]}
    return out
