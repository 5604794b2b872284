"""The per-format stream readers, on streams recorded from a real node.

``samples/`` holds bodies a daemon serving the demo model sent for the same request
(``Count: one, two, three,``, 8 tokens, greedy) in each format, and for a prompt too
long for its 1,024-token window.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from skulk_cli.client import UnexpectedResponseError
from skulk_cli.wire_formats import (
    CLAUDE_DEFAULT_MAX_TOKENS,
    Finish,
    StreamError,
    TextDelta,
    WireEvent,
    WireFormat,
    claude_events,
    error_message,
    events,
    ollama_events,
    openai_events,
    request_body,
)

SAMPLES = Path(__file__).parent / "samples"
RECORDED_TEXT = "-1\n-2\n-3"
CONTEXT_MESSAGE = (
    "context_length_exceeded: the prompt is 2009 tokens, which leaves no room to generate "
    "in this model's 1024-token context window"
)
FORMATS = [WireFormat.OPENAI, WireFormat.CLAUDE, WireFormat.OLLAMA]
"""The chat formats, recorded for the same conversation; ``completion`` continues the
text as written, so its recording has its own text and counts."""
COMPLETION_TEXT = " four, five, six, seven,"


def lines(name: str) -> list[str]:
    # httpx's iter_lines splits the same way: on newlines, without them.
    return (SAMPLES / name).read_text(encoding="utf-8").splitlines()


def read(fmt: WireFormat, sample: str) -> list[WireEvent]:
    return list(events(fmt, lines(sample)))


def text_of(seen: list[WireEvent], *, thinking: bool = False) -> str:
    return "".join(e.text for e in seen if isinstance(e, TextDelta) and e.thinking == thinking)


# --- recorded replies ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_reads_as_the_same_reply(fmt: WireFormat) -> None:
    seen = read(fmt, f"{fmt.value}.txt")

    assert text_of(seen) == RECORDED_TEXT
    finish = seen[-1]
    assert isinstance(finish, Finish)
    assert (finish.reason, finish.prompt_tokens, finish.completion_tokens) == ("length", 17, 8)
    assert sum(isinstance(e, Finish | StreamError) for e in seen) == 1


def test_finish_reasons_keep_the_formats_own_word() -> None:
    reasons = {fmt: read(fmt, f"{fmt.value}.txt")[-1] for fmt in FORMATS}

    assert {fmt: getattr(f, "native_reason", None) for fmt, f in reasons.items()} == {
        WireFormat.OPENAI: "length",
        WireFormat.CLAUDE: "max_tokens",
        WireFormat.OLLAMA: "length",
    }


def test_openai_rates_come_from_the_generation_stats_comment() -> None:
    finish = read(WireFormat.OPENAI, "openai.txt")[-1]

    assert isinstance(finish, Finish)
    assert finish.prompt_tps == pytest.approx(285.72, abs=0.01)
    assert finish.generation_tps == pytest.approx(62.84, abs=0.01)


def test_ollama_rates_come_from_counts_and_nanosecond_durations() -> None:
    finish = read(WireFormat.OLLAMA, "ollama.txt")[-1]

    assert isinstance(finish, Finish)
    assert finish.generation_tps == pytest.approx(8 / 0.122220699)
    assert finish.prompt_tps == pytest.approx(17 / 0.058218145)


def test_claude_reports_no_rates() -> None:
    finish = read(WireFormat.CLAUDE, "claude.txt")[-1]

    assert isinstance(finish, Finish)
    assert finish.prompt_tps is None and finish.generation_tps is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failed_generation_is_one_error_with_the_nodes_message(fmt: WireFormat) -> None:
    assert read(fmt, f"{fmt.value}_ctx.txt") == [StreamError(CONTEXT_MESSAGE)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_stream_cut_before_its_end_has_no_finish(fmt: WireFormat) -> None:
    recorded = lines(f"{fmt.value}.txt")
    # The terminal frame and what follows it: [DONE] and the stats before it for
    # OpenAI, message_stop for Claude, the done line for Ollama.
    cut = {WireFormat.OPENAI: -6, WireFormat.CLAUDE: -3, WireFormat.OLLAMA: -1}[fmt]

    seen = list(events(fmt, recorded[:cut]))

    assert seen and all(isinstance(e, TextDelta) for e in seen)


def test_a_completion_stream_reads_as_text_and_one_finish() -> None:
    seen = read(WireFormat.COMPLETION, "completion.txt")

    assert text_of(seen) == COMPLETION_TEXT
    finish = seen[-1]
    assert isinstance(finish, Finish)
    assert (finish.reason, finish.prompt_tokens, finish.completion_tokens) == ("length", 9, 8)
    assert finish.generation_tps is not None and finish.generation_tps > 0
    cut = list(events(WireFormat.COMPLETION, lines("completion.txt")[:-6]))
    assert cut and all(isinstance(e, TextDelta) for e in cut)

    (failed,) = read(WireFormat.COMPLETION, "completion_ctx.txt")
    assert isinstance(failed, StreamError)
    assert failed.message.startswith("context_length_exceeded: the prompt is 2102 tokens")


def test_a_completion_request_is_the_conversation_as_plain_text() -> None:
    conversation = [
        {"role": "system", "content": "Arithmetic."},
        {"role": "user", "content": "2 + 2 ="},
        {"role": "assistant", "content": " 4"},
        {"role": "user", "content": "3 + 3 ="},
    ]
    body = request_body(
        WireFormat.COMPLETION, "m", conversation, stream=True, max_tokens=5, temperature=0
    )
    # A reply follows the text it continued; every other turn starts a line (as a node
    # renders a chat for a base card, so both reuse the same cached prefix).
    assert body == {
        "model": "m",
        "prompt": "Arithmetic.\n2 + 2 = 4\n3 + 3 =",
        "max_tokens": 5,
        "temperature": 0,
        "stream": True,
    }


def test_nothing_is_read_past_the_end_of_a_reply() -> None:
    def endless() -> Iterator[str]:
        yield from lines("ollama.txt")
        raise AssertionError("read past the done line")

    assert isinstance(list(ollama_events(endless()))[-1], Finish)


# --- details of each format ---------------------------------------------------------


def sse(*payloads: str) -> list[str]:
    out: list[str] = []
    for payload in payloads:
        out += [f"data: {payload}", ""]
    return out


def test_openai_prefers_the_usage_chunk_and_shows_reasoning_apart() -> None:
    seen = list(
        openai_events(
            [
                ": keep-alive",
                "",
                *sse(
                    '{"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]}',
                    '{"choices": [{"index": 1, "delta": {"content": "other choice"}}]}',
                    '{"choices": [{"index": 0, "delta": {"content": "4"}}]}',
                    '{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}',
                    '{"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}',
                ),
                ': generation_stats {"prompt_tokens": 99, "generation_tokens": 99}',
                "",
                *sse("[DONE]"),
            ]
        )
    )

    assert seen == [
        TextDelta("hmm", thinking=True),
        TextDelta("4"),
        Finish(reason="stop", native_reason="stop", prompt_tokens=5, completion_tokens=2),
    ]


def test_openai_done_without_a_finish_reason_is_an_error() -> None:
    seen = list(
        openai_events(sse('{"choices": [{"index": 0, "delta": {"content": "a"}}]}', "[DONE]"))
    )

    assert seen == [
        TextDelta("a"),
        StreamError("the node ended the reply without a finish reason"),
    ]


def test_claude_thinking_deltas_are_thinking_and_unknown_events_are_skipped() -> None:
    frames = [
        "event: message_start",
        'data: {"type": "message_start", "message": {"usage": {"input_tokens": 3}}}',
        "",
        *sse(
            '{"type": "content_block_delta", "index": 0,'
            ' "delta": {"type": "thinking_delta", "thinking": "let me see"}}',
            '{"type": "content_block_delta", "index": 0,'
            ' "delta": {"type": "signature_delta", "signature": "abc"}}',
            '{"type": "a_future_event", "whatever": 1}',
            '{"type": "content_block_delta", "index": 1,'
            ' "delta": {"type": "text_delta", "text": "Yes."}}',
            '{"type": "message_delta", "delta": {"stop_reason": "tool_use"},'
            ' "usage": {"output_tokens": 6}}',
            '{"type": "message_stop"}',
        ),
    ]

    assert list(claude_events(frames)) == [
        TextDelta("let me see", thinking=True),
        TextDelta("Yes."),
        # The input count from message_start stands where message_delta has none.
        Finish(reason="tool_calls", native_reason="tool_use", prompt_tokens=3, completion_tokens=6),
    ]


def test_ollama_keep_alive_spaces_are_whitespace() -> None:
    seen = list(
        ollama_events(
            [
                " ",
                ' {"message": {"role": "assistant", "content": "", "thinking": "hm"}}',
                '  {"message": {"content": "ok"}, "done": false}',
                '{"message": {"content": ""}, "done": true, "done_reason": "stop",'
                ' "prompt_eval_count": 2, "eval_count": 1}',
            ]
        )
    )

    assert seen == [
        TextDelta("hm", thinking=True),
        TextDelta("ok"),
        Finish(reason="stop", native_reason="stop", prompt_tokens=2, completion_tokens=1),
    ]


@pytest.mark.parametrize(
    ("fmt", "body"),
    [
        (WireFormat.OPENAI, sse("<html>")),
        (WireFormat.CLAUDE, sse('["not", "an", "event"]')),
        (WireFormat.OLLAMA, ['{"message": "not an object"}']),
    ],
)
def test_a_frame_in_another_shape_is_reported(fmt: WireFormat, body: list[str]) -> None:
    with pytest.raises(UnexpectedResponseError):
        list(events(fmt, body))


# --- requests and error bodies ------------------------------------------------------

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "hi"},
]


def test_openai_request_is_the_conversation_as_is() -> None:
    assert request_body(
        WireFormat.OPENAI, "m", CONVERSATION, stream=True, max_tokens=8, temperature=0.0
    ) == {
        "model": "m",
        "messages": CONVERSATION,
        "max_tokens": 8,
        "temperature": 0.0,
        "stream": True,
    }


def test_claude_request_moves_the_system_prompt_and_always_has_a_budget() -> None:
    assert request_body(WireFormat.CLAUDE, "m", CONVERSATION, stream=False) == {
        "model": "m",
        "system": "Be brief.",
        "max_tokens": CLAUDE_DEFAULT_MAX_TOKENS,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
    }


def test_ollama_request_puts_sampling_in_options() -> None:
    assert request_body(
        WireFormat.OLLAMA, "m", CONVERSATION, stream=True, max_tokens=8, temperature=0.5
    ) == {
        "model": "m",
        "messages": CONVERSATION,
        "options": {"num_predict": 8, "temperature": 0.5},
        "stream": True,
    }
    assert "options" not in request_body(WireFormat.OLLAMA, "m", CONVERSATION, stream=True)


@pytest.mark.parametrize(
    "body",
    [
        # Each format's 404 for an unplaced model, as the node sent it.
        {
            "error": {
                "message": "No instance found for model nope",
                "type": "not_found_error",
                "code": "model_not_found",
            }
        },
        {
            "type": "error",
            "error": {"type": "not_found_error", "message": "No instance found for model nope"},
        },
        {"error": "No instance found for model nope"},
    ],
    ids=["openai", "claude", "ollama"],
)
def test_error_bodies_of_every_format_give_their_message(body: dict[str, object]) -> None:
    assert error_message(body) == "No instance found for model nope"


def test_a_reply_is_not_an_error_body() -> None:
    assert error_message({"choices": [], "usage": {}}) is None
    assert error_message(["error"]) is None
