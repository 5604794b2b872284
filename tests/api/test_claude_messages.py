"""``POST /v1/messages`` (Anthropic Claude Messages) on the real app serving the
demo model, through the official ``anthropic`` SDK and raw HTTP: plain and streamed
messages, system prompts, a forced tool round trip, Anthropic-shaped errors, the
SSE event sequence, cancellation and client disconnects. The demo model is a base
model, so assertions are about shapes, counts and stop reasons, not what it says."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from skulk_core.chat.generation import GenerationRequest, GenerationStats, SamplingParams
from skulk_core.chat.tools import NO_TOOLS, ToolCall
from skulk_core.ids import CommandId, InstanceId, ModelId, TaskId
from skulk_core.models.cards import Memory, ModelCard
from skulk_daemon.chat import claude_wire
from skulk_daemon.chat.admission import Admitted
from skulk_daemon.chat.generation import KeepAlive
from skulk_daemon.chat.turn import ContentDelta, ReasoningDelta, TurnEnd, TurnError, TurnEvent
from tests.api.in_process import AppNode, Served
from tests.daemon.serving import DEMO, PROMPT, sse_lines, wait_idle
from tests.lazy_sdk import anthropic

pytestmark = pytest.mark.slow

WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "Get the current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 24}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0}
"""This SDK no longer has a ``temperature`` argument; the API still takes the field."""


@pytest.fixture
def app(demo_app: Served) -> AppNode:
    return demo_app.app


@pytest.fixture
def client(app: AppNode) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=app.url, api_key="unused", max_retries=0, http_client=app.new_http2()
    ) as client:
        yield client


def post(app: AppNode, body: dict[str, Any] | bytes) -> httpx.Response:
    if isinstance(body, bytes):
        headers = {"Content-Type": "application/json"}
        return app.post("/v1/messages", content=body, headers=headers)
    return app.post("/v1/messages", json=body)


def events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """The stream's ``(event name, data)`` pairs, in order."""
    out: list[tuple[str, dict[str, Any]]] = []
    name: str | None = None
    for line in sse_lines(response):
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            assert name is not None, line
            out.append((name, json.loads(line.removeprefix("data: "))))
            name = None
    return out


