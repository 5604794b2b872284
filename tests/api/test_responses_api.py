"""``POST /v1/responses`` on the real app serving the demo model, through the
official ``openai`` SDK (and raw HTTP where the SDK hides the wire).

The demo model is a base model: prompts are completion-style and assertions are
about structure, statuses, token counts and parseable output, not answers.
Forced tool calls and JSON schemas are grammar-constrained, so their output is
deterministic in shape.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from pydantic import BaseModel, Field, TypeAdapter

from skulk_core.chat.generation import GenerationStats
from skulk_core.chat.tools import ToolCall
from skulk_daemon.chat.responses_request import ResponsesRequest
from skulk_daemon.chat.responses_wire import initial_response, json_body, sse_stream
from skulk_daemon.chat.turn import (
    ContentDelta,
    ReasoningDelta,
    TokenLogprob,
    TurnEnd,
    TurnError,
    TurnEvent,
)
from tests.api.in_process import AppNode, Served
from tests.daemon.serving import DEMO, sse_lines, wait_idle
from tests.lazy_sdk import openai

if TYPE_CHECKING:
    from openai.types.responses import Response

pytestmark = pytest.mark.slow

COUNT = "Count: one, two, three,"
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        # A bounded string keeps the forced call short on a base model.
        "properties": {"city": {"type": "string", "maxLength": 16}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
FORCE_WEATHER = {"type": "function", "name": "get_weather"}
# Greedy counting runs on, so this stream is still generating when the test acts.
LONG_STREAM = {
    "model": DEMO,
    "input": COUNT,
    "max_output_tokens": 960,
    "temperature": 0,
    "stream": True,
}


@pytest.fixture(scope="module")
def server(demo_app: Served) -> AppNode:
    return demo_app.app


@pytest.fixture(scope="module")
def client(server: AppNode) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{server.url}/v1",
        api_key="unused",
        max_retries=0,
        timeout=120,
        http_client=server.new_http(),
    ) as sdk:
        yield sdk


def post(app: AppNode, **body: Any) -> httpx.Response:
    return app.http.post("/v1/responses", json={"model": DEMO, **body})


# Strict validation against the SDK's own types: its client parses leniently, so a
# missing required field would otherwise go unnoticed.
@functools.cache
def _stream_event() -> TypeAdapter[Any]:
    responses = importlib.import_module("openai.types.responses")  # lazily: tests/lazy_sdk.py
    return TypeAdapter(responses.ResponseStreamEvent)


def _response() -> type[Response]:
    responses = importlib.import_module("openai.types.responses")
    response: type[Response] = responses.Response
    return response


def parse_sse(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Each event's JSON, after checking its ``event:`` line names the same type and
    the SDK's types accept it strictly."""
    name = None
    for line in lines:
        if not line or line.startswith(":"):
            continue
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
            continue
        assert line.startswith("data: "), line
        data: dict[str, Any] = json.loads(line.removeprefix("data: "))
        assert data["type"] == name
        _stream_event().validate_python(data)
        yield data


def sse_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    return parse_sse(sse_lines(response))


# --- plain responses ---------------------------------------------------------------


def test_create_returns_text_usage_and_stops_at_the_output_budget(
    client: openai.OpenAI,
) -> None:
    response = client.responses.create(model=DEMO, input=COUNT, max_output_tokens=8, temperature=0)
    assert response.object == "response"
    assert response.id.startswith("resp_")
    assert response.model == DEMO
    assert response.error is None
    assert response.output_text
    [message] = response.output
    assert message.type == "message"
    assert message.role == "assistant"
    [part] = message.content
    assert part.type == "output_text"
    assert part.text == response.output_text
    usage = response.usage
    assert usage is not None
    assert usage.input_tokens > 0
    assert 0 < usage.output_tokens <= 8
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    if usage.output_tokens == 8:
        assert response.status == "incomplete"
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"
        assert message.status == "incomplete"
    else:
        assert response.status == "completed"
    # The request's settings are echoed back.
    assert response.max_output_tokens == 8
    assert response.temperature == 0
    assert response.tools == []
    assert response.tool_choice == "auto"


