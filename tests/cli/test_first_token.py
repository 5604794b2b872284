"""Placing a model and chatting with it from `skulk`, against a node over real HTTP."""

from __future__ import annotations

import _thread
import json
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import Result

from skulk_cli import console
from skulk_cli.commands import placement
from skulk_cli.main import app

from .fake_node import (
    CHAT_COMMAND_ID,
    CHAT_WORDS,
    COMPLETION,
    CONTEXT_ERROR,
    DELETE_RESPONSE,
    INSTANCE_DETAIL,
    MODEL,
    PEER_NODE,
    PLACE_RESPONSE,
    PLACED_ID,
    PREVIEWS,
    STATE,
    Answer,
    FakeNode,
    Recorded,
    Reply,
    chat_stream,
    failing_chat_stream,
    sse_reply,
    state_with,
    token_frames,
)
from .test_cli import TERMINAL, flat, line_with, plain, run, runner

LOADING: dict[str, Any] = {"RunnerLoading": {"progress": 0.5}}
READY: dict[str, Any] = {"RunnerReady": {}}


def runner_input(node: FakeNode, text: str) -> Result:
    """An interactive `skulk chat` session reading ``text`` as what the user types."""
    return runner.invoke(
        app, ["--api-url", node.url, "chat", MODEL], input=text, env=TERMINAL, prog_name="skulk"
    )


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement, "POLL_SECONDS", 0.01)


# --- previews -----------------------------------------------------------------------


def test_previews_show_nodes_layers_memory_and_context(node: FakeNode) -> None:
    result = run("--api-url", node.url, "previews", MODEL)

    assert result.exit_code == 0, result.output
    out = plain(result.stdout)
    alpha = line_with(out, "alpha")
    assert "Pipeline / MlxRing" in alpha and "0-8 (9 of 18)" in alpha and "300.0 MiB" in alpha
    assert "32,768" in alpha
    bravo = line_with(out, "9-17 (9 of 18)")
    assert "bravo" in bravo and "280.0 MiB" in bravo
    assert "8,192 *" in alpha and "* the engine reserves this window's memory at load" in out
    alternative = line_with(out, "0-17 (18 of 18)")
    assert "bravo" in alternative and "560.0 MiB" in alternative
    assert "alternative" in out
    assert "Tensor / MlxRing on 2 nodes: gemma-3-270m-q4 does not support Tensor sharding" in flat(
        out
    )
    assert node.sent("GET", "/instance/previews")[0].query == {"model_id": [MODEL]}


def test_previews_pass_every_excluded_node(node: FakeNode) -> None:
    result = run(
        "--api-url", node.url, "previews", MODEL, "--exclude", PEER_NODE, "--exclude", "node-c3"
    )

    assert result.exit_code == 0, result.output
    assert node.sent("GET", "/instance/previews")[0].query == {
        "model_id": [MODEL],
        "excluded_node_ids": [PEER_NODE, "node-c3"],
    }


def test_previews_ask_the_node_for_just_the_shape_given(node: FakeNode) -> None:
    result = run(
        "--api-url",
        node.url,
        "previews",
        MODEL,
        "--sharding",
        "Pipeline",
        "--min-nodes",
        "2",
        "--context-tokens",
        "4096",
    )

    assert result.exit_code == 0, result.output
    assert node.sent("GET", "/instance/previews")[0].query == {
        "model_id": [MODEL],
        "sharding": ["Pipeline"],
        "min_nodes": ["2"],
        "context_tokens": ["4096"],
    }


def test_previews_filter_by_sharding_and_node_count(node: FakeNode) -> None:
    tensor = run("--api-url", node.url, "previews", MODEL, "--sharding", "Tensor")
    two_nodes = run("--api-url", node.url, "previews", MODEL, "--min-nodes", "2")

    assert tensor.exit_code == 0, tensor.output
    assert "No valid placement." in plain(tensor.stdout)
    assert "does not support Tensor sharding" in flat(tensor.stdout)
    assert "0-8" not in plain(tensor.stdout)
    assert two_nodes.exit_code == 0, two_nodes.output
    assert "0-8 (9 of 18)" in plain(two_nodes.stdout)
    assert "0-17 (18 of 18)" not in plain(two_nodes.stdout), "the one-node preview is filtered"


