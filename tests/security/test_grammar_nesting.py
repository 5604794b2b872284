"""Nested repetitions cannot amplify a small schema into an enormous grammar (issue #36).

The converter names each nested rule after its parents, so 300 nested arrays of 4096
items (12.5 KB of request) once built a 937 MB grammar in the daemon. Every surface
that takes a schema is asked at once, against a real daemon, whose peak resident
memory must stay where it was.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from skulk_daemon.chat.grammars import MAX_SCHEMA_REPETITION
from tests.daemon.serving import DEMO
from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "Count: one, two, three,"}]


def nested_arrays(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema, "minItems": MAX_SCHEMA_REPETITION}
    return schema


NESTED = nested_arrays(300)
TOOL = {"name": "f", "description": "", "parameters": NESTED}
ATTACKS: list[tuple[str, dict[str, Any], str]] = [
    (
        "/v1/chat/completions",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": NESTED},
            }
        },
        "openai",
    ),
    (
        "/v1/chat/completions",
        {"tools": [{"type": "function", "function": TOOL}], "tool_choice": "required"},
        "openai",
    ),
    (
        "/v1/responses",
        {"text": {"format": {"type": "json_schema", "name": "x", "schema": NESTED}}},
        "openai",
    ),
    (
        "/v1/messages",
        {"tools": [{"name": "f", "input_schema": NESTED}], "tool_choice": {"type": "any"}},
        "anthropic",
    ),
    ("/ollama/api/chat", {"format": NESTED, "stream": False}, "ollama"),
]


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set so far (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc")


def _ask(daemon: DaemonProcess, path: str, extra: dict[str, Any]) -> tuple[httpx.Response, float]:
    body: dict[str, Any] = {"model": DEMO, "max_tokens": 4, **extra}
    if path == "/v1/responses":
        body["input"] = ASK[0]["content"]
    else:
        body["messages"] = ASK
    started = time.monotonic()
    answer = httpx.post(f"{daemon.url}{path}", json=body, timeout=60)
    return answer, time.monotonic() - started


def _refused_in_envelope(answer: httpx.Response, envelope: str) -> None:
    assert answer.status_code == 400, answer.text
    body = answer.json()
    match envelope:
        case "openai":
            assert "nesting" in body["error"]["message"], body
        case "anthropic":
            assert body["type"] == "error", body
            assert "nesting" in body["error"]["message"], body
        case "ollama":
            assert "nesting" in body["error"], body


def test_nested_repetitions_are_refused_at_once_on_every_surface(
    demo_served: tuple[DaemonProcess, str],
) -> None:
    daemon, _ = demo_served
    assert daemon.process is not None
    assert len(httpx.Response(200, json=NESTED).content) < 16 * 1024
    peak_before = peak_rss_bytes(daemon.process.pid)
    for path, extra, envelope in ATTACKS:
        answer, seconds = _ask(daemon, path, extra)
        _refused_in_envelope(answer, envelope)
        print(f"nested schema on {path}: refused in {seconds:.3f} s")
        assert seconds < 1.0, (path, seconds)
    # Three of each at once, as the review did.
    with ThreadPoolExecutor(max_workers=6) as pool:
        asked = [
            (pool.submit(_ask, daemon, path, extra), envelope)
            for path, extra, envelope in ATTACKS * 3
        ]
        for future, envelope in asked:
            _refused_in_envelope(future.result()[0], envelope)
    grown = peak_rss_bytes(daemon.process.pid) - peak_before
    print(f"nested schemas: daemon peak RSS {peak_before >> 20} MiB, grew {grown >> 20} MiB")
    assert grown < 100 * 1024 * 1024, f"the daemon's peak RSS grew by {grown >> 20} MiB"
    assert daemon.get("/state").status_code == 200
