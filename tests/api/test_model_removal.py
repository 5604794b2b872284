"""Removing a model removes it: bytes, listing, and (for a demo) across restarts.

A node of its own on a models dir of its own: the session's shared models dir must
keep its demo model for every other test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.in_process import AppNode

pytestmark = pytest.mark.slow

DEMO = "local/gemma-3-270m-q4_k_m"


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("own-models")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Iterator[AppNode]:
    with AppNode(root=tmp_path_factory.mktemp("removal-node"), models_dir=models_dir) as app:
        yield app


def listed(app: AppNode, path: str) -> dict[str, bool]:
    response = app.get(path)
    assert response.status_code == 200, response.text
    return {item["id"]: item["installed"] for item in response.json()["data"]}


def remove_bytes(app: AppNode, model_id: str) -> tuple[int, dict[str, object]]:
    node_id = app.get("/node_id").json()
    response = app.http.delete(f"/download/{node_id}/{model_id}")
    return response.status_code, response.json()


def test_a_misspelled_model_id_gets_the_closest_known_ids(node: AppNode) -> None:
    typo = "local/gemma-3-270m-q4km"
    for response in (
        node.post("/place_instance", json={"model_id": typo}),
        node.get("/instance/previews", params={"model_id": typo}),
        node.get("/models/requirements", params={"model_id": typo}),
        node.post(
            "/v1/chat/completions",
            json={"model": typo, "messages": [{"role": "user", "content": "Hi"}]},
        ),
    ):
        assert response.status_code == 404, response.text
        error = response.json()["error"]
        assert error["code"] == "model_not_found"
        assert f"did you mean {DEMO!r}?" in error["message"]
    far = node.post("/place_instance", json={"model_id": "nobody/nothing"}).json()["error"]
    assert "did you mean" not in far["message"]


def test_removing_the_bytes_of_a_placed_model_is_refused_naming_the_instance(
    node: AppNode, models_dir: Path
) -> None:
    placed = node.post("/place_instance", json={"model_id": DEMO, "context_tokens": 512})
    assert placed.status_code == 200, placed.text
    instance_id = placed.json()["instance_id"]
    try:
        status, body = remove_bytes(node, DEMO)
        assert status == 409
        error = body["error"]
        assert isinstance(error, dict) and error["code"] == "model_in_use"
        assert instance_id in error["message"] and "delete the instance first" in error["message"]
        assert listed(node, "/v1/models")[DEMO] is True
        assert list((models_dir / "local--gemma-3-270m-q4_k_m").glob("*.gguf"))
    finally:
        assert node.http.delete(f"/instance/{instance_id}").status_code == 200


def test_a_removed_demo_is_gone_stays_gone_and_comes_back_when_added(
    node: AppNode, models_dir: Path, tmp_path: Path
) -> None:
    status, body = remove_bytes(node, DEMO)
    assert status == 200, body
    assert body["status"] == "deleted"
    for path in ("/v1/models", "/models"):
        assert DEMO not in listed(node, path)
    assert not list((models_dir / "local--gemma-3-270m-q4_k_m").glob("*.gguf"))
    refused = node.post("/place_instance", json={"model_id": DEMO})
    assert refused.status_code == 404
    # Removing it again: nothing is there.
    assert remove_bytes(node, DEMO)[0] == 404

    # A node starting on the same models dir does not install it again.
    with AppNode(root=tmp_path / "restarted", models_dir=models_dir) as restarted:
        assert DEMO not in listed(restarted, "/v1/models")

    # Adding it by its id installs it again from its package, with no network.
    added = node.post("/models/add", json={"model_id": DEMO})
    assert added.status_code == 200, added.text
    assert added.json()["id"] == DEMO and added.json()["installed"] is True
    assert listed(node, "/v1/models")[DEMO] is True
    again = node.post("/models/add", json={"model_id": DEMO})
    assert again.status_code == 200, again.text
    placed = node.post("/place_instance", json={"model_id": DEMO, "context_tokens": 512})
    assert placed.status_code == 200, placed.text
    assert node.http.delete(f"/instance/{placed.json()['instance_id']}").status_code == 200