def test_previews_say_what_a_context_window_costs(node: FakeNode) -> None:
    fits = run("--api-url", node.url, "previews", MODEL, "--context-tokens", "16384")
    too_big = run("--api-url", node.url, "previews", MODEL, "--context-tokens", "65536")

    assert fits.exit_code == 0, fits.output
    assert "KV for 16,384" in flat(fits.stdout)
    assert "576.0 MiB" in line_with(fits.stdout, "0-8 (9 of 18)")  # 36864 B x 16384
    assert "too large" in line_with(too_big.stdout, "0-8 (9 of 18)")


def test_previews_json_is_the_raw_response(node: FakeNode) -> None:
    result = run("--api-url", node.url, "previews", MODEL, "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == PREVIEWS


# --- place --------------------------------------------------------------------------


# The cluster before `skulk place MODEL`: MODEL is not placed yet.
UNPLACED: dict[str, Any] = {**STATE, "instances": {}}


def nothing_placed(node: FakeNode) -> None:
    node.routes[("GET", "/state")] = (200, UNPLACED)


def placing(node: FakeNode, *later: dict[str, Any]) -> None:
    """/state without the new instance until it is placed, then ``later`` in turn
    (the last one repeating)."""
    polls = 0

    def answer(_: Recorded) -> Answer:
        nonlocal polls
        if not node.sent("POST", "/place_instance"):
            return 200, UNPLACED
        polls += 1
        return 200, later[min(polls, len(later)) - 1]

    node.routes[("GET", "/state")] = answer


def test_place_waits_until_every_runner_is_ready(node: FakeNode) -> None:
    placing(
        node,
        state_with(PLACED_ID, LOADING),
        state_with(PLACED_ID, LOADING),
        state_with(PLACED_ID, READY),
    )

    result = run("--api-url", node.url, "place", MODEL)

    assert result.exit_code == 0, result.output
    out = plain(result.stdout)
    assert "Placing gemma-3-270m-q4: Pipeline / MlxRing" in out
    assert "0-8 (9 of 18)" in line_with(out, "alpha")
    assert "Context 8,192 tokens (up to 32,768)" in flat(out)
    assert f"Ready: {MODEL} as instance {PLACED_ID} on alpha, bravo" in flat(out)
    assert "context 8,192 tokens" in flat(out)
    assert "alpha loading 50%, bravo loading 50%" in plain(result.stderr)
    (posted,) = node.sent("POST", "/place_instance")
    assert posted.body == {
        "model_id": MODEL,
        "sharding": "Pipeline",
        "instance_meta": "MlxRing",
        "min_nodes": 1,
        "excluded_nodes": [],
    }
    after = node.requests[node.requests.index(posted) + 1 :]
    assert len([r for r in after if r.path == "/state"]) == 3, "it polled until ready"


def test_place_sends_the_options_given(node: FakeNode) -> None:
    placing(node, state_with(PLACED_ID, READY))

    result = run(
        "--api-url",
        node.url,
        "place",
        MODEL,
        "--min-nodes",
        "2",
        "--context-tokens",
        "4096",
        "--exclude",
        "node-c3",
        "--instance-meta",
        "MlxJaccl",
    )

    assert result.exit_code == 0, result.output
    assert node.sent("POST", "/place_instance")[0].body == {
        "model_id": MODEL,
        "sharding": "Pipeline",
        "instance_meta": "MlxJaccl",
        "min_nodes": 2,
        "excluded_nodes": ["node-c3"],
        "context_tokens": 4096,
    }
    assert node.sent("GET", "/instance/previews")[0].query == {
        "model_id": [MODEL],
        "excluded_node_ids": ["node-c3"],
        "instance_meta": ["MlxJaccl"],
        "min_nodes": ["2"],
        "context_tokens": ["4096"],
    }


def test_place_refusal_shows_the_nodes_reason_and_exits_1(node: FakeNode) -> None:
    nothing_placed(node)
    message = "no node fits gemma-3-270m-q4: alpha needs 3.1 GB and has 2.0 GB free"
    node.routes[("POST", "/place_instance")] = Reply(
        400,
        {"error": {"message": message, "type": "invalid_request_error", "code": 400}},
        headers={"X-Skulk-Placement-Failure": "no_valid_placement"},
    )

    result = run("--api-url", node.url, "place", MODEL)

    assert result.exit_code == 1
    err = flat(result.stderr)
    assert message in err
    assert f"skulk previews {MODEL}" in err
    posted = node.sent("POST", "/place_instance")[0]
    assert not [r for r in node.requests[node.requests.index(posted) :] if r.path == "/state"]


def test_place_while_cluster_info_is_pending_says_to_retry(node: FakeNode) -> None:
    nothing_placed(node)
    node.routes[("POST", "/place_instance")] = Reply(
        503,
        {"error": {"message": "cluster info is still arriving", "code": "placement_info_pending"}},
        headers={"X-Skulk-Placement-Failure": "placement_info_pending"},
    )

    result = run("--api-url", node.url, "place", MODEL)

    assert result.exit_code == 1
    assert "try again in a few seconds" in flat(result.stderr)


def test_place_of_an_unknown_model_exits_1(node: FakeNode) -> None:
    node.routes[("GET", "/instance/previews")] = (
        404,
        {"error": {"message": "model 'nope' is not in the catalog", "code": "model_not_found"}},
    )

    result = run("--api-url", node.url, "place", "nope")

    assert result.exit_code == 1
    assert "model 'nope' is not in the catalog" in flat(result.stderr)
    assert not node.sent("POST", "/place_instance")


def test_place_reports_a_failed_runner_and_exits_1(node: FakeNode) -> None:
    failed = {"RunnerFailed": {"errorMessage": "weights do not match the card"}}
    placing(node, state_with(PLACED_ID, LOADING), state_with(PLACED_ID, failed))

    result = run("--api-url", node.url, "place", MODEL)

    assert result.exit_code == 1
    err = flat(result.stderr)
    assert "The runner on alpha failed: weights do not match the card" in err
    assert f"skulk instances rm {PLACED_ID}" in err


def test_place_reports_an_instance_the_cluster_gave_up_on(node: FakeNode) -> None:
    failure = {
        "instanceId": PLACED_ID,
        "modelId": MODEL,
        "errorCode": "placement_failed",
        "errorMessage": "bravo left the cluster during placement",
        "affectedNodeIds": [PEER_NODE],
        "recordedAt": "2026-01-02T03:04:05Z",
    }
    placing(node, state_with(PLACED_ID, LOADING), state_with(PLACED_ID, None, failure=failure))

    result = run("--api-url", node.url, "place", MODEL)

    assert result.exit_code == 1
    err = flat(result.stderr)
    assert f"Placing {MODEL} failed: bravo left the cluster during placement" in err
    assert "placement_failed" in err


def test_place_json_is_the_response_and_the_final_instance(node: FakeNode) -> None:
    ready = state_with(PLACED_ID, READY)
    placing(node, state_with(PLACED_ID, LOADING), ready)

    result = run("--api-url", node.url, "--json", "place", MODEL)

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["place"] == PLACE_RESPONSE
    assert out["preview"] == PREVIEWS["previews"][0]
    assert out["instance"] == ready["instances"][PLACED_ID]
    assert out["runners"] == {f"{PLACED_ID}-runner-0": READY, f"{PLACED_ID}-runner-1": READY}
    assert out["failure"] is None


def test_place_json_on_failure_still_prints_the_state_then_exits_1(node: FakeNode) -> None:
    failed = {"RunnerFailed": {"errorMessage": "out of memory"}}
    placing(node, state_with(PLACED_ID, failed))

    result = run("--api-url", node.url, "place", MODEL, "--json")

    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["place"] == PLACE_RESPONSE
    assert out["runners"][f"{PLACED_ID}-runner-0"] == failed
    assert "out of memory" in flat(result.stderr)


def test_placing_a_placed_model_says_so_with_the_fix_and_places_nothing(node: FakeNode) -> None:
    result = run("--api-url", node.url, "place", MODEL)

    assert result.exit_code == 1
    err = flat(result.stderr)
    assert f"{MODEL} is already placed as instance inst-1." in err
    assert "skulk instances rm inst-1" in err and f"skulk place {MODEL} --another" in err
    assert not node.sent("POST", "/place_instance")


def test_place_another_asks_the_node_for_a_second_replica(node: FakeNode) -> None:
    ready = state_with(PLACED_ID, READY)
    node.routes[("GET", "/state")] = lambda _: (200, ready)

    result = run("--api-url", node.url, "place", MODEL, "--another")

    assert result.exit_code == 0, result.output
    assert node.sent("POST", "/place_instance")[0].body["allow_duplicate"] is True


def test_a_replica_placed_meanwhile_is_named_with_the_fix(node: FakeNode) -> None:
    polls = 0

    def state(_: Recorded) -> Answer:
        nonlocal polls
        polls += 1
        return 200, UNPLACED if polls == 1 else STATE

    node.routes[("GET", "/state")] = state
    node.routes[("POST", "/place_instance")] = Reply(
        409,
        {
            "error": {
                "message": f"model '{MODEL}' is already placed as instance inst-1; use it, "
                "delete it first (DELETE /instance/{instance_id}), or set allow_duplicate",
                "type": "conflict_error",
                "code": "model_already_placed",
            }
        },
    )

    result = run("--api-url", node.url, "place", MODEL)

    assert result.exit_code == 1
    err = flat(result.stderr)
    assert "already placed as instance inst-1" in err and "--another" in err
    assert "DELETE /instance" not in err


def test_place_no_wait_returns_once_accepted(node: FakeNode) -> None:
    placing(node, state_with(PLACED_ID, LOADING))

    result = run("--api-url", node.url, "place", MODEL, "--no-wait")

    assert result.exit_code == 0, result.output
    assert f"as instance {PLACED_ID}" in flat(result.stdout)
    posted = node.sent("POST", "/place_instance")[0]
    assert not [r for r in node.requests[node.requests.index(posted) :] if r.path == "/state"]


# --- instances ----------------------------------------------------------------------


def test_instances_list_shows_model_runner_statuses_and_context(node: FakeNode) -> None:
    result = run("--api-url", node.url, "instances", "list")

    assert result.exit_code == 0, result.output
    row = line_with(result.stdout, "inst-1")
    assert MODEL in row and "MlxRing" in row and "32,768" in row
    assert "alpha: ready" in row
    assert "bravo: failed: out of memory" in plain(result.stdout)


def test_instances_list_shows_recent_failures(node: FakeNode) -> None:
    failure = {
        "instanceId": "inst-0",
        "modelId": MODEL,
        "errorCode": "runner_crashed",
        "errorMessage": "the runner on bravo exited",
        "affectedNodeIds": [PEER_NODE],
        "recordedAt": "2026-01-02T03:04:05Z",
    }
    node.routes[("GET", "/state")] = (200, {"instanceFailures": [failure]})

    result = run("--api-url", node.url, "instances", "list")

    assert result.exit_code == 0, result.output
    out = flat(result.stdout)
    assert "No instances placed." in out
    assert f"inst-0 {MODEL}: the runner on bravo exited (runner_crashed)" in out


def test_instances_list_json_is_the_placement_part_of_the_state(node: FakeNode) -> None:
    result = run("--api-url", node.url, "instances", "list", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "instances": STATE["instances"],
        "runners": STATE["runners"],
        "instanceFailures": [],
    }


def test_instances_show_lists_each_nodes_layers_and_runner(node: FakeNode) -> None:
    result = run("--api-url", node.url, "instances", "show", "inst-1")

    assert result.exit_code == 0, result.output
    out = plain(result.stdout)
    assert "Instance inst-1" in out and MODEL in out and "context 32,768" in out
    alpha = line_with(out, "runner-1")
    assert "alpha" in alpha and "0-8 (9 of 18)" in alpha and "ready" in alpha
    bravo = line_with(out, "runner-2")
    assert "bravo" in bravo and "9-17 (9 of 18)" in bravo and "failed" in bravo


def test_instances_show_of_an_unknown_id_exits_1(node: FakeNode) -> None:
    node.routes[("GET", "/instance/nope")] = (
        404,
        {"error": {"message": "instance 'nope' not found", "code": "instance_not_found"}},
    )

    result = run("--api-url", node.url, "instances", "show", "nope")

    assert result.exit_code == 1
    assert "instance 'nope' not found" in flat(result.stderr)
    assert "`skulk instances list` shows the placed instances" in flat(result.stderr)


def test_a_unique_prefix_stands_for_the_instance_everywhere(node: FakeNode) -> None:
    shown = run("--api-url", node.url, "instances", "show", "inst")
    removed = run("--api-url", node.url, "instances", "rm", "INST-")

    assert shown.exit_code == 0, shown.output
    assert "Instance inst-1" in plain(shown.stdout)
    assert removed.exit_code == 0, removed.output
    assert [r.path for r in node.sent("DELETE", "/instance/inst-1")] == ["/instance/inst-1"]


def test_an_ambiguous_prefix_lists_the_candidates_and_removes_nothing(node: FakeNode) -> None:
    node.routes[("GET", "/state")] = (200, state_with(PLACED_ID, READY))

    result = run("--api-url", node.url, "instances", "rm", "inst")

    assert result.exit_code == 1
    err = flat(result.stderr)
    assert f"'inst' starts 2 instance ids: inst-1 ({MODEL}); {PLACED_ID} ({MODEL})" in err
    assert "Type more of the id." in err
    assert not [r for r in node.requests if r.method == "DELETE"]


def test_instances_show_json_is_the_raw_instance(node: FakeNode) -> None:
    result = run("--api-url", node.url, "instances", "show", "inst-1", "--json")

    assert json.loads(result.stdout) == INSTANCE_DETAIL


def test_instances_delete_sends_delete_and_confirms(node: FakeNode) -> None:
    result = run("--api-url", node.url, "instances", "delete", "inst-1")

    assert result.exit_code == 0, result.output
    assert len(node.sent("DELETE", "/instance/inst-1")) == 1
    assert "Removing instance inst-1" in flat(result.stdout)


def test_instances_delete_json_is_the_raw_response(node: FakeNode) -> None:
    result = run("--api-url", node.url, "--json", "instances", "delete", "inst-1")

    assert json.loads(result.stdout) == DELETE_RESPONSE


# --- chat ---------------------------------------------------------------------------


def test_chat_with_a_prompt_prints_the_streamed_reply(node: FakeNode) -> None:
    result = run("--api-url", node.url, "chat", MODEL, "Tell me a story")

    assert result.exit_code == 0, result.output
    assert result.stdout == "Once upon a time\n"
    assert "4 tokens, 48.2 tokens/s" in plain(result.stderr)
    (sent,) = node.sent("POST", "/v1/chat/completions")
    assert sent.body == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me a story"}],
        "max_tokens": 256,  # every reply is capped unless --max-tokens says otherwise
        "stream": True,
    }


