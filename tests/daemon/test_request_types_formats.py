"""Request decoding, pure (no daemon): the Responses, Claude Messages and Ollama
bodies. What each shape is accepted as, and how each bad one is refused (status and
code, and the field the message names)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from skulk_core.chat.tools import NamedChoice, ToolCall, ToolSpec
from skulk_daemon.chat.claude_request import TOOL_ERROR_PREFIX
from skulk_daemon.chat.ollama_request import decode_generate, is_load_probe
from skulk_daemon.chat.task import JsonObjectFormat, JsonSchemaFormat, TaskMessage
from tests.daemon.request_support import (
    DATA_URL,
    PNG,
    Body,
    assert_refused,
    claude,
    ollama_chat,
    ollama_generate,
    responses,
)

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


def respond(*items: dict[str, Any], **fields: Any) -> Body:
    return {"model": "m", "input": list(items) or "hi", **fields}


def messages(*turns: dict[str, Any], **fields: Any) -> Body:
    turns = turns or ({"role": "user", "content": "hi"},)
    return {"model": "m", "max_tokens": 8, "messages": list(turns), **fields}


def ollama(*turns: dict[str, Any], **fields: Any) -> Body:
    return {"model": "m", "messages": list(turns) or [{"role": "user", "content": "hi"}], **fields}


# --- Responses: accepted ------------------------------------------------------------


def test_a_string_input_is_one_user_turn_after_the_instructions() -> None:
    task = responses(respond(instructions="Be brief."))
    assert task.messages == (
        TaskMessage(role="system", content="Be brief."),
        TaskMessage(role="user", content="hi"),
    )


def test_message_items_with_or_without_a_type_and_every_text_part() -> None:
    parts = [
        {"type": "input_text", "text": "a"},
        {"type": "output_text", "text": "b", "annotations": []},
        {"type": "text", "text": "c"},
        {"type": "refusal", "refusal": "d"},
        {"type": "input_text", "text": 5},  # not a string: read as empty text
        {"type": "input_image", "image_url": DATA_URL, "detail": "auto"},
    ]
    task = responses(
        respond(
            {"role": "developer", "content": "sys"},
            {"type": None, "role": "user", "content": parts},
            {"type": "message", "role": "assistant", "content": None, "id": "msg_1"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "x"}]},
        )
    )
    system, user, assistant = task.messages
    assert system == TaskMessage(role="system", content="sys")
    assert (user.role, user.content, len(user.images)) == ("user", "abcd", 1)
    assert assistant == TaskMessage(role="assistant")


def test_calls_join_the_assistant_turn_and_outputs_carry_the_tool_name() -> None:
    task = responses(
        respond(
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "checking"},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "get_time"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "noon"}],
            },
        )
    )
    assert task.messages[1:] == (
        TaskMessage(
            role="assistant",
            content="checking",
            tool_calls=(
                ToolCall(id="c1", name="get_weather", arguments="{}"),
                ToolCall(id="c2", name="get_time", arguments="{}"),
            ),
        ),
        TaskMessage(role="tool", content="sunny", tool_call_id="c1", name="get_weather"),
        TaskMessage(role="tool", content="noon", tool_call_id="c2", name="get_time"),
    )


def test_tools_choices_formats_and_effort() -> None:
    tool = {"type": "function", "name": "f", "description": 5, "parameters": SCHEMA, "strict": True}
    task = responses(
        respond(
            tools=[tool, {"type": "function", "name": "g", "parameters": None}],
            tool_choice={"type": "function", "name": "f"},
            text={"format": {"type": "json_schema", "name": "w", "schema": SCHEMA}},
            reasoning={"effort": "low", "summary": "auto"},
        )
    )
    assert task.tools == (ToolSpec(name="f", parameters=SCHEMA), ToolSpec(name="g"))
    assert task.tool_choice == NamedChoice("f")
    assert task.response_format == JsonSchemaFormat(schema=SCHEMA, name="w")
    assert task.reasoning_effort == "low"
    assert responses(respond(reasoning={"effort": 3})).reasoning_effort is None
    assert responses(respond(text={"verbosity": "low"})).response_format is None
    assert responses(respond(text={"format": {"type": "text"}})).response_format is None
    json_object = respond(text={"format": {"type": "json_object"}})
    assert responses(json_object).response_format == JsonObjectFormat()


# --- Responses: refused -------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        (respond(input=[]), "invalid_request", "input must not be empty"),
        (respond(input=""), "invalid_request", "input must not be empty"),
        (respond(input=["hi"]), "invalid_request", "`$.input[0]`"),
        (respond({"type": "item_reference", "id": "m"}), "invalid_request", "item_reference"),
        (respond({"type": "file_search_call"}), "invalid_request", "`$.input[0].type`"),
        (respond({"role": "critic", "content": "x"}), "invalid_request", "`$.input[0].role`"),
        (respond({"content": "x"}), "invalid_request", "role"),
        (
            respond({"role": "user", "content": [{"type": "input_file"}]}),
            "invalid_request",
            "`$.input[0].content[0].type`",
        ),
        (respond({"role": "user", "content": 5}), "invalid_request", "`$.input[0].content`"),
        (respond({"type": "function_call", "name": "f"}), "invalid_request", "call_id"),
        (
            respond({"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}),
            "invalid_request",
            "`$.input[0].arguments`",
        ),
        (respond({"type": "function_call_output", "call_id": "c9"}), "invalid_request", "c9"),
        (respond(max_output_tokens=0), "invalid_request", "max_output_tokens"),
        (respond(previous_response_id="r"), "previous_response_not_supported", "previous"),
        (respond(conversation="c"), "conversation_not_supported", "conversation"),
        (respond(background=True), "invalid_request", "background"),
        (respond(tools=[{"type": "web_search"}]), "unsupported_tool", "web_search"),
        (respond(tools=[{"name": "f"}]), "unsupported_tool", "None"),
        (respond(tools=[{"type": "function"}]), "invalid_request", "`$.tools[0]`"),
        (
            respond(tools=[{"type": "function", "name": "f", "parameters": "{}"}]),
            "invalid_request",
            "`$.tools[0].parameters`",
        ),
        (respond(tool_choice="sometimes"), "invalid_tool_choice", "tool_choice"),
        (respond(tool_choice={"type": "function"}), "invalid_tool_choice", "tool_choice"),
        (respond(text={"format": {"type": "yaml"}}), "invalid_request", "`$.text.format.type`"),
        (respond(text={"format": {"type": "json_schema"}}), "invalid_request", "schema"),
        (respond(text={"format": "json"}), "invalid_request", "`$.text.format`"),
    ],
)
def test_bad_responses_bodies_are_refused(body: Body, code: str, says: str) -> None:
    assert_refused(responses, body, code, says)


@pytest.mark.parametrize(
    "image", [{}, {"file_id": "file_1"}, {"image_url": 5}, {"image_url": "https://x/a.png"}]
)
def test_only_inline_input_images_are_accepted(image: dict[str, Any]) -> None:
    part = {"type": "input_image", **image}
    body = respond({"role": "user", "content": [part]})
    assert_refused(responses, body, "invalid_image")


# --- Claude Messages ----------------------------------------------------------------


def test_claude_turns_blocks_and_tool_results() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    task = claude(
        messages(
            {"role": "user", "content": [{"type": "text", "text": "a"}, image]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "s"},
                    {"type": "redacted_thinking", "data": "x"},
                    {"type": "text", "text": "b"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"k": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": "bad",
                        "is_error": True,
                    },
                    {"type": "tool_result", "tool_use_id": "t9"},
                    {"type": "text", "text": "c", "cache_control": {"type": "ephemeral"}},
                ],
            },
            system="",
        )
    )
    user, assistant, error, unknown, text = task.messages
    assert (user.content, len(user.images)) == ("a", 1)
    assert assistant == TaskMessage(
        role="assistant",
        content="b",
        tool_calls=(ToolCall(id="t1", name="f", arguments='{"k":1}'),),
    )
    assert error == TaskMessage(
        role="tool", content=f"{TOOL_ERROR_PREFIX}bad", tool_call_id="t1", name="f"
    )
    assert unknown == TaskMessage(role="tool", content="", tool_call_id="t9")
    assert text == TaskMessage(role="user", content="c")


def test_claude_system_tools_choices_and_thinking() -> None:
    system = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    task = claude(
        messages(
            system=system,
            tools=[
                {"name": "f", "input_schema": SCHEMA, "type": "custom"},
                {"name": "g", "input_schema": {}},
            ],
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
            thinking={"type": "enabled", "budget_tokens": 1},
            output_config={"effort": "high", "format": {"type": "json_schema", "schema": SCHEMA}},
        )
    )
    assert task.messages[0] == TaskMessage(role="system", content="a\n\nb")
    assert task.tools == (ToolSpec(name="f", parameters=SCHEMA), ToolSpec(name="g"))
    assert (task.tool_choice, task.enable_thinking, task.reasoning_effort) == (
        "required",
        True,
        "high",
    )
    assert task.response_format == JsonSchemaFormat(schema=SCHEMA)
    for thinking, enabled in [
        ({"type": "disabled", "budget_tokens": -1}, False),
        ({"type": "adaptive"}, True),
        ({"type": "between_tools", "display": "summarized"}, True),
    ]:
        assert claude(messages(thinking=thinking)).enable_thinking is enabled
    for choice, expected in [("auto", "auto"), ("none", "none")]:
        assert claude(messages(tool_choice={"type": choice})).tool_choice == expected
    assert claude(messages(tool_choice={"type": "tool", "name": "f"})).tool_choice == NamedChoice(
        "f"
    )
    assert claude(messages(system="")).messages == (TaskMessage(role="user", content="hi"),)


URL_IMAGE = {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        ({"model": "m", "messages": []}, "invalid_request", "max_tokens"),
        (messages(thinking={"type": "enabled"}), "invalid_request", "budget_tokens"),
        (
            messages(thinking={"type": "enabled", "budget_tokens": 0}),
            "invalid_request",
            "`$.thinking.budget_tokens`",
        ),
        (messages(thinking={"type": "sometimes"}), "invalid_request", "`$.thinking.type`"),
        (
            messages(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
            "invalid_request",
            "`$.tools[0].type`",
        ),
        (messages(tools=[{"name": "f"}]), "invalid_request", "input_schema"),
        (messages(tool_choice={"type": "tool"}), "invalid_request", "name"),
        (messages({"role": "user", "content": [URL_IMAGE]}), "invalid_image", "base64"),
        (
            messages({"role": "user", "content": [{"type": "document"}]}),
            "invalid_request",
            "`$.messages[0].content[0].type`",
        ),
        (
            messages(
                {
                    "role": "user",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                }
            ),
            "invalid_request",
            "assistant turn",
        ),
        (
            messages(
                {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
            ),
            "invalid_request",
            "user turn",
        ),
        (messages({"role": "system", "content": "x"}), "invalid_request", "`$.messages[0].role`"),
    ],
)
def test_bad_claude_bodies_are_refused(body: Body, code: str, says: str) -> None:
    assert_refused(claude, body, code, says)


# --- Ollama -------------------------------------------------------------------------


def test_ollama_tool_calls_in_either_argument_form() -> None:
    calls = [
        {"function": {"name": "f", "arguments": {"city": "Oslo"}}},
        {"id": "c2", "function": {"name": "g", "arguments": '{"a": 1}'}},
        {"id": 3, "function": {"name": "h"}},
    ]
    task = ollama_chat(
        ollama(
            {"role": "assistant", "tool_calls": calls},
            {"role": "tool", "content": "ok", "tool_name": "f", "tool_call_id": "c1"},
            tools=[{"function": {"name": "f", "parameters": SCHEMA}}],
            options={"stop": "\n"},
        )
    )
    assert task.messages == (
        TaskMessage(
            role="assistant",
            tool_calls=(
                ToolCall(
                    id="", name="f", arguments=json.dumps({"city": "Oslo"}, separators=(",", ":"))
                ),
                ToolCall(id="c2", name="g", arguments='{"a": 1}'),
                ToolCall(id="", name="h", arguments="{}"),
            ),
        ),
        TaskMessage(role="tool", content="ok", tool_call_id="c1", name="f"),
    )
    assert (task.tools, task.stop) == ((ToolSpec(name="f", parameters=SCHEMA),), ("\n",))


def test_ollama_formats_and_think_levels() -> None:
    assert ollama_chat(ollama(format="")).response_format is None
    assert ollama_chat(ollama(format=SCHEMA)).response_format == JsonSchemaFormat(schema=SCHEMA)
    task = ollama_chat(ollama(think="HIGH"))
    assert (task.enable_thinking, task.reasoning_effort) == (True, "high")
    assert ollama_chat(ollama(think=False)).enable_thinking is False


def test_a_load_probe_is_decoded_without_reading_its_options() -> None:
    # The controller answers a probe before converting it, so decoding refuses nothing
    # that only conversion would.
    probe = decode_generate(b'{"model": "m", "format": "yaml", "think": "extreme"}')
    assert is_load_probe(probe)


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        (ollama({"role": "wizard", "content": "x"}), "invalid_request", "`$.messages[0].role`"),
        (ollama({"role": "assistant", "tool_calls": [{}]}), "invalid_request", "function"),
        (
            ollama(
                {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]}
            ),
            "invalid_request",
            "`$.messages[0].tool_calls[0].function.arguments`",
        ),
        (ollama(tools=[{"type": "retrieval"}]), "invalid_request", "`$.tools[0].type`"),
        (ollama({"role": "user", "images": ["not base64!"]}), "invalid_image", "base64"),
        (ollama(format="yaml"), "invalid_response_format", "format"),
        (ollama(format=5), "invalid_request", "`$.format`"),
        (ollama(think="extreme"), "invalid_request", "think"),
        (ollama(options={"num_predict": 0}), "invalid_request", "num_predict"),
        (ollama(options={"num_predict": -2}), "invalid_request", "num_predict"),
        (ollama(options={"temperature": "hot"}), "invalid_request", "`$.options.temperature`"),
    ],
)
def test_bad_ollama_chats_are_refused(body: Body, code: str, says: str) -> None:
    assert_refused(ollama_chat, body, code, says)


@pytest.mark.parametrize("field", ["suffix", "template"])
def test_generate_refuses_what_it_cannot_honour(field: str) -> None:
    assert_refused(ollama_generate, {"model": "m", "prompt": "p", field: "x"}, "unsupported_field")
    body = {"model": "m", "prompt": "p", "context": [1, 2]}
    assert_refused(ollama_generate, body, "unsupported_field", "context")
