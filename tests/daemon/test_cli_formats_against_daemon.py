"""`skulk chat --format` and `skulk bench` against a real daemon serving the demo model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.daemon.serving import DEMO, wait_idle
from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

PROMPT = "Count: one, two, three,"
GREEDY_8 = ("--max-tokens", "8", "--temperature", "0")
# What `skulk chat` prints after a reply, in every format.
SUMMARY = re.compile(r"finish: (\w+)(?: \((\w+)\))?; (\d+) tokens.*; prompt (\d+) tokens")


def skulk(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    # The real console script entry point, as a user runs it.
    return subprocess.run(
        [sys.executable, "-m", "skulk_cli", "--api-url", daemon.url, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        # Wide enough that the bench table's headings fit on one line each.
        env={**os.environ, "COLUMNS": "160"},
    )


def test_every_format_and_bench_from_the_cli(demo_served: tuple[DaemonProcess, str]) -> None:
    daemon, instance_id = demo_served
    replies: dict[str, tuple[str, tuple[str | None, ...]]] = {}
    for fmt in ("openai", "claude", "ollama"):
        chat = skulk(daemon, "chat", DEMO, PROMPT, "--format", fmt, *GREEDY_8)
        assert chat.returncode == 0, f"{fmt}: {chat.stderr}"
        summary = SUMMARY.search(chat.stderr)
        assert summary is not None, f"{fmt}: no summary in {chat.stderr!r}"
        replies[fmt] = (chat.stdout, summary.groups())

        refused = skulk(daemon, "chat", "nope", "hi", "--format", fmt)
        assert refused.returncode == 1
        assert "No instance found for model nope" in refused.stderr, f"{fmt}: {refused.stderr}"

    # Greedy, the same conversation: every API gives the same reply and the same counts.
    (text, (reason, _, generated, prompt)), *_ = replies.values()
    assert text.strip()
    assert {r[0] for r in replies.values()} == {text}
    assert {(r[1][0], r[1][2], r[1][3]) for r in replies.values()} == {(reason, generated, prompt)}
    if reason == "length":
        assert generated == "8"
        assert replies["claude"][1][1] == "max_tokens"

    table = skulk(daemon, "bench", DEMO, "--max-tokens", "4")
    assert table.returncode == 0, table.stderr
    assert f"Bench {DEMO}" in table.stdout
    cells = next(
        [c.strip() for c in line.split("│")[1:-1]]
        for line in table.stdout.splitlines()
        if line.startswith("│ 1 ")
    )
    # Run, prompt tokens and rate, first token ms, tokens and rate, batches, in flight, power.
    assert len(cells) == 9 and int(cells[4]) <= 4 and float(cells[5]) > 0
    assert cells[8] == "n/a" or float(cells[8]) > 0

    as_json = skulk(daemon, "--json", "bench", DEMO, "--max-tokens", "4")
    assert as_json.returncode == 0, as_json.stderr
    (response,) = json.loads(as_json.stdout)
    stats = response["generation_stats"]
    assert 0 < stats["generation_tokens"] <= 4
    assert stats["generation_tps"] > 0 and stats["time_to_first_token_ms"] > 0
    assert "power_usage" in response

    missing = skulk(daemon, "bench", "nope", "--max-tokens", "4")
    assert missing.returncode == 1
    assert "No instance found for model nope" in missing.stderr

    wait_idle(daemon, instance_id)