def test_chat_sends_system_and_sampling_options(node: FakeNode) -> None:
    result = run(
        "--api-url",
        node.url,
        "chat",
        MODEL,
        "The capital of France is",
        "--system",
        "Be brief.",
        "--max-tokens",
        "16",
        "--temperature",
        "0",
    )

    assert result.exit_code == 0, result.output
    assert node.sent("POST", "/v1/chat/completions")[0].body == {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "The capital of France is"},
        ],
        "max_tokens": 16,
        "temperature": 0.0,
        "stream": True,
    }


def test_chat_error_frame_exits_1_with_the_message(node: FakeNode) -> None:
    node.routes[("POST", "/v1/chat/completions")] = sse_reply(failing_chat_stream())

    result = run("--api-url", node.url, "chat", MODEL, "Tell me a story")

    assert result.exit_code == 1
    assert plain(result.stdout) == "Once\n", "the text that did arrive stays shown"
    assert "context_length_exceeded: the prompt and max_tokens need 40000 tokens" in flat(
        result.stderr
    )


def test_chat_stream_cut_off_before_done_exits_1(node: FakeNode) -> None:
    frames = chat_stream()[:-3]  # no finish, no statistics, no [DONE]
    node.routes[("POST", "/v1/chat/completions")] = sse_reply(frames)

    result = run("--api-url", node.url, "chat", MODEL, "Tell me a story")

    assert result.exit_code == 1
    assert result.stdout == "Once upon a time\n"
    assert "The reply was cut off" in flat(result.stderr)


