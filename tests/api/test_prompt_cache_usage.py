"""The share of a prompt served from the engine's cache, as each official SDK reads
it: a second request that repeats a long prefix reports it cached, in every format's
own usage field, and the prompt count stays the whole prompt.

Each test opens with its own long system prompt, so no other test's requests (the
app is shared) leave cells it could reuse beyond the few template tokens every
chat prompt opens with: its first request is (all but) cold.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psutil
import pytest

from skulk_daemon.engines._llama_exact import FLASH_ATTENTION_TILE
from tests.api.in_process import AppNode, Served
from tests.daemon.serving import DEMO
from tests.lazy_sdk import anthropic, ollama, openai
from tests.runner_processes import runner_processes

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("timing")]

CHUNK = FLASH_ATTENTION_TILE
OPENING = 12
"""More than the template's opening tokens (``<bos><start_of_turn>user``, a newline
and ``You are``) that another test's prompt may have left in a slot: any common
prefix is reused, however short."""
GREEDY = {"temperature": 0}
"""Greedy: by default a temperature-0 request reuses cells like any other (the
bit-exact mode is ``tests/api/test_inference_settings.py``'s). (The Anthropic SDK
has no ``temperature`` argument; the API takes the field.)"""


IDLE_CPU_S = 0.1
"""What idle runners may spend in 1.5 s (timers); a settle spends several times it."""


def system_prompt(name: str) -> str:
    """About 200 tokens no other test sends (``name`` opens it)."""
    return (
        f"You are {name}, the keeper of a lighthouse at the end of a long bay. Every "
        "evening you climb two hundred steps, trim the wick, polish the great lens and "
        "watch the ships pass on their way to the harbour. In winter the storms come "
        "from the north and the waves break over the gallery; you write in your log "
        "the name of every ship you see, the hour, the wind and the state of the sea. "
        "You answer visitors briefly and kindly, and you never leave the light unlit. "
        "When a visitor asks about the sea you tell them about the tides, the rocks "
        "under the water, the fog that comes in from the west in spring, and the old "
        "wreck that lies a mile out, where the seals sleep on calm afternoons."
    )


@pytest.fixture
def app(demo_app: Served) -> AppNode:
    return demo_app.app


@pytest.fixture
def oai(app: AppNode) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{app.url}/v1", api_key="unused", max_retries=0, http_client=app.new_http()
    ) as client:
        yield client


def test_chat_completions_report_cached_prompt_tokens(oai: openai.OpenAI) -> None:
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "system", "content": system_prompt("Chat")},
        {"role": "user", "content": "Good evening."},
    ]
    first = oai.chat.completions.create(model=DEMO, messages=messages, max_tokens=3, temperature=0)
    assert first.usage is not None and first.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens < OPENING

    messages += [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": "Is the sea calm tonight?"},
    ]
    stream = oai.chat.completions.create(
        model=DEMO,
        messages=messages,
        max_tokens=3,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [chunk.usage for chunk in stream if chunk.usage is not None]
    assert len(usage) == 1 and usage[0].prompt_tokens_details is not None
    cached = usage[0].prompt_tokens_details.cached_tokens
    assert cached is not None and CHUNK <= cached < usage[0].prompt_tokens
    # The whole first prompt, and no work after the reply was needed for that.
    assert cached >= first.usage.prompt_tokens


def test_a_greedy_conversation_reuses_its_reply_with_no_pause(oai: openai.OpenAI) -> None:
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "system", "content": system_prompt("Turns")},
        {"role": "user", "content": "Good evening."},
    ]
    first = oai.chat.completions.create(model=DEMO, messages=messages, max_tokens=8, temperature=0)
    assert first.usage is not None
    reply = first.choices[0].message.content or ""
    messages += [
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "Is the sea calm tonight?"},
    ]
    # At once, as an agent's tool loop answers: every peer reuses the reply's cells.
    second = oai.chat.completions.create(model=DEMO, messages=messages, max_tokens=3, temperature=0)
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    cached = second.usage.prompt_tokens_details.cached_tokens
    held = first.usage.prompt_tokens
    assert cached is not None and held <= cached < second.usage.prompt_tokens
    if reply and reply == reply.strip():
        # The template keeps the reply as generated: its cells are reused too.
        assert cached > held


def _cpu_s(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        times = process.cpu_times()
        total += times.user + times.system
    return total


def test_the_runner_does_no_work_after_a_greedy_reply(oai: openai.OpenAI) -> None:
    """Issue 43: by default a reply's own cells are reused as they are, as every peer
    does, so nothing is decoded after it (the bit-exact mode's settle decodes a
    greedy reply again once idle: half a second of a core and more)."""
    ask: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "system", "content": system_prompt("Idle")},
        {"role": "user", "content": "Good evening."},
    ]
    oai.chat.completions.create(model=DEMO, messages=ask, max_tokens=8, temperature=0)
    runners = runner_processes()
    assert runners
    time.sleep(0.2)  # llama.cpp's threads stop spinning
    before = _cpu_s(runners)
    time.sleep(1.5)  # past the bit-exact mode's 500 ms settle delay
    assert _cpu_s(runners) - before < IDLE_CPU_S


def test_a_short_prompt_sent_again_is_served_from_the_cache(oai: openai.OpenAI) -> None:
    """Any repeated prefix is reused however short (issue 43: a 22-token prompt sent
    four times reported nothing cached), streamed or not."""
    ask: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "user", "content": "Name one colour of the evening sea, please."}
    ]
    first = oai.chat.completions.create(model=DEMO, messages=ask, max_tokens=2, temperature=0)
    assert first.usage is not None
    assert first.usage.prompt_tokens < CHUNK
    for streamed in (False, True, False):
        if streamed:
            stream = oai.chat.completions.create(
                model=DEMO,
                messages=ask,
                max_tokens=2,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
            usage = [chunk.usage for chunk in stream if chunk.usage is not None][-1]
        else:
            again = oai.chat.completions.create(
                model=DEMO, messages=ask, max_tokens=2, temperature=0
            )
            assert again.usage is not None
            usage = again.usage
        assert usage.prompt_tokens == first.usage.prompt_tokens
        assert usage.prompt_tokens_details is not None
        # All but the last token, whose logits pick the first reply token.
        assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1


def test_responses_report_cached_input_tokens(oai: openai.OpenAI) -> None:
    instructions = system_prompt("Responses")
    ask = {"instructions": instructions, "input": "Good evening.", "max_output_tokens": 3}
    first = oai.responses.create(model=DEMO, temperature=0, **ask)
    again = oai.responses.create(model=DEMO, temperature=0, **ask)
    assert first.usage is not None and again.usage is not None
    assert first.usage.input_tokens_details.cached_tokens < OPENING
    cached = again.usage.input_tokens_details.cached_tokens
    assert again.usage.input_tokens == first.usage.input_tokens  # the whole prompt
    assert CHUNK <= cached < again.usage.input_tokens


def test_claude_messages_report_cache_reads_apart_from_input(app: AppNode) -> None:
    with anthropic.Anthropic(
        base_url=app.url, api_key="unused", max_retries=0, http_client=app.new_http2()
    ) as client:
        system = system_prompt("Claude")
        ask: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Good evening."}]
        first = client.messages.create(
            model=DEMO, system=system, messages=ask, max_tokens=3, extra_body=GREEDY
        )
        with client.messages.stream(
            model=DEMO, system=system, messages=ask, max_tokens=3, extra_body=GREEDY
        ) as stream:
            again = stream.get_final_message()
    first_read = first.usage.cache_read_input_tokens or 0
    assert first_read < OPENING
    whole = first.usage.input_tokens + first_read
    read = again.usage.cache_read_input_tokens
    assert read is not None and CHUNK <= read < whole
    # Anthropic's input_tokens leaves out what was read from the cache.
    assert again.usage.input_tokens == whole - read


def test_ollama_counts_the_whole_prompt_when_part_is_cached(demo_app: Served) -> None:
    app = demo_app.app
    client = ollama.Client(host=f"{app.url}/ollama", timeout=120, transport=app.transport)
    try:
        messages = [
            {"role": "system", "content": system_prompt("Ollama")},
            {"role": "user", "content": "Good evening."},
        ]
        options = {"temperature": 0, "num_predict": 3}
        first = client.chat(model=DEMO, messages=messages, options=options)
        again = client.chat(model=DEMO, messages=messages, options=options)
    finally:
        client.close()
    assert first.prompt_eval_count is not None and first.prompt_eval_count > CHUNK
    assert again.prompt_eval_count == first.prompt_eval_count


def test_bench_stats_carry_the_cached_share_and_truthful_admission(app: AppNode) -> None:
    body = {
        "model": DEMO,
        "messages": [
            {"role": "system", "content": system_prompt("Bench")},
            {"role": "user", "content": "Good evening."},
        ],
        "max_tokens": 3,
        "temperature": 0,
    }
    first = app.post("/bench/chat/completions", json=body).json()["generation_stats"]
    again = app.post("/bench/chat/completions", json=body).json()["generation_stats"]
    assert first["cached_tokens"] < OPENING
    assert CHUNK <= again["cached_tokens"] < again["prompt_tokens"] == first["prompt_tokens"]
    for stats in (first, again):
        # A lone request counts itself in flight, and decoded with nobody else.
        assert stats["in_flight_at_admission"] == stats["max_in_flight_at_admission"] == 1
        assert stats["serving_batches"] is False
