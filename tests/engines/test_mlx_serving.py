"""The MLX engine on real MLX (the CPU build here), through a real daemon and the SDKs.

The MLX demo is the packaged Gemma GGUF converted to MLX 4-bit (minutes of CPU on a busy
machine) once per checkout (``tests/model_cache.py``), then one daemon serves it beside the
GGUF demo.
The demo is a base model: prompts are completion-style and no exact text is asserted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from skulk_daemon.models.mlx_demo import MLX_DEMO_MODEL_ID, mlx_installed
from skulk_daemon.telemetry.mlx_probe import mlx_runs
from tests.daemon.serving import DEMO, place
from tests.daemon_process import DaemonProcess
from tests.lazy_sdk import anthropic, ollama, openai
from tests.model_cache import mlx_demo_model

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (mlx_installed() and mlx_runs()), reason="MLX does not run here"),
]

MLX = str(MLX_DEMO_MODEL_ID)
CONTEXT = 512
COUNTING = "1, 2, 3, 4, 5, 6,"


@pytest.fixture(scope="session")
def mlx_demo(request: pytest.FixtureRequest, shared_models_dir: Path) -> Path:
    return mlx_demo_model(request.config.rootpath / ".pytest_cache", shared_models_dir)


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path, mlx_demo: Path
) -> Iterator[DaemonProcess]:
    daemon = DaemonProcess(
        root=tmp_path_factory.mktemp("mlx"),
        models_dir=shared_models_dir,
    )
    daemon.start()
    try:
        place(daemon, CONTEXT, MLX)
        yield daemon
    finally:
        daemon.kill()


def _backends(node: DaemonProcess, model_id: str) -> set[str]:
    previews = node.get("/instance/previews", params={"model_id": model_id}).json()["previews"]
    return {p["backend"] for p in previews if p.get("error") is None}


def test_each_card_lands_on_its_own_engine(node: DaemonProcess) -> None:
    assert _backends(node, MLX) == {"mlx"}
    assert _backends(node, DEMO) == {"llama_cpp"}
    telemetry = node.get("/state").json()
    assert "mlx" in json.dumps(telemetry)


def test_openai_streams_and_stops_on_a_stop_sequence(
    node: DaemonProcess, request: pytest.FixtureRequest
) -> None:
    client = openai.OpenAI(base_url=f"{node.url}/v1", api_key="unused", max_retries=0)
    request.addfinalizer(client.close)
    stream = client.completions.create(
        model=MLX, prompt=COUNTING, max_tokens=8, temperature=0, stop=[","], stream=True
    )
    chunks = list(stream)
    text = "".join(choice.text for chunk in chunks for choice in chunk.choices)
    reasons = [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason]
    assert "," not in text
    assert reasons == ["stop"] or (reasons == ["length"] and len(chunks) > 1)


def test_a_json_schema_and_a_tool_call_are_enforced(
    node: DaemonProcess, request: pytest.FixtureRequest
) -> None:
    client = openai.OpenAI(base_url=f"{node.url}/v1", api_key="unused", max_retries=0)
    request.addfinalizer(client.close)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    answer = client.chat.completions.create(
        model=MLX,
        messages=[{"role": "user", "content": "Is the sky blue?"}],
        max_tokens=24,
        temperature=0,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "yes_no", "schema": schema, "strict": True},
        },
    )
    assert isinstance(json.loads(answer.choices[0].message.content or "")["ok"], bool)
    called = client.chat.completions.create(
        model=MLX,
        messages=[{"role": "user", "content": "Is the sky blue?"}],
        max_tokens=48,
        temperature=0,
        tools=[{"type": "function", "function": {"name": "answer", "parameters": schema}}],
        tool_choice={"type": "function", "function": {"name": "answer"}},
    )
    (call,) = called.choices[0].message.tool_calls or []
    assert call.function.name == "answer"
    assert isinstance(json.loads(call.function.arguments)["ok"], bool)


def test_anthropic_and_ollama_answer(node: DaemonProcess) -> None:
    client = anthropic.Anthropic(base_url=node.url, api_key="unused", max_retries=0)
    with client.messages.stream(
        model=MLX,
        messages=[{"role": "user", "content": COUNTING}],
        max_tokens=1,  # one token answers it: MLX's CPU build decodes slowly
        extra_body={"temperature": 0},
    ) as stream:
        message = stream.get_final_message()
    client.close()
    assert message.usage.output_tokens >= 1
    local = ollama.Client(host=f"{node.url}/ollama", timeout=300)
    try:
        reply = local.generate(
            model=MLX, prompt=COUNTING, options={"num_predict": 1, "temperature": 0}
        )
    finally:
        local.close()
    assert reply.done
    assert reply.eval_count is not None and reply.eval_count >= 1


def test_temperature_zero_tracks_the_llama_cpp_demo(node: DaemonProcess) -> None:
    place(node, CONTEXT, DEMO)
    answers = []
    for model in (MLX, DEMO):
        reply = httpx.post(
            f"{node.url}/v1/completions",
            json={"model": model, "prompt": COUNTING, "max_tokens": 3, "temperature": 0},
            timeout=300,
        )
        assert reply.status_code == 200, reply.text
        answers.append(reply.json()["choices"][0]["text"])
    # Same weights, re-quantized (Q4_K -> MLX 4-bit affine): the counting prompt is
    # one the two agree on; open-ended prompts may diverge after a token or two.
    assert answers[0].split(",")[0].strip() == answers[1].split(",")[0].strip() == "7"