def test_chat_with_no_instance_of_the_model_exits_1_with_a_hint(node: FakeNode) -> None:
    node.routes[("POST", "/v1/chat/completions")] = (
        404,
        {"error": {"message": "No instance found for model nope", "code": "model_not_found"}},
    )

    result = run("--api-url", node.url, "chat", "nope", "hi")

    assert result.exit_code == 1
    err = flat(result.stderr)
    assert "No instance found for model nope" in err and "skulk place nope" in err


def test_chat_json_prints_the_whole_completion(node: FakeNode) -> None:
    result = run("--api-url", node.url, "--json", "chat", MODEL, "Tell me a story")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == COMPLETION
    assert node.sent("POST", "/v1/chat/completions")[0].body["stream"] is False  # type: ignore[index]


def test_chat_json_with_an_error_body_exits_1(node: FakeNode) -> None:
    node.routes[("POST", "/v1/chat/completions")] = (200, CONTEXT_ERROR)

    result = run("--api-url", node.url, "chat", MODEL, "Tell me a story", "--json")

    assert result.exit_code == 1
    assert json.loads(result.stdout) == CONTEXT_ERROR


def test_chat_json_needs_a_prompt() -> None:
    result = run("chat", MODEL, "--json")

    assert result.exit_code == 2
    assert "--json needs a PROMPT" in flat(result.output)


