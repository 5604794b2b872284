"""A body nested past the decoder's recursion limit is a 400, never a 500 (issue #36).

Each surface answers in its own envelope, whether the nesting is the whole body or
hides in a field that takes any JSON (a schema, a format, a tool's parameters).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.daemon.serving import DEMO
from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

DEEP = b"[" * 100_000 + b"]" * 100_000
ASK = b'[{"role": "user", "content": "Hi"}]'
MODEL = f'"{DEMO}"'.encode()

# (method, path, body, envelope)
CASES: list[tuple[str, str, bytes, str]] = [
    ("PUT", "/config", DEEP, "openai"),
    ("PUT", "/config", b'{"cluster": {"peers": ' + DEEP + b"}}", "openai"),
    ("POST", "/v1/responses", DEEP, "openai"),
    (
        "POST",
        "/v1/responses",
        b'{"model": ' + MODEL + b', "input": "Hi", "text": {"format": {"type": "json_schema", '
        b'"name": "x", "schema": {"a": ' + DEEP + b"}}}}",
        "openai",
    ),
    ("POST", "/v1/chat/completions", DEEP, "openai"),
    ("POST", "/v1/completions", DEEP, "openai"),
    ("POST", "/v1/completions", b'{"model": ' + MODEL + b', "prompt": ' + DEEP + b"}", "openai"),
    (
        "POST",
        "/v1/chat/completions",
        b'{"model": ' + MODEL + b', "messages": ' + ASK + b', "response_format": {"type": '
        b'"json_schema", "json_schema": {"name": "x", "schema": {"a": ' + DEEP + b"}}}}",
        "openai",
    ),
    ("POST", "/v1/messages", DEEP, "anthropic"),
    (
        "POST",
        "/v1/messages",
        b'{"model": ' + MODEL + b', "max_tokens": 4, "messages": ' + ASK + b', "tools": '
        b'[{"name": "f", "input_schema": {"a": ' + DEEP + b"}}]}",
        "anthropic",
    ),
    ("POST", "/ollama/api/chat", DEEP, "ollama"),
    (
        "POST",
        "/ollama/api/chat",
        b'{"model": ' + MODEL + b', "messages": ' + ASK + b', "format": {"a": ' + DEEP + b"}}",
        "ollama",
    ),
]


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    daemon = DaemonProcess(root=tmp_path_factory.mktemp("nested"), models_dir=shared_models_dir)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.kill()


@pytest.mark.parametrize(
    ("method", "path", "body", "envelope"),
    CASES,
    ids=[f"{path}-{'field' if body[:1] == b'{' else 'body'}" for _, path, body, _ in CASES],
)
def test_deep_nesting_is_a_bad_request_in_the_surfaces_envelope(
    node: DaemonProcess, method: str, path: str, body: bytes, envelope: str
) -> None:
    answer = httpx.request(
        method,
        f"{node.url}{path}",
        content=body,
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()
    match envelope:
        case "openai":
            assert error["error"]["message"], error
            assert error["error"]["type"] == "invalid_request_error", error
        case "anthropic":
            assert error["type"] == "error", error
            assert error["error"]["type"] == "invalid_request_error", error
        case "ollama":
            assert isinstance(error["error"], str), error
    assert node.get("/node_id").status_code == 200
