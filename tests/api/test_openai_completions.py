"""``POST /v1/completions`` on the real app serving the demo model (a base model):
the official SDK's calls, OpenAI's chunk shape, lists of prompts and ``n``, echo,
logprobs, cancellation, the base card's default budget and every refusal.

The demo model's greedy text is not asserted; what is asserted is the shape, the
counts and what Skulk guarantees (the prompt sent as written, the bounds)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.in_process import AppNode, Served
from tests.daemon.serving import DEMO, sse_lines, wait_idle
from tests.lazy_sdk import openai

pytestmark = pytest.mark.slow

SUM = "2 + 2 ="


@pytest.fixture
def app(demo_app: Served) -> AppNode:
    return demo_app.app


@pytest.fixture
def client(app: AppNode) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{app.url}/v1", api_key="unused", max_retries=0, http_client=app.new_http()
    ) as sdk:
        yield sdk


def post(app: AppNode, **body: Any) -> httpx.Response:
    return app.http.post("/v1/completions", json={"model": DEMO, "max_tokens": 4, **body})


def data_events(response: httpx.Response) -> list[Any]:
    lines = list(sse_lines(response))
    assert lines[0].startswith(": command_id ")
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[6:]) for line in lines[:-1] if line.startswith("data: ")]


def test_the_sdk_continues_a_prompt_as_written(client: openai.OpenAI) -> None:
    answer = client.completions.create(model=DEMO, prompt=SUM, max_tokens=4, temperature=0)
    assert answer.object == "text_completion" and answer.model == DEMO
    (choice,) = answer.choices
    assert choice.index == 0 and isinstance(choice.text, str) and choice.logprobs is None
    assert choice.finish_reason in ("stop", "length")
    usage = answer.usage
    assert usage is not None and 0 < usage.completion_tokens <= 4
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # The prompt as written: "<bos>2 + 2 =" is a handful of tokens; Gemma's chat
    # template alone would add more than that.
    assert usage.prompt_tokens <= 8

    # A chat turn to the base card is its plain text too: the same prompt, the same
    # continuation.
    chat = client.chat.completions.create(
        model=DEMO, messages=[{"role": "user", "content": SUM}], max_tokens=4, temperature=0
    )
    assert chat.usage is not None and chat.usage.prompt_tokens == usage.prompt_tokens
    assert chat.choices[0].message.content == choice.text


def test_streaming_matches_the_answer_in_openais_chunk_shape(
    client: openai.OpenAI, app: AppNode
) -> None:
    whole = client.completions.create(model=DEMO, prompt=SUM, max_tokens=6, temperature=0)
    stream = client.completions.create(
        model=DEMO,
        prompt=SUM,
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(chunk.object == "text_completion" and chunk.id == chunks[0].id for chunk in chunks)
    text = "".join(choice.text for chunk in chunks for choice in chunk.choices)
    assert text == whole.choices[0].text
    finishes = [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    *_, last = chunks
    assert last.choices == [] and last.usage is not None
    assert whole.usage is not None
    assert last.usage.completion_tokens == whole.usage.completion_tokens
    assert last.usage.prompt_tokens_details is not None  # cached_tokens, as chat's

    raw = post(app, prompt=SUM, stream=True, temperature=0)
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
    events = data_events(raw)
    command_id = raw.headers["x-skulk-command-id"]
    assert {event["id"] for event in events} == {command_id}
    assert set(events[0]) >= {"id", "object", "created", "model", "choices"}
    assert set(events[0]["choices"][0]) == {"index", "text", "logprobs", "finish_reason"}


def test_prompts_times_n_are_generated_side_by_side(client: openai.OpenAI) -> None:
    prompts = [SUM, "The capital of France is"]
    answer = client.completions.create(model=DEMO, prompt=prompts, n=2, max_tokens=3)
    assert [choice.index for choice in answer.choices] == [0, 1, 2, 3]
    assert all(choice.finish_reason in ("stop", "length") for choice in answer.choices)
    one = [client.completions.create(model=DEMO, prompt=p, max_tokens=1).usage for p in prompts]
    usage = answer.usage
    assert usage is not None
    # Each prompt is counted once, however many choices continue it.
    assert usage.prompt_tokens == sum(u.prompt_tokens for u in one if u is not None)
    assert 4 <= usage.completion_tokens <= 12

    stream = client.completions.create(model=DEMO, prompt=prompts, n=2, max_tokens=3, stream=True)
    finished = sorted(c.index for chunk in stream for c in chunk.choices if c.finish_reason)
    assert finished == [0, 1, 2, 3]


def test_echo_repeats_the_prompt(client: openai.OpenAI) -> None:
    answer = client.completions.create(model=DEMO, prompt=SUM, echo=True, max_tokens=3)
    assert answer.choices[0].text.startswith(SUM)
    stream = client.completions.create(model=DEMO, prompt=SUM, echo=True, max_tokens=3, stream=True)
    assert "".join(c.text for chunk in stream for c in chunk.choices).startswith(SUM)


def test_logprobs_in_openais_shape(client: openai.OpenAI) -> None:
    answer = client.completions.create(model=DEMO, prompt=SUM, logprobs=2, max_tokens=5)
    (choice,) = answer.choices
    logprobs = choice.logprobs
    assert logprobs is not None and answer.usage is not None
    tokens = logprobs.tokens or []
    assert len(tokens) == answer.usage.completion_tokens
    assert "".join(tokens) == choice.text
    assert all(lp is not None and lp <= 0 for lp in logprobs.token_logprobs or [])
    assert all(top is not None and len(top) == 2 for top in logprobs.top_logprobs or [])
    offsets = logprobs.text_offset or []
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]

    only = client.completions.create(model=DEMO, prompt=SUM, logprobs=0, max_tokens=2)
    assert only.choices[0].logprobs is not None
    assert only.choices[0].logprobs.top_logprobs == [None] * len(
        only.choices[0].logprobs.tokens or []
    )


def test_stop_sequences_end_the_text(client: openai.OpenAI) -> None:
    answer = client.completions.create(
        model=DEMO, prompt="One, two, three,", stop=[","], max_tokens=12, temperature=0
    )
    assert "," not in answer.choices[0].text


def test_a_base_card_without_max_tokens_stops_at_the_configured_default(app: AppNode) -> None:
    before = app.get("/config").json()["config"]["inference"]["default_max_tokens"]
    assert before == 256
    assert app.http.put("/config", json={"inference": {"default_max_tokens": 3}}).is_success
    try:
        answer = app.http.post("/v1/completions", json={"model": DEMO, "prompt": "Once upon"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] <= 3
        chat = app.http.post(
            "/v1/chat/completions",
            json={"model": DEMO, "messages": [{"role": "user", "content": "Once upon"}]},
        )
        assert chat.json()["usage"]["completion_tokens"] <= 3
    finally:
        app.http.put("/config", json={"inference": {"default_max_tokens": before}})


def test_the_demo_is_listed_as_a_base_model(app: AppNode) -> None:
    for path in ("/v1/models", "/models"):
        items = {item["id"]: item for item in app.get(path).json()["data"]}
        assert items[DEMO]["model_kind"] == "base"


def test_cancel_stops_every_choice(app: AppNode) -> None:
    body = {"model": DEMO, "prompt": "Once upon a time", "n": 2, "max_tokens": 400}
    with app.http.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
        command_id = response.headers["x-skulk-command-id"]
        lines = sse_lines(response)
        assert next(lines).startswith(": command_id")
        assert next(line for line in lines if line.startswith("data: "))
        cancelled = app.http.post(f"/v1/cancel/{command_id}")
        assert cancelled.status_code == 200, cancelled.text
        rest = list(lines)
    errors = [json.loads(line[6:]) for line in rest if line.startswith('data: {"error"')]
    assert errors and errors[0]["error"]["code"] == "cancelled"
    assert rest[-1] == "data: [DONE]"
    assert app.http.post(f"/v1/cancel/{command_id}").status_code == 404


@pytest.mark.parametrize("n", [1, 3])
def test_a_client_that_leaves_frees_the_runner(demo_app: Served, n: int) -> None:
    app = demo_app.app
    body = {"model": DEMO, "prompt": "Once upon a time", "n": n, "max_tokens": 400}
    with app.http.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
        assert next(line for line in sse_lines(response) if line.startswith("data: "))
    # Every choice's runner task stops (the runner is idle with nothing in flight),
    # long before 400 tokens each.
    wait_idle(app, demo_app.instance_id)
    assert post(app, prompt=SUM, max_tokens=1).status_code == 200


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"suffix": " and that is all."}, "suffix is not supported"),
        ({"prompt": [1, 2, 3]}, "token-id prompts are not accepted"),
        ({"prompt": []}, "prompt must not be an empty list"),
        ({"prompt": ""}, "prompt must not be empty"),
        ({"echo": True, "logprobs": 1}, "echo with logprobs is not supported"),
        ({"logprobs": 21}, "logprobs must be between 0 and 20"),
        ({"n": 0}, "n must be at least 1"),
        ({"n": 17}, "at most 16 choices"),
        ({"best_of": 3}, "best_of is not supported"),
        ({"temperature": 3}, "temperature must be between 0 and 2"),
        ({"max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"logit_bias": {"50256": -100}}, "logit_bias is not supported"),
        ({"prompt": None}, "prompt"),
    ],
)
def test_bad_fields_are_refused_with_400(app: AppNode, fields: dict[str, Any], says: str) -> None:
    response = post(app, **{"prompt": SUM, **fields})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert says in error["message"] and error["type"] == "invalid_request_error"


def test_unknown_and_missing_models_are_404_as_in_chat(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="No instance found for model nope"):
        client.completions.create(model="nope", prompt=SUM, max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="suffix"):
        client.completions.create(model=DEMO, prompt=SUM, suffix="!", max_tokens=2)