def test_interactive_chat_keeps_the_conversation(node: FakeNode) -> None:
    result = runner_input(node, "hello\n\nworld\n")

    assert result.exit_code == 0, result.output
    first, second = node.sent("POST", "/v1/chat/completions")
    assert first.body["messages"] == [{"role": "user", "content": "hello"}]  # type: ignore[index]
    assert second.body["messages"] == [  # type: ignore[index]
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Once upon a time"},
        {"role": "user", "content": "world"},
    ]
    assert plain(result.stdout).count("Once upon a time") == 2


def test_interactive_chat_ends_at_exit_command(node: FakeNode) -> None:
    result = runner_input(node, "hello\n/exit\nnever sent\n")

    assert result.exit_code == 0, result.output
    assert len(node.sent("POST", "/v1/chat/completions")) == 1


def test_interactive_chat_survives_a_failed_turn_and_leaves_it_out(node: FakeNode) -> None:
    replies = iter([sse_reply(failing_chat_stream()), sse_reply(chat_stream())])
    node.routes[("POST", "/v1/chat/completions")] = lambda _: next(replies)

    result = runner_input(node, "a very long prompt\nhello\n")

    assert result.exit_code == 0, result.output
    assert "context_length_exceeded" in flat(result.stderr)
    second = node.sent("POST", "/v1/chat/completions")[1]
    assert second.body["messages"] == [{"role": "user", "content": "hello"}]  # type: ignore[index]


