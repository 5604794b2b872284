"""The Ollama-compatible API on the real app serving the demo model.

The official ``ollama`` SDK drives the happy paths (its host is ``<node>/ollama``,
to which it appends ``/api/chat`` and friends); httpx checks the raw wire, the
aliases and the errors. The demo model is a base model: assertions are about
structure, token counts and done reasons, not answers. The wire shaping of tool
calls, thinking and errors, which the base model cannot be made to produce on
demand, is checked on synthetic turn events.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from skulk_core.version import SKULK_VERSION
from tests.api.in_process import AppNode, Served
from tests.daemon.serving import CONTEXT, DEMO, PROMPT, wait_for, wait_idle
from tests.lazy_sdk import ollama

pytestmark = pytest.mark.slow

COUNT = "Count: one, two, three,"
FEW = {"num_predict": 6, "temperature": 0}
DONE_FIELDS = {
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
# A 1x1 transparent PNG.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()


@pytest.fixture(scope="module")
def client(demo_app: Served) -> Iterator[ollama.Client]:
    app = demo_app.app
    sdk = ollama.Client(host=f"{app.url}/ollama", timeout=120, transport=app.transport)
    try:
        yield sdk
    finally:
        sdk.close()


def post(app: AppNode, path: str, **body: Any) -> httpx.Response:
    return app.http.post(path, json=body)


def chat_body(**fields: Any) -> dict[str, Any]:
    return {"model": DEMO, "messages": PROMPT, "stream": False, "options": FEW, **fields}


def ndjson(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(text) for text in response.iter_lines() if text.strip()]


def assert_done(body: dict[str, Any] | Any, limit: int) -> None:
    assert body["done"] is True
    assert body["done_reason"] in {"stop", "length"}
    assert 0 < body["eval_count"] <= limit
    if body["done_reason"] == "length":
        assert body["eval_count"] == limit
    assert body["prompt_eval_count"] > 0
    assert body["total_duration"] >= body["prompt_eval_duration"] + body["eval_duration"]
    assert body["load_duration"] == 0


# --- chat ------------------------------------------------------------------------


def test_sdk_chat_whole_and_streamed_agree(client: ollama.Client) -> None:
    whole = client.chat(model=DEMO, messages=PROMPT, options=FEW, stream=False)
    assert whole.model == DEMO
    assert whole.message.role == "assistant"
    assert whole.message.content
    assert_done(whole, 6)
    again = client.chat(model=DEMO, messages=PROMPT, options=FEW, stream=False, keep_alive="5m")
    assert again.message.content == whole.message.content

    parts = list(client.chat(model=DEMO, messages=PROMPT, options=FEW, stream=True))
    assert all(not part.done for part in parts[:-1])
    assert all(part.message.role == "assistant" for part in parts)
    assert parts[-1].message.content == ""
    assert_done(parts[-1], 6)
    assert "".join(part.message.content or "" for part in parts) == whole.message.content
    assert parts[-1].eval_count == whole.eval_count


def test_chat_streams_ndjson_by_default(demo_app: Served) -> None:
    app = demo_app.app
    body = {"model": DEMO, "messages": PROMPT, "options": FEW}
    with app.http.stream("POST", "/ollama/api/chat", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/x-ndjson")
        assert r.headers["x-skulk-command-id"]
        lines = ndjson(r)
    assert len(lines) >= 2
    for item in lines:
        assert item["model"] == DEMO
        assert item["created_at"].endswith("Z")
    assert set(lines[-1]) >= DONE_FIELDS | {"done_reason", "message"}
    assert "done_reason" not in lines[0]


def test_options_stop_and_latest_tag(client: ollama.Client) -> None:
    answer = client.chat(
        model=f"{DEMO}:latest",
        messages=PROMPT,
        options={"num_predict": 8, "temperature": 0, "stop": [","]},
    )
    assert answer.model == f"{DEMO}:latest"
    assert "," not in (answer.message.content or "")
    assert_done(answer, 8)


def test_tool_history_is_accepted_and_answered(client: ollama.Client) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "18 degrees and sunny", "tool_name": "get_weather"},
    ]
    answer = client.chat(model=DEMO, messages=messages, tools=[WEATHER], options=FEW)
    assert answer.message.role == "assistant"
    assert answer.message.content or answer.message.tool_calls
    for call in answer.message.tool_calls or ():
        assert call.function.name == "get_weather"
        assert isinstance(call.function.arguments, dict)
    assert answer.done and answer.done_reason in {"stop", "length"}


def test_format_json_answers_an_object(client: ollama.Client) -> None:
    answer = client.chat(
        model=DEMO,
        messages=[{"role": "user", "content": 'Reply in JSON like {"answer": 4}. What is 2+2?'}],
        format="json",
        options={"num_predict": 48, "temperature": 0},
    )
    text = answer.message.content or ""
    assert text.lstrip().startswith("{")
    if answer.done_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_format_schema_answer_cannot_violate_it(client: ollama.Client) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "sunny": {"type": "boolean"}},
        "required": ["city", "sunny"],
        "additionalProperties": False,
    }
    ask = [{"role": "user", "content": "The weather in Paris, as JSON:"}]
    options = {"num_predict": 40, "temperature": 0}
    whole = client.chat(model=DEMO, messages=ask, format=schema, options=options)
    streamed = "".join(
        part.message.content or ""
        for part in client.chat(
            model=DEMO, messages=ask, format=schema, options=options, stream=True
        )
    )
    for text in (whole.message.content or "", streamed):
        value = json.loads(text)
        assert set(value) == {"city", "sunny"}
        assert isinstance(value["city"], str) and isinstance(value["sunny"], bool)


def test_logprobs_per_token(demo_app: Served) -> None:
    app = demo_app.app
    body = post(app, "/ollama/api/chat", **chat_body(logprobs=True, top_logprobs=2)).json()
    entries = body["logprobs"]
    assert 0 < len(entries) <= body["eval_count"]
    for entry in entries:
        assert isinstance(entry["token"], str) and entry["logprob"] <= 0
        assert entry["bytes"] == list(entry["token"].encode())
        assert 1 <= len(entry["top_logprobs"]) <= 2


# --- generate ----------------------------------------------------------------------


def test_sdk_generate_whole_streamed_and_raw(client: ollama.Client) -> None:
    whole = client.generate(model=DEMO, prompt=COUNT, options=FEW)
    assert whole.response
    assert whole.context == []
    assert_done(whole, 6)
    parts = list(client.generate(model=DEMO, prompt=COUNT, options=FEW, stream=True))
    assert all(not part.done for part in parts[:-1])
    assert parts[-1].response == ""
    assert_done(parts[-1], 6)
    assert "".join(part.response or "" for part in parts) == whole.response

    raw = client.generate(model=DEMO, prompt=COUNT, raw=True, options=FEW)
    assert raw.response
    assert_done(raw, 6)
    # The demo is a base model, served with no chat template: generate sends the
    # prompt as written (and BOS) whether or not it is raw.
    assert raw.prompt_eval_count == whole.prompt_eval_count


def test_generate_with_a_system_prompt(client: ollama.Client) -> None:
    plain = client.generate(model=DEMO, prompt=COUNT, options=FEW)
    with_system = client.generate(model=DEMO, prompt=COUNT, system="You count.", options=FEW)
    assert_done(with_system, 6)
    assert with_system.prompt_eval_count > plain.prompt_eval_count


def test_an_empty_generate_is_a_load_probe(client: ollama.Client, demo_app: Served) -> None:
    probe = client.generate(model=DEMO)
    assert probe.done is True
    assert probe.done_reason == "load"
    assert probe.response == ""
    with pytest.raises(ollama.ResponseError) as refused:
        client.generate(model="nobody/unknown")
    assert refused.value.status_code == 404
    app = demo_app.app
    streamed = post(app, "/ollama/api/generate", model=DEMO)
    assert streamed.headers["content-type"].startswith("application/x-ndjson")
    assert streamed.json()["done_reason"] == "load"


# --- models --------------------------------------------------------------------------


def test_sdk_list_show_ps_and_version(client: ollama.Client, demo_app: Served) -> None:
    listed = {model.model: model for model in client.list().models}
    demo = listed[DEMO]
    assert demo.size is not None and demo.size > 0
    assert demo.digest and len(demo.digest) == 64
    assert demo.details is not None
    assert demo.details.format == "gguf"
    assert demo.details.family == "gemma3"
    assert demo.details.families == ["gemma3"]
    assert demo.details.quantization_level == "Q4_K_M"
    assert demo.details.parameter_size == "270M"

    shown = client.show(DEMO)
    assert shown.capabilities is not None and "completion" in shown.capabilities
    assert "vision" not in shown.capabilities
    # A base model, in Ollama's words: its prompt goes to it as written.
    assert shown.template == "{{ .Prompt }}"
    assert 'TEMPLATE """{{ .Prompt }}"""' in (shown.modelfile or "")
    assert shown.modelinfo is not None
    assert shown.modelinfo["general.architecture"] == "gemma3"
    assert shown.modelinfo["gemma3.block_count"] > 0
    assert shown.modelfile and f"FROM {DEMO}" in shown.modelfile
    assert shown.details == demo.details

    running = client.ps().models
    assert [model.model for model in running] == [DEMO]
    assert running[0].size == 0 and running[0].size_vram == 0
    assert running[0].context_length == CONTEXT
    assert running[0].expires_at is not None

    app = demo_app.app
    assert app.get("/ollama/api/version").json() == {"version": SKULK_VERSION}


def test_show_takes_name_over_model_and_refuses_the_rest(demo_app: Served) -> None:
    app = demo_app.app
    both = post(app, "/ollama/api/show", name=DEMO, model="nobody/unknown")
    assert both.status_code == 200
    assert post(app, "/ollama/api/show", model=f"{DEMO}:latest").status_code == 200
    neither = post(app, "/ollama/api/show")
    assert neither.status_code == 400
    assert isinstance(neither.json()["error"], str)
    unknown = post(app, "/ollama/api/show", name="nobody/unknown")
    assert unknown.status_code == 404
    assert "nobody/unknown" in unknown.json()["error"]


def test_a_json_body_without_a_json_content_type_works_as_with_ollama(demo_app: Served) -> None:
    http = demo_app.app.http
    body = json.dumps({"name": DEMO}).encode()
    # `curl -d '{...}'` as the Ollama docs write it sends a form type; some send none.
    for headers in ({"Content-Type": "application/x-www-form-urlencoded"}, {}):
        shown = http.post("/ollama/api/show", content=body, headers=headers)
        assert shown.status_code == 200, shown.text
        assert shown.json()["details"]["format"] == "gguf"
    # A page's cross-site form post carries an Origin: still refused (CSRF).
    page = http.post(
        "/ollama/api/show",
        content=body,
        headers={"Content-Type": "text/plain", "Origin": "http://evil.example"},
    )
    assert page.status_code == 415
    # Routes other than Ollama's keep asking for application/json.
    assert http.post("/v1/chat/completions", content=body, headers={}).status_code == 415


# --- aliases and probes -----------------------------------------------------------


def test_alias_routes_map_onto_the_same_handlers(demo_app: Served) -> None:
    app = demo_app.app
    tags = app.get("/ollama/api/tags").json()
    for prefix in ("/ollama/api/api", "/ollama/api/v1"):
        assert app.get(f"{prefix}/tags").json() == tags
        assert app.get(f"{prefix}/version").json() == {"version": SKULK_VERSION}
        assert app.get(f"{prefix}/ps").json()["models"][0]["model"] == DEMO
        assert post(app, f"{prefix}/show", name=DEMO).status_code == 200
        answer = post(app, f"{prefix}/chat", **chat_body(options={"num_predict": 4}))
        assert answer.status_code == 200
        assert answer.json()["done"] is True
        generated = post(
            app, f"{prefix}/generate", model=DEMO, prompt=COUNT, stream=False, options=FEW
        )
        assert generated.json()["done"] is True


def test_head_probes_root_and_schema(demo_app: Served) -> None:
    app = demo_app.app
    paths = app.get("/api/openapi.json").json()["paths"]
    assert {"/ollama/api/chat", "/ollama/api/v1/chat", "/ollama/api/api/tags"} <= set(paths)
    for path in ("/ollama/", "/ollama", "/ollama/api/version"):
        assert app.http.head(path, timeout=10).status_code == 200
    root = app.get("/ollama/")
    assert root.status_code == 200
    assert root.text == "Ollama is running"


# --- refusals -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ({"model": "nobody/unknown"}, 404),
        ({"messages": []}, 400),
        ({"options": {"num_predict": 0}}, 400),
        ({"options": {"num_predict": -2}}, 400),
        ({"options": {"temperature": "hot"}}, 400),
        ({"think": "extreme"}, 400),
        ({"format": "yaml"}, 400),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, 400),
        ({"messages": [{"role": "user", "content": "hi", "images": [PNG]}]}, 400),
        ({"messages": [{"role": "user", "content": "hi", "images": ["not base64!"]}]}, 400),
    ],
)
def test_chat_refusals_in_ollama_shape(
    demo_app: Served, fields: dict[str, Any], status: int
) -> None:
    app = demo_app.app
    response = post(app, "/ollama/api/chat", **chat_body(**fields))
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error, str) and error


def test_unknown_model_is_404_no_instance(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as refused:
        client.chat(model="nobody/unknown", messages=PROMPT)
    assert refused.value.status_code == 404
    assert "No instance found for model nobody/unknown" in refused.value.error


def test_malformed_json_is_400(demo_app: Served) -> None:
    app = demo_app.app
    for path in ("/ollama/api/chat", "/ollama/api/generate", "/ollama/api/show"):
        response = app.http.post(
            f"{path}",
            content=b'{"model": ',
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        assert response.status_code == 400
        assert "not valid JSON" in response.json()["error"]


@pytest.mark.parametrize("field", [{"suffix": " done"}, {"template": "{{ .Prompt }}"}])
def test_generate_refuses_what_it_cannot_honour(demo_app: Served, field: dict[str, Any]) -> None:
    app = demo_app.app
    response = post(app, "/ollama/api/generate", model=DEMO, prompt=COUNT, stream=False, **field)
    assert response.status_code == 400
    assert isinstance(response.json()["error"], str)


CANCEL_DEADLINE_S = 10.0
"""Far less than the ~20 s the 900 tokens would take to finish on their own."""


def test_client_disconnect_stops_the_generation(demo_app: Served) -> None:
    app, instance_id = demo_app.app, demo_app.instance_id
    body = {"model": DEMO, "messages": PROMPT, "options": {"num_predict": 900}}
    with app.http.stream("POST", "/ollama/api/chat", json=body) as r:
        lines = (text for text in r.iter_lines() if text.strip())
        first = json.loads(next(lines))
        assert first["done"] is False
    # NOTE: a deadline, not a speed claim: a generation nobody cancelled would still
    # be running when it passes.
    wait_for(lambda: not app.get("/state").json()["tasks"], "the task to end", CANCEL_DEADLINE_S)
    wait_idle(app, instance_id)
    assert post(app, "/ollama/api/chat", **chat_body()).status_code == 200
