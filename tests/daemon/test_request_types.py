"""Request decoding, pure (no daemon): the shared request types and the Chat
Completions body. What each shape is accepted as, and how each bad one is refused
(status and code, and the field the message names)."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from skulk_core.chat.tools import NamedChoice, ToolCall, ToolSpec
from skulk_daemon.chat.request_types import (
    field_errors,
    json_text,
    one_or_many,
    optional_text,
    tool_choice,
)
from skulk_daemon.chat.task import JsonObjectFormat, JsonSchemaFormat, TaskMessage
from skulk_daemon.errors import ApiError
from tests.daemon.request_support import (
    DATA_URL,
    PNG,
    Adapter,
    Body,
    assert_refused,
    claude,
    ollama_chat,
    openai,
    responses,
    with_unknown_fields,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
WEATHER_SPEC = ToolSpec(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


def chat(*messages: dict[str, Any], **fields: Any) -> Body:
    return {
        "model": "m",
        "messages": list(messages) or [{"role": "user", "content": "hi"}],
        **fields,
    }


# --- the shared helpers -----------------------------------------------------------


def test_lenient_fields_read_as_text_or_nothing() -> None:
    assert optional_text("a") == "a"
    assert [optional_text(v) for v in (None, 5, [], {"a": 1}, True)] == [None] * 5
    assert json_text('{"a": 1}') == '{"a": 1}'
    assert json.loads(json_text({"a": [1, None]})) == {"a": [1, None]}
    assert json_text(None) == "null"


def test_one_or_many_wraps_a_string_and_keeps_a_list() -> None:
    assert one_or_many(None, str) == ()
    assert one_or_many("", str) == ("",)
    assert one_or_many("a", str) == ("a",)
    assert one_or_many(["a", "b"], str) == ("a", "b")


@pytest.mark.parametrize(
    ("value", "at", "path"),
    [
        ({"k": 5}, "tools[2]", "`$.tools[2].k`"),  # nested: re-rooted
        ([1], "text.format", "`$.text.format`"),  # at the root: the path is added
    ],
)
def test_field_errors_name_the_full_path(value: object, at: str, path: str) -> None:
    class Shape(msgspec.Struct):
        k: str = ""

    with pytest.raises(ApiError) as raised, field_errors(at):
        msgspec.convert(value, Shape)
    assert (raised.value.status_code, raised.value.code) == (400, "invalid_request")
    assert raised.value.message.startswith("invalid request: ")
    assert raised.value.message.endswith(path)


@given(st.text().filter(lambda s: s not in ("auto", "none", "required")))
def test_any_other_tool_choice_string_is_invalid_tool_choice(choice: str) -> None:
    with pytest.raises(ApiError) as raised:
        tool_choice(choice, refusal="no")
    assert (raised.value.code, raised.value.message) == ("invalid_tool_choice", "no")


@pytest.mark.parametrize(
    ("raw", "choice"),
    [
        (None, None),
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ({"type": "function", "function": {"name": "f"}}, NamedChoice("f")),
        ({"type": "function", "name": "f"}, NamedChoice("f")),
        # Each form ignores the other's keys: the nested one is read first.
        ({"type": "function", "function": {"name": "f"}, "name": "g"}, NamedChoice("f")),
        ({"type": "function", "function": {"name": "f"}, "name": 5}, NamedChoice("f")),
        ({"type": "function", "function": 5, "name": "g"}, NamedChoice("g")),
    ],
)
def test_tool_choice_forms(raw: Any, choice: Any) -> None:
    assert tool_choice(raw, refusal="no") == choice


@pytest.mark.parametrize(
    "raw",
    [{}, {"type": "function"}, {"type": "function", "function": {}}, {"type": "tool", "name": "f"}],
)
def test_unreadable_tool_choice_objects_are_invalid_tool_choice(raw: dict[str, Any]) -> None:
    with pytest.raises(ApiError) as raised:
        tool_choice(raw, refusal="no")
    assert raised.value.code == "invalid_tool_choice"


# --- properties across the formats ------------------------------------------------

FULL_BODIES: list[tuple[Adapter, Body]] = [
    (
        openai,
        chat(
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": DATA_URL}}]},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            response_format={"type": "json_schema", "json_schema": {"schema": {"type": "object"}}},
            stream_options={"include_usage": True},
        ),
    ),
    (
        responses,
        {
            "model": "m",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            ],
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
            "reasoning": {"effort": "low"},
        },
    ),
    (
        claude,
        {
            "model": "m",
            "max_tokens": 8,
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
                },
            ],
            "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "f"},
            "thinking": {"type": "enabled", "budget_tokens": 64},
        },
    ),
    (
        ollama_chat,
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "hi", "images": [PNG]},
                {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
                {"role": "tool", "content": "ok", "tool_name": "f"},
            ],
            "tools": [WEATHER],
            "options": {"stop": "\n", "num_predict": 5},
            "format": "json",
        },
    ),
]


@pytest.mark.parametrize(("adapter", "body"), FULL_BODIES)
def test_unknown_fields_are_ignored_everywhere(adapter: Adapter, body: Body) -> None:
    assert adapter(with_unknown_fields(body)) == adapter(body)


@given(st.text(max_size=20))
def test_text_content_is_one_text_part(text: str) -> None:
    as_part = [{"type": "text", "text": text}]
    assert openai(chat({"role": "user", "content": text})) == openai(
        chat({"role": "user", "content": as_part})
    )
    part = [{"type": "input_text", "text": text}]
    assert responses({"model": "m", "input": [{"role": "user", "content": text}]}) == responses(
        {"model": "m", "input": [{"role": "user", "content": part}]}
    )
    for role in ("user", "assistant"):
        single = {"model": "m", "max_tokens": 4, "messages": [{"role": role, "content": text}]}
        blocks = {**single, "messages": [{"role": role, "content": as_part}]}
        assert claude(single) == claude(blocks)


# --- Chat Completions: accepted ---------------------------------------------------


def test_content_parts_join_and_images_decode() -> None:
    parts = [
        {"type": "text", "text": "a"},
        {"type": "input_text", "text": "b"},
        {"type": "text", "text": None},
        {"type": "text"},
        {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "low"}},
    ]
    (message,) = openai(chat({"role": "user", "content": parts})).messages
    assert message.content == "ab"
    (image,) = message.images
    assert image.media_type == "image/png" and image.data == base64.b64decode(PNG)
    assert openai(chat({"role": "user"})).messages[0].content == ""


def test_roles_and_history_tool_calls() -> None:
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
        {"id": 7, "function": {"name": "g", "arguments": {"b": 2}}},  # an object, encoded
        {"function": {"name": "h"}},  # no id, no arguments
    ]
    task = openai(
        chat(
            {"role": "developer", "content": "sys"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "function", "name": "f", "content": "r"},
        )
    )
    assert task.messages == (
        TaskMessage(role="system", content="sys"),
        TaskMessage(
            role="assistant",
            tool_calls=(
                ToolCall(id="c1", name="f", arguments='{"a": 1}'),
                ToolCall(id="7", name="g", arguments='{"b":2}'),
                ToolCall(id="", name="h", arguments="{}"),
            ),
        ),
        TaskMessage(role="tool", content="r", name="f"),
    )


@pytest.mark.parametrize("parameters", [None, {}, [], "", 0, False])
def test_a_tool_without_parameters_takes_none(parameters: object) -> None:
    tool = {"function": {"name": "f", "description": 5, "parameters": parameters}}
    assert openai(chat(tools=[tool])).tools == (ToolSpec(name="f"),)
    assert openai(chat(tools=[{"function": {"name": "f"}}])).tools == (ToolSpec(name="f"),)


def test_tools_choices_formats_and_stops() -> None:
    task = openai(chat(tools=[WEATHER], tool_choice="required", stop="\n", n=1))
    assert (task.tools, task.tool_choice, task.stop) == ((WEATHER_SPEC,), "required", ("\n",))
    assert openai(chat(stop=["a", "b"])).stop == ("a", "b")
    schema = {"type": "object"}
    for response_format, expected in [
        ({"type": "text"}, None),
        ({"type": "json_object"}, JsonObjectFormat()),
        (
            {"type": "json_schema", "json_schema": {"name": "w", "schema": schema, "strict": True}},
            JsonSchemaFormat(schema=schema, name="w"),
        ),
        (
            {"type": "json_schema", "json_schema": {"name": 3, "schema": schema}},
            JsonSchemaFormat(schema),
        ),
    ]:
        assert openai(chat(response_format=response_format)).response_format == expected


# --- Chat Completions: refused ----------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "code", "says"),
    [
        ({"n": 2}, "invalid_request", "n=1"),
        ({"tools": [{"type": "retrieval"}]}, "invalid_request", "`$.tools[0].type`"),
        ({"tools": [{"type": "function"}]}, "invalid_request", "`$.tools[0]`"),
        ({"tools": [{"function": {"description": "d"}}]}, "invalid_request", "name"),
        (
            {"tools": [{"function": {"name": "f", "parameters": [1]}}]},
            "invalid_request",
            "`$.tools[0].function.parameters`",
        ),
        ({"tool_choice": "sometimes"}, "invalid_tool_choice", "tool_choice"),
        ({"tool_choice": {"type": "function"}}, "invalid_tool_choice", "tool_choice"),
        ({"tool_choice": 5}, "invalid_request", "`$.tool_choice`"),
        ({"response_format": {"type": "json_schema"}}, "invalid_request", "json_schema"),
        ({"response_format": {"type": "yaml"}}, "invalid_request", "`$.response_format.type`"),
        ({"response_format": {}}, "invalid_request", "type"),
        ({"response_format": "json"}, "invalid_request", "`$.response_format`"),
    ],
)
def test_bad_request_fields_are_refused(fields: Body, code: str, says: str) -> None:
    assert_refused(openai, chat(**fields), code, says)


@pytest.mark.parametrize(
    ("message", "code", "says"),
    [
        ({"role": "critic", "content": "x"}, "invalid_request", "`$.messages[0].role`"),
        (
            {"role": "user", "content": [{"type": "input_audio"}]},
            "invalid_request",
            "`$.messages[0].content[0].type`",
        ),
        ({"role": "user", "content": [{"text": "untyped"}]}, "invalid_request", "type"),
        ({"role": "user", "content": [{"type": "image_url"}]}, "invalid_request", "image_url"),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {}}]},
            "invalid_request",
            "url",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": DATA_URL}]},
            "invalid_request",
            "`$.messages[0].content[0].image_url`",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x"}}]},
            "invalid_image",
            "data: URLs",
        ),
        ({"role": "assistant", "tool_calls": [{}]}, "invalid_request", "function"),
        (
            {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]},
            "invalid_request",
            "`$.messages[0].tool_calls[0].function`",
        ),
        ({"role": "assistant", "tool_calls": ["f"]}, "invalid_request", "tool_calls[0]"),
    ],
)
def test_bad_messages_are_refused(message: dict[str, Any], code: str, says: str) -> None:
    assert_refused(openai, chat(message), code, says)