def test_the_command_id_header_matches_the_response_id(server: AppNode) -> None:
    reply = post(server, input=COUNT, max_output_tokens=4)
    assert reply.status_code == 200, reply.text
    assert reply.json()["id"] == f"resp_{reply.headers['x-skulk-command-id']}"
    _response().model_validate(reply.json())


def test_instructions_become_the_system_turn(client: openai.OpenAI) -> None:
    plain = client.responses.create(model=DEMO, input=COUNT, max_output_tokens=4)
    instructed = client.responses.create(
        model=DEMO,
        input=COUNT,
        instructions="You continue lists of number words.",
        max_output_tokens=4,
    )
    assert instructed.instructions == "You continue lists of number words."
    assert plain.usage is not None and instructed.usage is not None
    assert instructed.usage.input_tokens > plain.usage.input_tokens


def test_item_list_input_with_every_message_shape(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=DEMO,
        input=[
            {"role": "developer", "content": "Continue the list."},
            {"role": "user", "content": [{"type": "input_text", "text": "Count: one, two,"}]},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": " three,", "annotations": []}],
            },
            {"type": "reasoning", "id": "rs_earlier", "summary": []},
            {"type": "message", "role": "user", "content": "four,"},
        ],
        max_output_tokens=4,
    )
    assert response.status in ("completed", "incomplete")
    assert response.output[0].type == "message"
    assert response.usage is not None and response.usage.input_tokens > 10


# --- streaming ------------------------------------------------------------------


def test_stream_events_arrive_in_order_and_deltas_join_to_the_text(
    client: openai.OpenAI,
) -> None:
    events = list(
        client.responses.create(
            model=DEMO, input=COUNT, max_output_tokens=8, temperature=0, stream=True
        )
    )
    types = [event.type for event in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:-1] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert types[-1] in ("response.completed", "response.incomplete")
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert [event.sequence_number for event in events] == list(range(len(events)))

    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    assert deltas and done.text == deltas
    final = events[-1]
    assert final.type in ("response.completed", "response.incomplete")
    assert final.response.output_text == deltas
    assert final.response.id == events[0].response.id
    assert final.response.usage is not None
    assert 0 < final.response.usage.output_tokens <= 8


def test_sse_wire_names_each_event_and_sends_the_command_id(server: AppNode) -> None:
    with server.http.stream(
        "POST",
        "/v1/responses",
        json={"model": DEMO, "input": COUNT, "max_output_tokens": 4, "stream": True},
        timeout=120,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        command_id = response.headers["x-skulk-command-id"]
        events = list(sse_events(response))
    assert events[0]["response"]["id"] == f"resp_{command_id}"
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == []
    assert events[-1]["type"] in ("response.completed", "response.incomplete")


def test_stream_helper_parses_a_structured_answer(client: openai.OpenAI) -> None:
    class Answer(BaseModel):
        word: str = Field(max_length=12)
        count: int

    with client.responses.stream(
        model=DEMO,
        input="Give a word and a number as JSON.",
        text_format=Answer,
        max_output_tokens=48,
        temperature=0,
    ) as stream:
        kinds = {event.type for event in stream}
        final = stream.get_final_response()
    assert "response.output_text.delta" in kinds
    assert final.status == "completed"
    parsed = final.output_parsed
    assert isinstance(parsed, Answer)
    assert len(parsed.word) <= 12


# --- function tools -------------------------------------------------------------


def test_forced_function_call_round_trip(client: openai.OpenAI) -> None:
    question = {"role": "user", "content": "What is the weather in Paris?"}
    first = client.responses.create(
        model=DEMO,
        input=[question],
        tools=[WEATHER_TOOL],
        tool_choice=FORCE_WEATHER,
        max_output_tokens=64,
        temperature=0,
    )
    assert first.status == "completed"
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather"
    assert call.call_id and call.id and call.id.startswith("fc_")
    arguments = json.loads(call.arguments)
    assert isinstance(arguments, dict) and isinstance(arguments["city"], str)
    assert first.tool_choice.type == "function"

    second = client.responses.create(
        model=DEMO,
        input=[
            question,
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {
                "type": "function_call_output",
                "call_id": call.call_id,
                "output": '{"temperature_c": 18, "sky": "clear"}',
            },
        ],
        tools=[WEATHER_TOOL],
        tool_choice="none",
        max_output_tokens=8,
    )
    assert second.status in ("completed", "incomplete")
    assert [item.type for item in second.output] == ["message"]
    without_history = client.responses.create(
        model=DEMO, input=[question], tools=[WEATHER_TOOL], tool_choice="none", max_output_tokens=1
    )
    assert second.usage is not None and without_history.usage is not None
    # The call and its result reached the prompt.
    assert second.usage.input_tokens > without_history.usage.input_tokens + 10


def test_forced_call_streams_argument_events(client: openai.OpenAI) -> None:
    with client.responses.stream(
        model=DEMO,
        input="What is the weather in Oslo?",
        tools=[WEATHER_TOOL],
        tool_choice=FORCE_WEATHER,
        max_output_tokens=64,
        temperature=0,
    ) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in types
    assert "response.function_call_arguments.done" in types
    [call] = [item for item in final.output if item.type == "function_call"]
    assert json.loads(call.arguments)["city"] is not None


def test_tool_choice_naming_a_missing_tool_is_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model=DEMO,
            input=COUNT,
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "name": "get_time"},
        )
    assert refused.value.status_code == 400
    assert "get_time" in str(refused.value)


