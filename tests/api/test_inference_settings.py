"""The ``inference`` settings a runner reads when it starts, observed the way an
operator would: through the runner's own report and the wire's usage figures.

The bit-exact mode (``reuse_replies: false``) is the opt-in here: a greedy request
reuses only exact cells (whole rows, at least a chunk left to decode), and the
runner settles a reply once idle so the conversation's next turn after a pause
reuses it too."""

from __future__ import annotations

import logging
import time

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
  parallel_requests: 2
  kv_cache_backend: q8_0
  flash_attention: on
  reuse_replies: false
  settle_idle_ms: 250
"""
PAUSE_SECONDS = 3.0
"""Idle time after a reply: the settle delay and its decode, with room for a slow
machine."""
QUESTION = (
    "Is the sea calm tonight? My brother sails his boat across the bay before dawn "
    "to reach the harbour market, and he asks whether the fog will come in from the "
    "west, whether the tide will be high at the rocks by the old wreck, and whether "
    "he should wait for the morning light before he leaves the jetty."
)
"""A question longer than a chunk: a greedy prompt always decodes a chunk or more."""


def test_the_runners_inference_settings_and_the_bit_exact_mode_reach_it(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="skulk_daemon.runner.client")
    app = make_app("settings", config_yaml=CONFIG)
    place(app, context=CONTEXT)
    assert any(
        "loaded" in record.getMessage()
        and "2 slots x 1024 tokens, 1 threads, KV q8_0, flash attention on, bit-exact, "
        "settling after 250 ms idle"
        in record.getMessage()
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
        reply = first.choices[0].message.content or ""
        messages += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "Is the sea calm tonight?"},
        ]
        # At once: only the first prompt's exact cells, on whole rows, a chunk left.
        second = oai.chat.completions.create(
            model=DEMO, messages=messages, max_tokens=3, temperature=0
        )
        assert second.usage is not None and second.usage.prompt_tokens_details is not None
        cached = second.usage.prompt_tokens_details.cached_tokens
        held = first.usage.prompt_tokens
        assert cached is not None and cached % EXACT_ROWS == 0
        assert cached <= second.usage.prompt_tokens - FLASH_ATTENTION_TILE
        assert cached < held + first.usage.completion_tokens

        # A person reads and types: the runner settles the reply meanwhile.
        time.sleep(PAUSE_SECONDS)
        messages[-1] = {"role": "user", "content": QUESTION}
        third = oai.chat.completions.create(
            model=DEMO, messages=messages, max_tokens=3, temperature=0
        )
    assert third.usage is not None and third.usage.prompt_tokens_details is not None
    settled = third.usage.prompt_tokens_details.cached_tokens
    assert settled is not None and settled % EXACT_ROWS == 0
    if reply and reply == reply.strip():
        # The template keeps the reply as generated: cells past the first prompt,
        # which only a settled reply gives a greedy request.
        assert settled > held
    else:
        assert settled >= held - held % EXACT_ROWS