def assert_anthropic_error(response: httpx.Response, status: int, type_: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error", body
    assert body["error"]["type"] == type_, body
    message: str = body["error"]["message"]
    assert message
    return message


def assert_well_formed(stream: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Check Anthropic's event grammar; return the content blocks as started."""
    names = [name for name, _ in stream]
    assert all(data["type"] == name for name, data in stream), stream
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"], names
    blocks: list[dict[str, Any]] = []
    open_index: int | None = None
    for name, data in stream[1:-2]:
        if name == "ping":
            continue
        if name == "content_block_start":
            assert open_index is None and data["index"] == len(blocks), stream
            blocks.append(data["content_block"])
            open_index = data["index"]
        elif name == "content_block_delta":
            assert data["index"] == open_index, stream
        else:
            assert name == "content_block_stop" and data["index"] == open_index, stream
            open_index = None
    assert open_index is None and blocks, stream
    return blocks


def test_a_message_reports_usage_and_max_tokens(client: anthropic.Anthropic) -> None:
    raw = client.messages.with_raw_response.create(
        model=DEMO,
        max_tokens=4,
        extra_body=GREEDY,
        messages=PROMPT,  # type: ignore[arg-type]
    )
    message = raw.parse()
    assert raw.headers["X-Skulk-Command-Id"]
    assert message.id == f"msg_{raw.headers['X-Skulk-Command-Id']}"
    assert message.type == "message" and message.role == "assistant" and message.model == DEMO
    (block,) = message.content
    assert block.type == "text" and block.text
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens == 4


def whole_prompt(message: anthropic.types.Message) -> int:
    """The prompt's token count: Anthropic's ``input_tokens`` leaves out cache reads."""
    return message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)


def a_stop_inside(text: str) -> str:
    """Two characters from the second half of ``text`` that are not blank and do not
    start it, so that stopping at their first occurrence leaves some text before."""
    for start in range(len(text) // 2, len(text) - 1):
        stop = text[start : start + 2]
        if stop.strip() and text.index(stop) > 0:
            return stop
    raise AssertionError(f"no stop sequence to pick in {text!r}")


def test_a_matched_stop_sequence_is_reported_as_such(client: anthropic.Anthropic) -> None:
    # The same greedy request twice gives the same tokens: the first answer says where
    # the second must stop, whatever this CPU's greedy continuation is.
    def create(**extra: Any) -> anthropic.types.Message:
        return client.messages.create(
            model=DEMO,
            max_tokens=16,
            extra_body=GREEDY,
            messages=PROMPT,  # type: ignore[arg-type]
            **extra,
        )

    (whole,) = create().content
    assert whole.type == "text"
    stop = a_stop_inside(whole.text)
    message = create(stop_sequences=[stop, "never"])
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == stop
    (block,) = message.content
    assert block.type == "text" and stop not in block.text
    assert block.text == whole.text[: whole.text.index(stop)]


def test_a_system_prompt_as_a_string_or_as_blocks_reaches_the_prompt(
    client: anthropic.Anthropic,
) -> None:
    def input_tokens(**extra: Any) -> int:
        message = client.messages.create(
            model=DEMO,
            max_tokens=4,
            extra_body=GREEDY,
            messages=PROMPT,  # type: ignore[arg-type]
            **extra,
        )
        assert message.content[0].type == "text"
        return message.usage.input_tokens

    bare = input_tokens()
    as_string = input_tokens(system="You count in English, one word at a time.")
    as_blocks = input_tokens(
        system=[
            {"type": "text", "text": "You count in English,"},
            {"type": "text", "text": "one word at a time.", "cache_control": {"type": "ephemeral"}},
        ]
    )
    assert as_string > bare and as_blocks > bare


def test_a_stream_through_the_sdk_matches_its_final_message(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model=DEMO,
        max_tokens=6,
        extra_body=GREEDY,
        messages=PROMPT,  # type: ignore[arg-type]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text
    (block,) = final.content
    assert block.type == "text" and block.text == text
    assert final.stop_reason == "max_tokens"
    assert final.usage.input_tokens > 0 and final.usage.output_tokens == 6


def test_the_stream_follows_anthropics_event_sequence(app: AppNode) -> None:
    body = {"model": DEMO, "max_tokens": 6, "temperature": 0, "messages": PROMPT, "stream": True}
    with app.http.stream("POST", "/v1/messages", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        command_id = response.headers["X-Skulk-Command-Id"]
        stream = events(response)
    start = stream[0][1]["message"]
    assert start["id"] == f"msg_{command_id}" and start["content"] == []
    assert start["stop_reason"] is None and "input_tokens" in start["usage"]
    assert assert_well_formed(stream) == [{"type": "text", "text": ""}]
    deltas = [data["delta"] for name, data in stream if name == "content_block_delta"]
    assert deltas and all(d["type"] == "text_delta" and d["text"] for d in deltas)
    final = stream[-2][1]
    assert final["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert final["usage"]["output_tokens"] == 6 and final["usage"]["input_tokens"] > 0


def test_a_forced_tool_call_round_trip(client: anthropic.Anthropic) -> None:
    called = client.messages.create(
        model=DEMO,
        max_tokens=48,
        extra_body=GREEDY,
        messages=ASK,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert called.stop_reason == "tool_use"
    (use,) = [block for block in called.content if block.type == "tool_use"]
    assert use.id.startswith("toolu_") and use.name == "get_weather"
    assert isinstance(use.input, dict) and isinstance(use.input.get("city"), str)

    question = client.messages.create(
        model=DEMO,
        max_tokens=1,
        messages=ASK,  # type: ignore[arg-type]
    )
    history: list[Any] = [
        *ASK,
        {"role": "assistant", "content": [b.model_dump() for b in called.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 C"},
                {"type": "text", "text": "Thanks. Summarise it."},
            ],
        },
    ]
    for choice in ({"type": "none"}, {"type": "auto"}):
        answer = client.messages.create(
            model=DEMO,
            max_tokens=8,
            extra_body=GREEDY,
            messages=history,
            tools=[WEATHER],  # type: ignore[list-item]
            tool_choice=choice,  # type: ignore[arg-type]
        )
        assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use"), answer
        if choice["type"] == "none":
            # No tools in the prompt, but the call and its result are in the history.
            assert answer.stop_reason != "tool_use"
            assert [block.type for block in answer.content] == ["text"]
            assert whole_prompt(answer) > whole_prompt(question)
        else:
            assert whole_prompt(answer) > whole_prompt(called)


def test_a_streamed_tool_call_arrives_as_input_json(app: AppNode) -> None:
    body = {
        "model": DEMO,
        "max_tokens": 48,
        "temperature": 0,
        "messages": ASK,
        "tools": [WEATHER],
        "tool_choice": {"type": "any"},
        "stream": True,
    }
    with app.http.stream("POST", "/v1/messages", json=body) as response:
        assert response.status_code == 200
        stream = events(response)
    blocks = assert_well_formed(stream)
    assert blocks[-1]["type"] == "tool_use" and blocks[-1]["name"] == "get_weather"
    assert blocks[-1]["id"].startswith("toolu_") and blocks[-1]["input"] == {}
    index = len(blocks) - 1
    partial = "".join(
        data["delta"]["partial_json"]
        for name, data in stream
        if name == "content_block_delta" and data["index"] == index
    )
    assert isinstance(json.loads(partial)["city"], str)
    assert stream[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_a_tool_choice_naming_a_missing_tool_is_a_bad_request(
    client: anthropic.Anthropic,
) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(
            model=DEMO,
            max_tokens=4,
            messages=ASK,  # type: ignore[arg-type]
            tools=[WEATHER],  # type: ignore[list-item]
            tool_choice={"type": "tool", "name": "get_time"},
        )
    assert raised.value.status_code == 400
    body: Any = raised.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "get_time" in body["error"]["message"]


def test_an_unknown_model_is_not_found(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as raised:
        client.messages.create(
            model="local/no-such-model",
            max_tokens=4,
            messages=PROMPT,  # type: ignore[arg-type]
        )
    assert raised.value.status_code == 404
    body: Any = raised.value.body
    assert body["error"]["type"] == "not_found_error"
    assert "local/no-such-model" in body["error"]["message"]


def test_bad_bodies_get_anthropic_shaped_errors(app: AppNode) -> None:
    message = assert_anthropic_error(
        post(app, {"model": DEMO, "messages": PROMPT}), 400, "invalid_request_error"
    )
    assert "max_tokens" in message
    for max_tokens in (0, -3):
        bad = {"model": DEMO, "messages": PROMPT, "max_tokens": max_tokens}
        assert_anthropic_error(post(app, bad), 400, "invalid_request_error")
    message = assert_anthropic_error(
        post(app, b'{"model": "x", "messages": ['), 400, "invalid_request_error"
    )
    assert "JSON" in message
    assert_anthropic_error(
        post(app, {"model": DEMO, "messages": "hello", "max_tokens": 4}),
        400,
        "invalid_request_error",
    )
    assert_anthropic_error(
        post(app, {"model": DEMO, "messages": [], "max_tokens": 4}),
        400,
        "invalid_request_error",
    )


def test_blocks_in_the_wrong_place_and_url_images_are_refused(app: AppNode) -> None:
    def with_content(role: str, content: list[dict[str, Any]]) -> httpx.Response:
        messages = [{"role": role, "content": content}]
        return post(app, {"model": DEMO, "messages": messages, "max_tokens": 4})

    url_image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    message = assert_anthropic_error(
        with_content("user", [url_image]), 400, "invalid_request_error"
    )
    assert "base64" in message
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    assert_anthropic_error(with_content("user", [tool_use]), 400, "invalid_request_error")
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}
    assert_anthropic_error(with_content("assistant", [result]), 400, "invalid_request_error")
    server_tool = {"type": "web_search_20250305", "name": "web_search"}
    body = {"model": DEMO, "messages": PROMPT, "max_tokens": 4, "tools": [server_tool]}
    assert_anthropic_error(post(app, body), 400, "invalid_request_error")


def test_a_cancelled_stream_ends_with_an_error_event(
    demo_app: Served,
) -> None:
    app, instance_id = demo_app.app, demo_app.instance_id
    body = {"model": DEMO, "max_tokens": 900, "messages": PROMPT, "stream": True}
    with app.http.stream("POST", "/v1/messages", json=body) as response:
        command_id = response.headers["X-Skulk-Command-Id"]
        lines = sse_lines(response)
        for line in lines:
            if line == "event: content_block_delta":
                break
        cancelled = app.http.post(f"/v1/cancel/{command_id}")
        assert cancelled.status_code == 200, cancelled.text
        rest = list(lines)
    assert rest[-2] == "event: error", rest[-4:]
    error = json.loads(rest[-1].removeprefix("data: "))
    assert error["type"] == "error" and error["error"]["type"] == "api_error"
    assert "event: message_stop" not in rest
    wait_idle(app, instance_id)


def test_a_client_that_disconnects_mid_stream_stops_the_generation(
    demo_app: Served,
) -> None:
    app, instance_id = demo_app.app, demo_app.instance_id
    body = {"model": DEMO, "max_tokens": 900, "messages": PROMPT, "stream": True}
    with app.http.stream("POST", "/v1/messages", json=body) as response:
        for line in sse_lines(response):
            if line == "event: content_block_delta":
                break
    # Closing the connection must free the runner's slot, not leave 900 tokens running.
    wait_idle(app, instance_id)


# The demo model neither thinks nor mixes text with calls, so the block bookkeeping
# for those turns is checked on the shaping functions themselves, fed turn events.


def _admitted() -> Admitted:
    card = ModelCard(model_id=ModelId(DEMO), storage_size=Memory(in_bytes=1), n_layers=1)
    sampling = SamplingParams(max_tokens=8)
    return Admitted(
        command_id=CommandId("c-1"),
        task_id=TaskId("t-1"),
        model=DEMO,
        instance_id=InstanceId("i-1"),
        card=card,
        generation=GenerationRequest(task_id=TaskId("t-1"), prompt="p", sampling=sampling),
        offer=NO_TOOLS,
        starts_in_reasoning=False,
        include_usage=True,
        created=0,
    )


STATS = GenerationStats(
    prompt_tps=1.0,
    generation_tps=1.0,
    prompt_tokens=7,
    generation_tokens=9,
    serving_batches=False,
    in_flight_at_admission=1,
    time_to_first_token_ms=1.0,
)
CALL = ToolCall(id="call_abc", name="get_weather", arguments='{"city": "Paris"}')
MIXED: list[TurnEvent] = [
    ReasoningDelta("Let me "),
    KeepAlive(),
    ReasoningDelta("think."),
    ContentDelta("Checking"),
    ContentDelta(""),
    ContentDelta(" now."),
    TurnEnd(
        finish_reason="tool_calls",
        tool_calls=(CALL,),
        prompt_tokens=7,
        completion_tokens=9,
        stats=STATS,
    ),
]


def _shape(
    shaper: Callable[[Admitted, AsyncIterator[TurnEvent]], AsyncIterator[bytes]],
    turn: list[TurnEvent],
) -> bytes:
    async def feed() -> AsyncIterator[TurnEvent]:
        for event in turn:
            yield event

    async def collect() -> bytes:
        return b"".join([chunk async for chunk in shaper(_admitted(), feed())])

    return asyncio.run(collect())


def _parse(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for frame in raw.decode().strip().split("\n\n"):
        name, data = frame.split("\n")
        out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def test_thinking_text_and_tool_use_stream_as_three_indexed_blocks() -> None:
    stream = _parse(_shape(claude_wire.sse_stream, MIXED))
    blocks = assert_well_formed(stream)
    assert [block["type"] for block in blocks] == ["thinking", "text", "tool_use"]
    assert blocks[2] == {"type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {}}
    deltas = [(d["index"], d["delta"]) for n, d in stream if n == "content_block_delta"]
    assert deltas == [
        (0, {"type": "thinking_delta", "thinking": "Let me "}),
        (0, {"type": "thinking_delta", "thinking": "think."}),
        (1, {"type": "text_delta", "text": "Checking"}),
        (1, {"type": "text_delta", "text": " now."}),
        (2, {"type": "input_json_delta", "partial_json": '{"city": "Paris"}'}),
    ]
    assert ("ping", {"type": "ping"}) in stream
    assert stream[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert stream[-2][1]["usage"] == {
        "input_tokens": 7,
        "output_tokens": 9,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def test_the_same_turn_as_one_message_has_the_same_blocks() -> None:
    raw = _shape(claude_wire.json_body, MIXED)
    message = anthropic.types.Message.model_validate_json(raw.strip())
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[0].type == "thinking" and message.content[0].thinking == "Let me think."
    assert message.content[1].type == "text" and message.content[1].text == "Checking now."
    use = message.content[2]
    assert use.type == "tool_use" and use.id == "toolu_abc" and use.input == {"city": "Paris"}
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (7, 9)


def test_a_stream_always_ends_with_message_stop_or_an_error() -> None:
    failed = _parse(_shape(claude_wire.sse_stream, [ContentDelta("a"), TurnError("x", "boom")]))
    assert [name for name, _ in failed][-1] == "error"
    assert failed[-1][1] == {"type": "error", "error": {"type": "api_error", "message": "boom"}}
    cut_short = _parse(_shape(claude_wire.sse_stream, [ContentDelta("a")]))
    assert cut_short[0][0] == "message_start" and cut_short[-1][0] == "error"
    empty = _parse(
        _shape(
            claude_wire.sse_stream,
            [
                TurnEnd(
                    finish_reason="stop",
                    tool_calls=(),
                    prompt_tokens=7,
                    completion_tokens=1,
                    stats=STATS,
                )
            ],
        )
    )
    assert assert_well_formed(empty) == [{"type": "text", "text": ""}]
    assert empty[-2][1]["delta"]["stop_reason"] == "end_turn"
