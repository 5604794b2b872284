"""`skulk chat --format` and `skulk bench`, against a node answering over real HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from skulk_cli.main import app

from .fake_node import (
    CHAT_WORDS,
    CLAUDE_MESSAGE,
    CONTEXT_ERROR,
    CONTEXT_MESSAGE,
    MODEL,
    OLLAMA_CHAT,
    Answer,
    FakeNode,
    Recorded,
    Reply,
    bench_response,
    chat_stream,
    claude_error,
    claude_stream,
    failing_chat_stream,
    failing_claude_stream,
    failing_ollama_stream,
    ndjson_reply,
    ollama_stream,
    sse,
    sse_reply,
)
from .test_cli import TERMINAL, flat, line_with, plain, run

PATHS = {
    "openai": "/v1/chat/completions",
    "claude": "/v1/messages",
    "ollama": "/ollama/api/chat",
}
FORMATS = list(PATHS)
STORY = "Tell me a story"


def chat(node: FakeNode, fmt: str, *args: str) -> Any:
    return run("--api-url", node.url, "chat", MODEL, STORY, "--format", fmt, *args)


# --- chat --format ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_streams_the_reply_and_the_same_summary(node: FakeNode, fmt: str) -> None:
    result = chat(node, fmt)

    assert result.exit_code == 0, result.output
    assert result.stdout == "Once upon a time\n"
    summary = plain(result.stderr)
    assert "finish: stop" in summary
    assert "4 tokens" in summary and "prompt 7 tokens" in summary
    (sent,) = node.sent("POST", PATHS[fmt])
    assert isinstance(sent.body, dict) and sent.body["stream"] is True
    assert sent.body["messages"] == [{"role": "user", "content": STORY}]
    assert [r.path for r in node.requests] == [PATHS[fmt]], "only the chosen API was asked"


def test_summary_names_the_formats_own_reason_where_it_differs(node: FakeNode) -> None:
    node.routes[("POST", "/v1/messages")] = sse_reply(claude_stream(stop_reason="max_tokens"))

    result = chat(node, "claude")

    assert result.exit_code == 0, result.output
    assert "finish: length (max_tokens); 4 tokens; prompt 7 tokens" in plain(result.stderr)


def test_summary_shows_rates_where_the_format_has_them(node: FakeNode) -> None:
    openai = plain(chat(node, "openai").stderr)
    ollama = plain(chat(node, "ollama").stderr)

    assert "4 tokens, 48.2 tokens/s; prompt 7 tokens at 310.5/s" in openai
    # Ollama reports durations in nanoseconds: 4 tokens in 80 ms, 7 in 20 ms.
    assert "4 tokens, 50.0 tokens/s; prompt 7 tokens at 350.0/s" in ollama


def test_claude_request_carries_the_system_prompt_and_options(node: FakeNode) -> None:
    result = chat(node, "claude", "--system", "Be brief.", "--max-tokens", "16")

    assert result.exit_code == 0, result.output
    assert node.sent("POST", "/v1/messages")[0].body == {
        "model": MODEL,
        "system": "Be brief.",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": STORY}],
        "stream": True,
    }


def test_ollama_request_puts_sampling_in_options(node: FakeNode) -> None:
    result = chat(node, "ollama", "--max-tokens", "16", "--temperature", "0")

    assert result.exit_code == 0, result.output
    assert node.sent("POST", "/ollama/api/chat")[0].body == {
        "model": MODEL,
        "messages": [{"role": "user", "content": STORY}],
        "options": {"num_predict": 16, "temperature": 0.0},
        "stream": True,
    }


def test_claude_thinking_is_shown_before_the_answer(node: FakeNode) -> None:
    node.routes[("POST", "/v1/messages")] = sse_reply(claude_stream(thinking=["Hmm, a fox. "]))

    result = chat(node, "claude")

    assert result.exit_code == 0, result.output
    assert result.stdout == "Hmm, a fox. Once upon a time\n"


FAILING = {
    "openai": lambda: sse_reply(failing_chat_stream()),
    "claude": lambda: sse_reply(failing_claude_stream()),
    "ollama": lambda: ndjson_reply(failing_ollama_stream()),
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failure_mid_reply_prints_the_nodes_message_and_exits_1(node: FakeNode, fmt: str) -> None:
    node.routes[("POST", PATHS[fmt])] = FAILING[fmt]()

    result = chat(node, fmt)

    assert result.exit_code == 1
    assert result.stdout == "Once\n", "the text that did arrive stays shown"
    assert CONTEXT_MESSAGE in flat(result.stderr)
    assert "finish:" not in result.stderr


NOT_PLACED = "No instance found for model nope"
REFUSALS: dict[str, dict[str, Any]] = {
    "openai": {"error": {"message": NOT_PLACED, "type": "not_found_error", "code": "x"}},
    "claude": claude_error(NOT_PLACED, "not_found_error"),
    "ollama": {"error": NOT_PLACED},
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_refusal_in_each_formats_error_shape_exits_1(node: FakeNode, fmt: str) -> None:
    node.routes[("POST", PATHS[fmt])] = (404, REFUSALS[fmt])

    result = run("--api-url", node.url, "chat", "nope", "hi", "--format", fmt)

    assert result.exit_code == 1
    err = flat(result.stderr)
    assert NOT_PLACED in err and "skulk place nope" in err
    assert result.stdout == ""


def test_an_ollama_reply_cut_off_before_done_exits_1(node: FakeNode) -> None:
    node.routes[("POST", "/ollama/api/chat")] = ndjson_reply(ollama_stream()[:-1])

    result = chat(node, "ollama")

    assert result.exit_code == 1
    assert result.stdout == "Once upon a time\n"
    assert "The reply was cut off" in flat(result.stderr)


def test_a_claude_reply_cut_off_before_message_stop_exits_1(node: FakeNode) -> None:
    node.routes[("POST", "/v1/messages")] = sse_reply(claude_stream()[:-1])

    result = chat(node, "claude")

    assert result.exit_code == 1
    assert "The reply was cut off" in flat(result.stderr)


def test_an_answer_in_the_wrong_media_type_is_reported(node: FakeNode) -> None:
    # An SSE body where Ollama's NDJSON belongs: not what a Skulk node sends.
    node.routes[("POST", "/ollama/api/chat")] = sse_reply(chat_stream())

    result = chat(node, "ollama")

    assert result.exit_code == 1
    assert "did not answer with application/x-ndjson" in flat(result.stderr)


@pytest.mark.parametrize(("fmt", "expected"), [("claude", CLAUDE_MESSAGE), ("ollama", OLLAMA_CHAT)])
def test_chat_json_prints_the_formats_whole_reply(
    node: FakeNode, fmt: str, expected: dict[str, Any]
) -> None:
    result = run("--api-url", node.url, "--json", "chat", MODEL, STORY, "--format", fmt)

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == expected
    assert node.sent("POST", PATHS[fmt])[0].body["stream"] is False  # type: ignore[index]


ERROR_BODIES: dict[str, dict[str, Any]] = {
    "openai": CONTEXT_ERROR,
    "claude": claude_error(CONTEXT_MESSAGE),
    "ollama": {"error": CONTEXT_MESSAGE},
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_chat_json_with_an_error_body_exits_1(node: FakeNode, fmt: str) -> None:
    # A failure after the status was sent: 200 and an error body, in each format's shape.
    node.routes[("POST", PATHS[fmt])] = (200, ERROR_BODIES[fmt])

    result = run("--api-url", node.url, "--json", "chat", MODEL, STORY, "--format", fmt)

    assert result.exit_code == 1
    assert json.loads(result.stdout) == ERROR_BODIES[fmt]


def test_interactive_claude_session_keeps_the_conversation(node: FakeNode) -> None:
    result = CliRunner().invoke(
        app,
        ["--api-url", node.url, "chat", MODEL, "--format", "claude", "--system", "Be brief."],
        input="hello\nworld\n",
        env=TERMINAL,
        prog_name="skulk",
    )

    assert result.exit_code == 0, result.output
    first, second = node.sent("POST", "/v1/messages")
    assert first.body["system"] == second.body["system"] == "Be brief."  # type: ignore[index]
    assert second.body["messages"] == [  # type: ignore[index]
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "".join(CHAT_WORDS)},
        {"role": "user", "content": "world"},
    ]


def test_an_unknown_format_is_a_usage_error(node: FakeNode) -> None:
    result = chat(node, "gemini")

    assert result.exit_code == 2
    assert "'gemini' is not one of 'openai', 'claude', 'ollama'" in flat(result.output)
    assert node.requests == []


# --- bench --------------------------------------------------------------------------


def test_bench_shows_the_generation_stats_and_power(node: FakeNode) -> None:
    result = run("--api-url", node.url, "bench", MODEL)

    assert result.exit_code == 0, result.output
    out = plain(result.stdout)
    row = line_with(out, "│ 1 ")
    cells = [c.strip() for c in row.split("│")[1:-1]]
    # Run, prompt tokens, prompt tok/s, first token ms, gen tokens, gen tok/s, batched,
    # in flight, power.
    assert cells == ["1", "7", "310.5", "22.6", "4", "48.2", "0", "1", "41.5"]
    assert "mean" not in out
    assert "Power from nvidia-smi, rapl:package-0." in flat(out)
    (sent,) = node.sent("POST", "/bench/chat/completions")
    assert isinstance(sent.body, dict)
    assert sent.body["model"] == MODEL and sent.body["temperature"] == 0
    assert sent.body["max_tokens"] == 32  # a default run ends in seconds on a small CPU
    assert [m["role"] for m in sent.body["messages"]] == ["user"]


def test_bench_sends_the_prompt_and_budget_given(node: FakeNode) -> None:
    result = run("--api-url", node.url, "bench", MODEL, "--prompt", "2 + 2 =", "--max-tokens", "4")

    assert result.exit_code == 0, result.output
    assert node.sent("POST", "/bench/chat/completions")[0].body == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "2 + 2 ="}],
        "max_tokens": 4,
        "temperature": 0,
    }


def varying_runs(node: FakeNode) -> None:
    """Three runs whose figures differ, one of them without a power reading."""
    answers = iter(
        [
            bench_response({"generation_tps": 40.0, "time_to_first_token_ms": 20.0}),
            bench_response(
                {"generation_tps": 50.0, "time_to_first_token_ms": 30.0, "generation_tokens": 5},
                power=None,
            ),
            bench_response({"generation_tps": 60.0, "time_to_first_token_ms": 40.0}),
        ]
    )

    def answer(_: Recorded) -> Answer:
        return 200, next(answers)

    node.routes[("POST", "/bench/chat/completions")] = answer


def test_bench_runs_adds_a_mean_row(node: FakeNode) -> None:
    varying_runs(node)

    result = run("--api-url", node.url, "bench", MODEL, "--runs", "3")

    assert result.exit_code == 0, result.output
    assert len(node.sent("POST", "/bench/chat/completions")) == 3
    out = plain(result.stdout)
    assert "40.0" in line_with(out, "│ 1 ") and "50.0" in line_with(out, "│ 2 ")
    assert "n/a" in line_with(out, "│ 2 ")
    mean = [c.strip() for c in line_with(out, "mean").split("│")[1:-1]]
    # Tokens 4, 5, 4: a mean with a fraction; power over the runs that measured it.
    assert mean == ["mean", "7", "310.5", "30.0", "4.3", "50.0", "0", "1", "41.5"]
    assert "Power n/a: not measurable on this node." in flat(out)


def test_bench_fits_80_columns_on_a_slow_machine(node: FakeNode) -> None:
    slow = {"time_to_first_token_ms": 12096.3, "prompt_tps": 1234.4}
    node.routes[("POST", "/bench/chat/completions")] = (200, bench_response(slow))

    result = run("--api-url", node.url, "bench", MODEL, env={"COLUMNS": "80"})

    assert result.exit_code == 0, result.output
    out = plain(result.stdout)
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    cells = [c.strip() for c in line_with(out, "│ 1 ").split("│")[1:-1]]
    assert cells[2:4] == ["1,234", "12,096"]  # whole figures from 1,000 up


def test_bench_without_a_power_reading_says_so(node: FakeNode) -> None:
    node.routes[("POST", "/bench/chat/completions")] = (200, bench_response(power=None))

    result = run("--api-url", node.url, "bench", MODEL)

    assert result.exit_code == 0, result.output
    assert line_with(result.stdout, "│ 1 ").rstrip(" │").endswith("n/a")
    assert "not measurable on this node" in flat(result.stdout)


def test_bench_json_is_the_list_of_raw_responses(node: FakeNode) -> None:
    one = run("--api-url", node.url, "bench", MODEL, "--json")
    two = run("--api-url", node.url, "--json", "bench", MODEL, "--runs", "2")

    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout) == [bench_response()]
    assert json.loads(two.stdout) == [bench_response(), bench_response()]


def test_bench_of_a_model_with_no_instance_exits_1(node: FakeNode) -> None:
    node.routes[("POST", "/bench/chat/completions")] = (404, REFUSALS["openai"])

    result = run("--api-url", node.url, "bench", "nope", "--runs", "3")

    assert result.exit_code == 1
    err = flat(result.stderr)
    assert NOT_PLACED in err and "skulk place nope" in err
    assert len(node.sent("POST", "/bench/chat/completions")) == 1, "no further runs"
    assert result.stdout == ""


def test_bench_refused_request_exits_1_with_the_message(node: FakeNode) -> None:
    message = "max_tokens must be at most 32768"
    node.routes[("POST", "/bench/chat/completions")] = Reply(
        400, {"error": {"message": message, "type": "invalid_request_error", "code": 400}}
    )

    result = run("--api-url", node.url, "bench", MODEL)

    assert result.exit_code == 1
    assert message in flat(result.stderr)


def failing_second_run(node: FakeNode) -> None:
    answers = iter([bench_response(), CONTEXT_ERROR])
    # A failure after the status was sent: 200 and an error body.
    node.routes[("POST", "/bench/chat/completions")] = lambda _: (200, next(answers))


def test_bench_failure_during_generation_shows_runs_done_and_exits_1(node: FakeNode) -> None:
    failing_second_run(node)

    result = run("--api-url", node.url, "bench", MODEL, "--runs", "3")

    assert result.exit_code == 1
    assert "41.5" in line_with(result.stdout, "│ 1 ")
    assert "│ 2 " not in plain(result.stdout)
    assert CONTEXT_MESSAGE in flat(result.stderr)
    assert len(node.sent("POST", "/bench/chat/completions")) == 2, "no run after the failure"


def test_bench_json_failure_prints_the_responses_and_exits_1(node: FakeNode) -> None:
    failing_second_run(node)

    result = run("--api-url", node.url, "bench", MODEL, "--runs", "3", "--json")

    assert result.exit_code == 1
    assert json.loads(result.stdout) == [bench_response(), CONTEXT_ERROR]


# --- base models and the default cap -------------------------------------------------


def completion_stream(words: tuple[str, ...] = CHAT_WORDS) -> list[bytes]:
    """A streamed ``/v1/completions`` answer, frame for frame as the daemon writes it."""

    def frame(text: str, finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return sse({"id": "cmd", "object": "text_completion", "choices": [choice]})

    stats = {
        "prompt_tps": 100.0,
        "generation_tps": 20.0,
        "prompt_tokens": 6,
        "generation_tokens": 4,
    }
    return [
        b": command_id cmd\n\n",
        *(frame(word) for word in words),
        frame("", "length"),
        b": generation_stats " + json.dumps(stats).encode() + b"\n\n",
        b"data: [DONE]\n\n",
    ]


def listing(kind: str | None) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": MODEL, "model_kind": kind}]}


def test_a_base_model_is_asked_through_completions_with_a_capped_reply(node: FakeNode) -> None:
    node.routes[("GET", "/v1/models")] = (200, listing("base"))
    node.routes[("POST", "/v1/completions")] = sse_reply(completion_stream())

    result = run("--api-url", node.url, "chat", MODEL, "2 + 2 =", "--system", "Sums.")

    assert result.exit_code == 0, result.output
    assert result.stdout == "Once upon a time\n"
    summary = plain(result.stderr)
    assert "finish: length" in summary and "prompt 6 tokens" in summary
    (sent,) = node.sent("POST", "/v1/completions")
    assert sent.body == {
        "model": MODEL,
        "prompt": "Sums.\n2 + 2 =",
        "max_tokens": 256,
        "stream": True,
    }
    assert not node.sent("POST", "/v1/chat/completions")


@pytest.mark.parametrize("kind", ["instruct", None])
def test_any_other_model_is_asked_through_chat_with_a_capped_reply(
    node: FakeNode, kind: str | None
) -> None:
    node.routes[("GET", "/v1/models")] = (200, listing(kind))
    result = run("--api-url", node.url, "chat", MODEL, STORY, "--max-tokens", "12")

    assert result.exit_code == 0, result.output
    (sent,) = node.sent("POST", "/v1/chat/completions")
    assert isinstance(sent.body, dict) and sent.body["max_tokens"] == 12
    assert not node.sent("POST", "/v1/completions")


def test_a_base_model_session_continues_the_whole_conversation(node: FakeNode) -> None:
    node.routes[("GET", "/v1/models")] = (200, listing("base"))
    node.routes[("POST", "/v1/completions")] = lambda _: sse_reply(completion_stream((" 4",)))

    result = CliRunner().invoke(
        app,
        ["--api-url", node.url, "chat", MODEL],
        input="2 + 2 =\n3 + 3 =\n",
        env=TERMINAL,
        prog_name="skulk",
    )

    assert result.exit_code == 0, result.output
    assert "a base model: it continues the conversation's text" in flat(result.output)
    first, second = node.sent("POST", "/v1/completions")
    assert first.body["prompt"] == "2 + 2 ="  # type: ignore[index]
    # The reply follows the text it continued; the next line starts a new one.
    assert second.body["prompt"] == "2 + 2 = 4\n3 + 3 ="  # type: ignore[index]