def test_ctrl_c_cancels_the_generation_not_the_session(
    node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every wait below is for an event, none is a deadline the test can lose on a
    # loaded machine: the press comes once the first token is printed (so the client
    # has read the command id sent before it and is mid-generation), and the node
    # streams keep-alives until the client's cancel arrives.
    cancelled = threading.Event()
    printed = threading.Event()
    finished = threading.Event()
    write = console.TextStream.write

    def write_and_mark(self: console.TextStream, text: str, style: str = "") -> None:
        write(self, text, style)
        printed.set()

    monkeypatch.setattr(console.TextStream, "write", write_and_mark)
    # Ctrl-C as a terminal delivers it to a Python program: KeyboardInterrupt, whatever
    # handler code run earlier in this process left installed.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def endless() -> Iterator[bytes]:
        yield f": command_id {CHAT_COMMAND_ID}\n\n".encode()
        yield from token_frames(CHAT_WORDS[:1])
        # Keep-alives, as the daemon sends while a generation is slow, until cancelled
        # (each also wakes the client's read, so the press is seen at once).
        while not (cancelled.wait(0.02) or finished.is_set()):
            yield b": keep-alive\n\n"
        yield b'data: {"error": {"message": "cancelled", "code": "cancelled"}}\n\n'
        yield b"data: [DONE]\n\n"

    def cancel(_: Recorded) -> Answer:
        cancelled.set()
        return 200, {"message": "Command cancelled.", "command_id": CHAT_COMMAND_ID}

    replies = iter([sse_reply(endless()), sse_reply(chat_stream())])
    node.routes[("POST", "/v1/chat/completions")] = lambda _: next(replies)
    node.routes[("POST", f"/v1/cancel/{CHAT_COMMAND_ID}")] = cancel

    def press_ctrl_c() -> None:
        while not printed.wait(0.05):
            if finished.is_set():
                return  # the session ended without a token: the asserts below say so
        _thread.interrupt_main()

    presser = threading.Thread(target=press_ctrl_c)
    presser.start()
    try:
        result = runner_input(node, "tell me everything\nhello\n")
    finally:
        finished.set()
        presser.join()
        signal.signal(signal.SIGINT, previous)

    assert result.exit_code == 0, result.output
    assert cancelled.is_set(), "the generation was cancelled on the node"
    assert len(node.sent("POST", f"/v1/cancel/{CHAT_COMMAND_ID}")) == 1
    assert "stopped" in plain(result.stderr)
    second = node.sent("POST", "/v1/chat/completions")[1]
    assert second.body["messages"] == [{"role": "user", "content": "hello"}]  # type: ignore[index]
    assert "Once upon a time" in plain(result.stdout), "the session went on"
