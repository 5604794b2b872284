"""``POST /v1/completions`` and the base demo model on a real daemon, as the README
shows them: the official SDK (streaming and not), a chat turn and ``skulk chat``
all continue "2 + 2 =" the same way. (The default budget of a base card is checked
in-process, with a small ``inference.default_max_tokens``: tests/api.)"""

from __future__ import annotations

import re

import pytest

from tests.daemon.serving import DEMO, wait_idle
from tests.daemon.test_cli_formats_against_daemon import skulk
from tests.daemon_process import DaemonProcess
from tests.lazy_sdk import openai

pytestmark = pytest.mark.slow

SUM = "2 + 2 ="
SUMMARY = re.compile(r"finish: (\w+); (\d+) tokens.*; prompt (\d+) tokens")


def test_the_sdk_the_chat_route_and_the_cli_continue_the_same_text(
    demo_served: tuple[DaemonProcess, str],
) -> None:
    daemon, instance_id = demo_served
    with openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0) as client:
        whole = client.completions.create(model=DEMO, prompt=SUM, temperature=0, max_tokens=6)
        (choice,) = whole.choices
        assert whole.object == "text_completion" and choice.text.strip()
        assert whole.usage is not None and whole.usage.completion_tokens <= 6

        stream = client.completions.create(
            model=DEMO, prompt=SUM, temperature=0, max_tokens=6, stream=True
        )
        chunks = list(stream)
        assert "".join(c.text for chunk in chunks for c in chunk.choices) == choice.text
        assert [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason] == [
            choice.finish_reason
        ]

        # The demo is a base model: a chat turn is its text as written, so it continues
        # it just as /v1/completions does.
        chat = client.chat.completions.create(
            model=DEMO,
            messages=[{"role": "user", "content": SUM}],
            temperature=0,
            max_tokens=6,
        )
        assert chat.choices[0].message.content == choice.text
        assert chat.usage is not None and chat.usage.prompt_tokens == whole.usage.prompt_tokens

    # `skulk chat` asks a base model through /v1/completions: the same continuation.
    cli = skulk(daemon, "chat", DEMO, SUM, "--max-tokens", "6", "--temperature", "0")
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.rstrip("\n") == choice.text.rstrip("\n")
    summary = SUMMARY.search(cli.stderr)
    assert summary is not None, cli.stderr
    assert summary.group(3) == str(whole.usage.prompt_tokens)
    wait_idle(daemon, instance_id)