def test_hosted_tools_are_refused_clearly(server: AppNode) -> None:
    reply = post(server, input=COUNT, tools=[{"type": "web_search"}])
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert "web_search" in error["message"]
    assert error["type"] == "invalid_request_error"


def test_output_for_an_unknown_call_is_refused(server: AppNode) -> None:
    reply = post(
        server, input=[{"type": "function_call_output", "call_id": "call_nope", "output": "1"}]
    )
    assert reply.status_code == 400
    assert "call_nope" in reply.json()["error"]["message"]


# --- refusals -------------------------------------------------------------------


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model="nobody/no-such-model", input=COUNT)
    assert "No instance found for model nobody/no-such-model" in str(missing.value)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"input": []}, "input must not be empty"),
        ({"input": ""}, "input must not be empty"),
        ({"input": COUNT, "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": COUNT, "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "item_reference"),
        ({"input": COUNT, "text": {"format": {"type": "yaml"}}}, "text.format"),
        ({"input": COUNT, "tool_choice": "sometimes"}, "tool_choice"),
        ({"input": [{"role": "critic", "content": "hm"}]}, "role"),
        ({"messages": []}, "input"),
    ],
)
def test_bad_requests_are_400_with_a_clear_message(
    server: AppNode, body: dict[str, Any], says: str
) -> None:
    reply = post(server, **body)
    assert reply.status_code == 400, reply.text
    assert says in reply.json()["error"]["message"]


def test_images_go_through_shared_admission(server: AppNode) -> None:
    remote = {"type": "input_image", "image_url": "https://example.com/cat.png"}
    inline = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
    for part, code in ((remote, "invalid_image"), (inline, "vision_not_supported")):
        reply = post(server, input=[{"role": "user", "content": [part]}])
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["code"] == code


# --- ending early ---------------------------------------------------------------


def test_client_disconnect_mid_stream_stops_generation(
    demo_app: Served,
) -> None:
    app, instance_id = demo_app.app, demo_app.instance_id
    with app.http.stream(
        "POST",
        "/v1/responses",
        json=LONG_STREAM,
        timeout=120,
    ) as response:
        assert response.status_code == 200
        for event in sse_events(response):
            if event["type"] == "response.output_text.delta":
                break
    wait_idle(app, instance_id)


def test_cancel_ends_the_stream_with_response_failed(
    demo_app: Served,
) -> None:
    app, instance_id = demo_app.app, demo_app.instance_id
    with app.http.stream(
        "POST",
        "/v1/responses",
        json=LONG_STREAM,
        timeout=120,
    ) as response:
        command_id = response.headers["x-skulk-command-id"]
        events = sse_events(response)
        for event in events:
            if event["type"] == "response.output_text.delta":
                break
        cancelled = app.http.post(f"/v1/cancel/{command_id}")
        assert cancelled.status_code == 200
        rest = list(events)
    last = rest[-1]
    assert last["type"] == "response.failed"
    assert last["response"]["status"] == "cancelled"
    assert last["response"]["error"]["message"]
    assert last["response"]["output"][0]["type"] == "message"
    assert all(event["type"] != "response.completed" for event in rest)
    wait_idle(app, instance_id)


