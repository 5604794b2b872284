"""Chat Completions beyond plain text, on the real app serving the demo model:
tools and every tool_choice rule, JSON mode and schemas, logprobs, images, roles,
and the bench routes. The demo model is a base model, so assertions are about
shapes and the guarantees Skulk adds (grammars), not about what it says."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.in_process import AppNode, Served
from tests.daemon.serving import DEMO, PROMPT, sse_lines
from tests.lazy_sdk import openai

pytestmark = pytest.mark.slow

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string", "maxLength": 24}},
            "required": ["location"],
            "additionalProperties": False,
        },
    },
}
LOOKUP = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture
def app(demo_app: Served) -> AppNode:
    return demo_app.app


@pytest.fixture
def client(app: AppNode) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{app.url}/v1", api_key="unused", max_retries=0, http_client=app.new_http()
    ) as sdk:
        yield sdk


def post(app: AppNode, path: str, **body: Any) -> httpx.Response:
    payload = {"model": DEMO, "messages": PROMPT, "temperature": 0, "max_tokens": 8, **body}
    return app.http.post(path, json=payload)


def test_a_named_tool_choice_yields_that_call_with_schema_valid_arguments(
    client: openai.OpenAI,
) -> None:
    answer = client.chat.completions.create(
        model=DEMO,
        messages=ASK,  # type: ignore[arg-type]
        tools=[WEATHER, LOOKUP],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0,
        max_tokens=48,
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    assert set(arguments) == {"location"} and isinstance(arguments["location"], str)


def test_required_forces_a_call_to_one_of_the_offered_tools(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=DEMO,
        messages=ASK,  # type: ignore[arg-type]
        tools=[WEATHER, LOOKUP],  # type: ignore[list-item]
        tool_choice="required",
        temperature=0,
        max_tokens=48,
    )
    assert answer.choices[0].finish_reason == "tool_calls"
    names = [c.function.name for c in answer.choices[0].message.tool_calls or []]  # type: ignore[union-attr]
    assert names and set(names) <= {"get_weather", "lookup"}


def test_a_streamed_tool_call_arrives_whole_in_one_frame(app: AppNode) -> None:
    body = {
        "model": DEMO,
        "messages": ASK,
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "temperature": 0,
        "max_tokens": 48,
        "stream": True,
    }
    with app.http.stream("POST", "/v1/chat/completions", json=body) as r:
        lines = list(sse_lines(r))
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(ln[6:]) for ln in lines if ln.startswith("data: {")]
    with_calls = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("tool_calls")]
    assert len(with_calls) == 1
    frame = with_calls[0]["choices"][0]
    assert frame["finish_reason"] == "tool_calls"
    (call,) = frame["delta"]["tool_calls"]
    assert call["index"] == 0 and call["function"]["name"] == "get_weather"
    assert "location" in json.loads(call["function"]["arguments"])
    assert not any(c["choices"][0]["delta"].get("content") for c in chunks if c["choices"])


def test_the_sdk_stream_accumulates_the_call(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=DEMO,
        messages=ASK,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0,
        max_tokens=48,
        stream=True,
    )
    calls = [
        call
        for chunk in stream
        for choice in chunk.choices
        for call in choice.delta.tool_calls or []
    ]
    assert [c.function.name for c in calls] == ["get_weather"]  # type: ignore[union-attr]


def test_a_tool_round_trip_with_the_result_in_history(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(
        model=DEMO,
        messages=ASK,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0,
        max_tokens=48,
    )
    call = (first.choices[0].message.tool_calls or [])[0]
    history: list[Any] = [
        *ASK,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 21}'},
    ]
    second = client.chat.completions.create(
        model=DEMO,
        messages=history,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="none",
        temperature=0,
        max_tokens=8,
    )
    assert second.choices[0].finish_reason in ("stop", "length")
    assert second.choices[0].message.tool_calls is None
    alone = client.chat.completions.create(
        model=DEMO,
        messages=ASK,
        temperature=0,
        max_tokens=1,  # type: ignore[arg-type]
    )
    # The call and its result reached the prompt.
    assert second.usage is not None and alone.usage is not None
    assert second.usage.prompt_tokens > alone.usage.prompt_tokens + 10


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}}, "x"),
        ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "no tools"),
        ({"tool_choice": "required"}, "at least one tool"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [{"type": "retrieval"}]}, "`$.tools[0].type`"),
    ],
)
def test_tool_choices_that_cannot_be_honoured_are_400(
    app: AppNode, fields: dict[str, Any], needle: str
) -> None:
    response = post(app, "/v1/chat/completions", **fields)
    assert response.status_code == 400, response.text
    assert needle in response.json()["error"]["message"]


def test_tool_choice_none_removes_the_tools(app: AppNode) -> None:
    plain = post(app, "/v1/chat/completions").json()["choices"][0]
    none = post(app, "/v1/chat/completions", tools=[WEATHER], tool_choice="none").json()
    # With the tools removed, the prompt is the plain prompt: the same completion.
    assert none["choices"][0]["message"] == plain["message"]
    assert none["choices"][0]["finish_reason"] == plain["finish_reason"]


def test_a_json_schema_answer_cannot_violate_its_schema(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "sunny": {"type": "boolean"}},
        "required": ["city", "sunny"],
        "additionalProperties": False,
    }
    for stream in (False, True):
        kwargs: dict[str, Any] = {
            "model": DEMO,
            "messages": ASK,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "weather", "schema": schema},
            },
            "temperature": 0,
            "max_tokens": 40,
        }
        if stream:
            text = "".join(
                chunk.choices[0].delta.content or ""
                for chunk in client.chat.completions.create(stream=True, **kwargs)
                if chunk.choices
            )
        else:
            text = client.chat.completions.create(**kwargs).choices[0].message.content or ""
        value = json.loads(text)
        assert set(value) == {"city", "sunny"}
        assert isinstance(value["city"], str) and isinstance(value["sunny"], bool)


def test_json_object_mode_answers_an_object(app: AppNode) -> None:
    answer = post(
        app,
        "/v1/chat/completions",
        messages=[{"role": "user", "content": 'Reply in JSON like {"answer": 4}. What is 2+2?'}],
        response_format={"type": "json_object"},
        max_tokens=64,
    ).json()["choices"][0]
    text = answer["message"]["content"]
    assert text.lstrip().startswith("{")
    if answer["finish_reason"] == "stop":
        assert isinstance(json.loads(text), dict)


def test_a_schema_that_cannot_be_enforced_is_400(app: AppNode) -> None:
    remote = {"type": "json_schema", "json_schema": {"schema": {"$ref": "https://x/s.json"}}}
    response = post(app, "/v1/chat/completions", response_format=remote)
    assert response.status_code == 400
    assert "remote $ref" in response.json()["error"]["message"]
    missing = post(app, "/v1/chat/completions", response_format={"type": "json_schema"})
    assert missing.status_code == 400


def test_logprobs_and_top_logprobs_per_token(app: AppNode) -> None:
    body = post(app, "/v1/chat/completions", logprobs=True, top_logprobs=3, max_tokens=4)
    choice = body.json()["choices"][0]
    entries = choice["logprobs"]["content"]
    assert len(entries) == 4
    assert "".join(e["token"] for e in entries) == choice["message"]["content"]
    for entry in entries:
        assert entry["logprob"] <= 0 and len(entry["top_logprobs"]) == 3
        # Greedy decoding picks the likeliest token.
        assert entry["logprob"] == pytest.approx(entry["top_logprobs"][0]["logprob"])


def _png_data_url(size: int) -> str:
    return "data:image/png;base64," + base64.b64encode(b"\x89PNG" + b"\0" * size).decode()


def test_images_are_refused_for_a_model_without_vision(app: AppNode) -> None:
    image = {"type": "image_url", "image_url": {"url": _png_data_url(64)}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]
    response = post(app, "/v1/chat/completions", messages=messages)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "vision_not_supported"
    remote = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    response = post(app, "/v1/chat/completions", messages=[{"role": "user", "content": [remote]}])
    assert response.status_code == 400
    assert "data: URLs" in response.json()["error"]["message"]


def test_images_over_the_32_mib_bound_are_413(app: AppNode) -> None:
    image = {"type": "image_url", "image_url": {"url": _png_data_url(25 * 1024 * 1024)}}
    response = post(app, "/v1/chat/completions", messages=[{"role": "user", "content": [image]}])
    assert response.status_code == 413


def test_developer_and_function_roles_are_accepted(app: AppNode) -> None:
    messages = [
        {"role": "developer", "content": "Answer briefly."},
        {"role": "user", "content": "Count: one, two,"},
        {"role": "assistant", "content": "three"},
        {"role": "function", "name": "lookup", "content": "four"},
    ]
    response = post(app, "/v1/chat/completions", messages=messages, user="someone")
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_bench_chat_is_a_completion_plus_stats_even_when_streaming_is_asked(
    app: AppNode,
) -> None:
    response = post(app, "/bench/chat/completions", stream=True, max_tokens=6)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] == 6
    stats = body["generation_stats"]
    assert stats["generation_tokens"] == 6 and stats["serving_batches"] is False  # alone
    assert stats["in_flight_at_admission"] == 1 and stats["generation_tps"] > 0
    assert "power_usage" in body  # null on a node that cannot measure power
    assert not any("node" in key for key in stats)


def test_bench_chat_shares_admission(app: AppNode) -> None:
    assert post(app, "/bench/chat/completions", messages=[]).status_code == 400
    assert post(app, "/bench/chat/completions", model="nope/nope").status_code == 404


def test_image_routes_answer_404_until_an_image_model_is_placed(app: AppNode) -> None:
    for path in ("/v1/images/generations", "/bench/images/generations"):
        body = {"model": "exolabs/FLUX.1-schnell-4bit", "prompt": "a fox"}
        response = app.http.post(path, json=body)
        assert response.status_code == 404
        assert "No instance found" in response.json()["error"]["message"]
        response = app.http.post(path, json={"model": "x"})
        assert response.status_code == 400
    form = {"model": "exolabs/FLUX.1-schnell-4bit", "prompt": "make it snow"}
    files = {"image": ("fox.png", b"\x89PNG", "image/png")}
    edit = app.http.post("/bench/images/edits", data=form, files=files)
    assert edit.status_code == 404
