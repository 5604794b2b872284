"""Tool calls are separated from content the way the spec's "Tool Use" section says."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skulk_core.chat.tool_parsing import ParsedCall, ToolCallSieve
from skulk_core.chat.tools import (
    NO_TOOLS,
    NamedChoice,
    ToolChoiceError,
    ToolSpec,
    resolve_tool_choice,
)

NAMES = frozenset({"get_weather", "lookup"})


def run(
    pieces: list[str], names: frozenset[str] = NAMES
) -> tuple[list[str], str, list[ParsedCall]]:
    """Feed ``pieces``; return what was released after each piece, the tail, the calls."""
    sieve = ToolCallSieve(names)
    released = [sieve.feed(piece) for piece in pieces]
    tail, calls = sieve.finish()
    return released, tail, calls


def whole(text: str, names: frozenset[str] = NAMES) -> tuple[str, list[ParsedCall]]:
    released, tail, calls = run([text], names)
    return "".join(released) + tail, calls


WEATHER = ParsedCall(name="get_weather", arguments='{"location": "Paris"}')


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "get_weather", "arguments": {"location": "Paris"}}',
        '  {"name": "get_weather", "parameters": {"location": "Paris"}}',
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>',
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris"}}]',
        '<|python_tag|>{"name": "get_weather", "parameters": {"location": "Paris"}}',
        '```json\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n```',
        '{"name": "get_weather", "arguments": "{\\"location\\": \\"Paris\\"}"}',
        '{"function": {"name": "get_weather", "arguments": {"location": "Paris"}}}',
    ],
)
def test_every_common_call_shape_is_one_call_and_no_content(text: str) -> None:
    content, calls = whole(text)
    assert calls == [WEATHER]
    assert content == ""


def test_several_calls_in_a_list_or_in_tags() -> None:
    listed = (
        '[{"name": "get_weather", "arguments": {"location": "Paris"}},'
        ' {"name": "lookup", "arguments": {}}]'
    )
    tagged = (
        '<tool_call>{"name": "get_weather", "arguments": {"location": "Paris"}}</tool_call>\n'
        '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
    )
    for text in (listed, tagged):
        content, calls = whole(text)
        assert [c.name for c in calls] == ["get_weather", "lookup"]
        assert content == ""


def test_a_call_to_a_tool_that_was_not_offered_is_content() -> None:
    text = '{"name": "print", "arguments": {"text": "hi"}}'
    assert whole(text) == (text, [])


def test_unparsable_arguments_are_content_not_an_error() -> None:
    text = '{"name": "get_weather", "arguments": "location=Paris"}'
    assert whole(text) == (text, [])
    tagged = "<tool_call>{not json}</tool_call>"
    assert whole(tagged) == (tagged, [])


def test_a_json_answer_is_released_once_its_first_key_decides_it() -> None:
    released, tail, calls = run(['{"col', 'ors": ["red",', ' "green"]}'])
    # "col" begins no call key ("name", "function", "arguments", ...): content at once.
    assert "".join(released) + tail == '{"colors": ["red", "green"]}'
    assert calls == []
    assert released[0] == '{"col'


def test_a_prefix_is_held_only_while_it_could_still_be_a_call() -> None:
    released, tail, calls = run(['{"na', 'me": "get_', 'temperature", "x": 1}'])
    assert released[0] == "" and released[1] == ""  # could still be get_weather
    assert released[2] == '{"name": "get_temperature", "x": 1}'
    assert calls == [] and tail == ""


def test_plain_text_streams_at_once_and_a_late_tagged_call_is_caught() -> None:
    released, tail, calls = run(["Let me check. ", "<tool", '_call>{"name": "lookup"}</tool_call>'])
    assert released[0] == "Let me check. "
    assert calls == [ParsedCall(name="lookup", arguments="{}")]
    assert tail == ""


def test_an_unfinished_call_at_the_end_is_content() -> None:
    text = '{"name": "get_weather", "arguments": {"location": "Par'
    assert whole(text) == (text, [])


def test_text_after_a_call_is_content() -> None:
    content, calls = whole('{"name": "lookup", "arguments": {}} Done.')
    assert calls == [ParsedCall(name="lookup", arguments="{}")]
    assert content.strip() == "Done."


SAMPLES = [
    '{"name": "get_weather", "arguments": {"location": "Paris"}}',
    '<tool_call>{"name": "lookup", "arguments": {"q": "x"}}</tool_call>',
    '{"answer": 42, "name": "get_weather"}',
    "Plain prose with a { brace and <tool in it.",
    '```json\n{"name": "lookup", "arguments": {}}\n```',
    '{"name": "nope", "arguments": {}}',
]


@given(
    st.sampled_from(SAMPLES),
    st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=40),
)
def test_splitting_the_stream_anywhere_gives_the_same_result(text: str, sizes: list[int]) -> None:
    pieces, rest = [], text
    for size in sizes:
        if not rest:
            break
        pieces.append(rest[:size])
        rest = rest[size:]
    if rest:
        pieces.append(rest)
    released, tail, calls = run(pieces)
    assert ("".join(released) + tail, calls) == whole(text)


def test_arguments_come_back_as_a_json_object_text() -> None:
    _, calls = whole('{"name": "lookup", "arguments": {"q": "caf\\u00e9", "n": 2}}')
    assert json.loads(calls[0].arguments) == {"q": "café", "n": 2}


TOOLS = (ToolSpec(name="get_weather"), ToolSpec(name="lookup"))


def test_tool_choice_rules() -> None:
    assert resolve_tool_choice(TOOLS, None).mode == "auto"
    assert resolve_tool_choice(TOOLS, "auto").tools == TOOLS
    assert resolve_tool_choice(TOOLS, "none") == NO_TOOLS
    assert resolve_tool_choice((), None) == NO_TOOLS
    required = resolve_tool_choice(TOOLS, "required")
    assert required.mode == "required" and required.tools == TOOLS
    named = resolve_tool_choice(TOOLS, NamedChoice("lookup"))
    assert named.mode == "named" and named.tools == (ToolSpec(name="lookup"),)


@pytest.mark.parametrize(
    ("tools", "choice"),
    [
        (TOOLS, NamedChoice("missing")),
        ((), NamedChoice("lookup")),
        ((), "required"),
        ((ToolSpec(name="a"), ToolSpec(name="a")), "auto"),
    ],
)
def test_tool_choices_that_cannot_be_honoured_are_refused(
    tools: tuple[ToolSpec, ...], choice: NamedChoice | str
) -> None:
    with pytest.raises(ToolChoiceError):
        resolve_tool_choice(tools, choice)  # type: ignore[arg-type]