# --- the wire shaping, fed turn events directly ------------------------------------
# The demo model never thinks and cannot be made to fail on cue, so these paths are
# driven with the turn events the shared pipeline would produce.

STATS = GenerationStats(
    prompt_tps=1.0,
    generation_tps=1.0,
    prompt_tokens=5,
    generation_tokens=6,
    serving_batches=False,
    in_flight_at_admission=1,
    time_to_first_token_ms=1.0,
)


def end(reason: Any = "stop", *calls: ToolCall) -> TurnEnd:
    return TurnEnd(
        finish_reason=reason, tool_calls=calls, prompt_tokens=5, completion_tokens=6, stats=STATS
    )


def shape(turn: list[TurnEvent], *, stream: bool, **request: Any) -> bytes:
    body = ResponsesRequest(model=DEMO, input="x", **request)
    initial = initial_response(body, response_id="resp_test", created_at=1)
    parallel = body.parallel_tool_calls is not False

    async def events() -> AsyncIterator[TurnEvent]:
        for event in turn:
            yield event

    async def collect() -> bytes:
        body_bytes = (
            sse_stream(
                initial,
                events(),
                command_id="test",
                want_logprobs=True,
                parallel_tool_calls=parallel,
            )
            if stream
            else json_body(initial, events(), want_logprobs=True, parallel_tool_calls=parallel)
        )
        return b"".join([chunk async for chunk in body_bytes])

    return asyncio.run(collect())


def streamed(turn: list[TurnEvent], **request: Any) -> list[dict[str, Any]]:
    return list(parse_sse(iter(shape(turn, stream=True, **request).decode().splitlines())))


def test_reasoning_text_and_calls_become_items_in_order() -> None:
    turn: list[TurnEvent] = [
        ReasoningDelta("Counting"),
        ReasoningDelta(" on."),
        ContentDelta(" four", (TokenLogprob(" four", -0.5, ((" four", -0.5),)),)),
        ContentDelta(","),
        end("tool_calls", ToolCall("call_1", "get_weather", '{"city": "Oslo"}')),
    ]
    events = streamed(turn)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = _response().model_validate(events[-1]["response"])
    reasoning, message, call = final.output
    assert reasoning.type == "reasoning" and reasoning.content is not None
    assert reasoning.content[0].text == "Counting on."
    assert message.type == "message" and final.output_text == " four,"
    assert message.content[0].type == "output_text"
    assert [lp.token for lp in message.content[0].logprobs or ()] == [" four"]
    assert call.type == "function_call" and call.call_id == "call_1"
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [
        0,
        1,
        2,
    ]
    plain = _response().model_validate_json(shape(turn, stream=False))
    assert [item.type for item in plain.output] == ["reasoning", "message", "function_call"]
    assert plain.output_text == final.output_text


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    calls = (ToolCall("call_1", "a", "{}"), ToolCall("call_2", "b", "{}"))
    both = _response().model_validate_json(shape([end("tool_calls", *calls)], stream=False))
    one = _response().model_validate_json(
        shape([end("tool_calls", *calls)], stream=False, parallel_tool_calls=False)
    )
    assert [item.type for item in both.output] == ["function_call", "function_call"]
    assert [getattr(item, "call_id", None) for item in one.output] == ["call_1"]


def test_an_empty_answer_is_still_a_message() -> None:
    final = _response().model_validate_json(shape([end()], stream=False))
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["message"]
    assert final.output_text == ""


def test_a_failure_after_the_start_ends_with_response_failed() -> None:
    turn: list[TurnEvent] = [ContentDelta(" four"), TurnError("runner_failed", "runner died")]
    events = streamed(turn)
    assert events[-1]["type"] == "response.failed"
    failed = _response().model_validate(events[-1]["response"])
    assert failed.status == "failed"
    assert failed.error is not None and failed.error.message == "runner died"
    assert failed.output[0].type == "message" and failed.output[0].status == "incomplete"
    plain = _response().model_validate_json(shape(turn, stream=False))
    assert plain.status == "failed" and plain.error is not None


def test_a_turn_that_stops_without_an_end_still_terminates() -> None:
    events = streamed([ContentDelta(" four")])
    assert events[-1]["type"] == "response.failed"
    assert _response().model_validate_json(shape([], stream=False)).status == "failed"
