"""The Ollama adapter's pure halves: request mapping onto the shared task, and the
wire shaping of turns the demo base model cannot be made to produce on demand
(tool calls, thinking, logprobs, errors, keep-alives)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from skulk_core.chat.generation import GenerationStats
from skulk_core.chat.tools import ToolCall
from skulk_daemon.chat.generation import KeepAlive
from skulk_daemon.chat.ollama_request import (
    chat_to_task,
    decode_chat,
    decode_generate,
    generate_to_task,
)
from skulk_daemon.chat.ollama_wire import Reply, json_body, ndjson_stream
from skulk_daemon.chat.task import JsonObjectFormat, JsonSchemaFormat
from skulk_daemon.chat.turn import (
    ContentDelta,
    ReasoningDelta,
    TokenLogprob,
    TurnEnd,
    TurnError,
    TurnEvent,
)
from skulk_daemon.errors import ApiError
from tests.api.test_ollama_api import WEATHER

# --- request mapping and wire shaping (pure) ------------------------------------------


def test_options_map_onto_the_shared_task() -> None:
    body = decode_chat(
        json.dumps(
            {
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "options": {
                    "num_predict": -1,
                    "temperature": 0.5,
                    "top_p": 0.9,
                    "top_k": 40,
                    "min_p": 0.05,
                    "stop": ["\n"],
                    "seed": -1,
                    "repeat_penalty": 1.1,
                    "repeat_last_n": 0,
                    "presence_penalty": 0.2,
                    "frequency_penalty": 0.3,
                    "num_ctx": 8192,
                    "num_gpu": 99,
                },
                "think": "high",
                "keep_alive": "5m",
                "format": "json",
            }
        ).encode()
    )
    task = chat_to_task(body, "m")
    assert task.max_tokens is None
    assert (task.temperature, task.top_p, task.top_k, task.min_p) == (0.5, 0.9, 40, 0.05)
    assert task.stop == ("\n",)
    assert task.seed is None and task.repetition_context_size is None
    assert (task.repetition_penalty, task.presence_penalty, task.frequency_penalty) == (
        1.1,
        0.2,
        0.3,
    )
    assert (task.enable_thinking, task.reasoning_effort) == (True, "high")
    assert task.response_format == JsonObjectFormat()
    assert body.stream is True

    schema = {"type": "object"}
    generate = decode_generate(
        json.dumps(
            {"model": "m", "prompt": "p", "system": "s", "format": schema, "think": False}
        ).encode()
    )
    task = generate_to_task(generate, "m")
    assert [(m.role, m.content) for m in task.messages] == [("system", "s"), ("user", "p")]
    assert task.response_format == JsonSchemaFormat(schema=schema)
    assert task.enable_thinking is False


def test_tool_history_maps_onto_the_shared_task() -> None:
    body = decode_chat(
        json.dumps(
            {
                "model": "m",
                "tools": [WEATHER],
                "messages": [
                    {"role": "user", "content": "weather?"},
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
                        ],
                    },
                    {"role": "tool", "content": "cold", "tool_name": "get_weather"},
                ],
            }
        ).encode()
    )
    task = chat_to_task(body, "m")
    assert [tool.name for tool in task.tools] == ["get_weather"]
    call = task.messages[1].tool_calls[0]
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Oslo"})
    assert (task.messages[2].role, task.messages[2].name) == ("tool", "get_weather")
    with pytest.raises(ApiError):
        chat_to_task(
            decode_chat(b'{"model": "m", "messages": [{"role": "assistant", "tool_calls": [{}]}]}'),
            "m",
        )


STATS = GenerationStats(
    prompt_tps=100.0,
    generation_tps=50.0,
    prompt_tokens=10,
    generation_tokens=5,
    serving_batches=False,
    in_flight_at_admission=1,
    time_to_first_token_ms=12.0,
)


async def _events(items: list[TurnEvent]) -> AsyncIterator[TurnEvent]:
    for item in items:
        yield item


def _collect(stream: AsyncIterator[bytes]) -> bytes:
    async def run() -> bytes:
        return b"".join([chunk async for chunk in stream])

    return asyncio.run(run())


def _turn(end: TurnEnd | TurnError) -> list[TurnEvent]:
    lp = TokenLogprob("Hi", -0.5, (("Hi", -0.5), ("Yo", -1.5)))
    return [
        KeepAlive(),
        ReasoningDelta("hmm"),
        ContentDelta("Hi", (lp,)),
        KeepAlive(),
        end,
    ]


def test_wire_shapes_a_tool_call_turn_for_chat() -> None:
    call = ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}')
    end = TurnEnd(
        finish_reason="tool_calls",
        tool_calls=(call,),
        prompt_tokens=10,
        completion_tokens=5,
        stats=STATS,
    )
    reply = Reply(kind="chat", model="m", started_ns=0, logprobs=True)
    raw = _collect(ndjson_stream(reply, _events(_turn(end))))
    # Keep-alives are single spaces: leading whitespace of the next line, never a line.
    assert all(text.strip() for text in raw.split(b"\n")[:-1])
    lines = [json.loads(text) for text in raw.split(b"\n") if text.strip()]
    assert [item["done"] for item in lines] == [False, False, True]
    assert lines[0]["message"] == {"role": "assistant", "content": "", "thinking": "hmm"}
    assert lines[1]["message"] == {"role": "assistant", "content": "Hi"}
    assert lines[1]["logprobs"][0]["top_logprobs"][1] == {
        "token": "Yo",
        "logprob": -1.5,
        "bytes": list(b"Yo"),
    }
    done = lines[2]
    assert done["done_reason"] == "stop"
    assert done["message"]["tool_calls"] == [
        {
            "id": "call_1",
            "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}},
        }
    ]
    assert (done["prompt_eval_count"], done["eval_count"]) == (10, 5)
    assert (done["prompt_eval_duration"], done["eval_duration"]) == (100_000_000, 100_000_000)
    assert done["total_duration"] >= 200_000_000
    assert "context" not in done

    whole = json.loads(_collect(json_body(reply, _events(_turn(end)))))
    assert whole["message"]["content"] == "Hi"
    assert whole["message"]["thinking"] == "hmm"
    assert whole["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert len(whole["logprobs"]) == 1


def test_wire_shapes_generate_and_errors() -> None:
    end = TurnEnd(
        finish_reason="length", tool_calls=(), prompt_tokens=3, completion_tokens=5, stats=STATS
    )
    reply = Reply(kind="generate", model="m", started_ns=0)
    lines = [
        json.loads(text)
        for text in _collect(ndjson_stream(reply, _events(_turn(end)))).split(b"\n")
        if text.strip()
    ]
    assert lines[0]["response"] == "" and lines[0]["thinking"] == "hmm"
    assert lines[1]["response"] == "Hi" and "logprobs" not in lines[1]
    assert lines[2]["done_reason"] == "length" and lines[2]["context"] == []
    whole = json.loads(_collect(json_body(reply, _events(_turn(end)))))
    assert (whole["response"], whole["thinking"], whole["done"]) == ("Hi", "hmm", True)

    failed = _turn(TurnError("runner_failed", "the runner died"))
    last = _collect(ndjson_stream(reply, _events(failed))).split(b"\n")[-2]
    assert json.loads(last) == {"error": "the runner died"}
    assert json.loads(_collect(json_body(reply, _events(failed)))) == {"error": "the runner died"}
    # A turn that stops without an end still ends the stream with an error line.
    cut = _collect(ndjson_stream(reply, _events([ContentDelta("x")]))).split(b"\n")[-2]
    assert "error" in json.loads(cut)
