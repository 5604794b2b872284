"""The ``inference`` settings a runner reads when it starts, observed the way an
operator would: through the runner's own report and the wire's usage figures."""

from __future__ import annotations

import logging

import pytest

from skulk_daemon.engines._llama_exact import EXACT_ROWS, FLASH_ATTENTION_TILE
from tests.api.in_process import AppFactory
from tests.api.test_prompt_cache_usage import system_prompt
from tests.daemon.serving import CONTEXT, DEMO, place
from tests.lazy_sdk import openai

pytestmark = pytest.mark.slow

CONFIG = """\
inference:
  runner_threads: 1
  reuse_replies: true
  settle_idle_ms: 250
"""


def test_runner_threads_and_reuse_replies_reach_the_runner(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="skulk_daemon.runner.client")
    app = make_app("settings", config_yaml=CONFIG)
    place(app, context=CONTEXT)
    assert any(
        "loaded" in record.getMessage()
        and "x 1024 tokens, 1 threads, settling after 250 ms idle" in record.getMessage()
        for record in caplog.records
    ), [r.getMessage() for r in caplog.records if "loaded" in r.getMessage()]

    with openai.OpenAI(
        base_url=f"{app.url}/v1", api_key="unused", max_retries=0, http_client=app.new_http()
    ) as oai:
        messages: list[openai.types.chat.ChatCompletionMessageParam] = [
            {"role": "system", "content": system_prompt("Settings")},
            {"role": "user", "content": "Good evening."},
        ]
        first = oai.chat.completions.create(
            model=DEMO, messages=messages, max_tokens=8, temperature=0
        )
        assert first.usage is not None
        messages += [
            {"role": "assistant", "content": first.choices[0].message.content or ""},
            {"role": "user", "content": "Is the sea calm tonight?"},
        ]
        second = oai.chat.completions.create(
            model=DEMO, messages=messages, max_tokens=3, temperature=0
        )
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    cached = second.usage.prompt_tokens_details.cached_tokens
    held = first.usage.prompt_tokens
    # By default a greedy request reuses the first prompt on whole rows, and leaves
    # at least a chunk to decode: reusing more shows the setting took effect.
    by_default = min(held, second.usage.prompt_tokens - FLASH_ATTENTION_TILE)
    assert cached is not None and cached >= held
    assert cached > by_default // EXACT_ROWS * EXACT_ROWS
    reply = first.choices[0].message.content or ""
    if reply and reply == reply.strip():
        # The template keeps the reply as generated: its cells are reused too.
        assert cached > held
