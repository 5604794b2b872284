"""``GET /models/requirements``'s ``required_capabilities`` on the session's bare node:
the complete intrinsic capability set the selected card positively evidences."""

from __future__ import annotations

from typing import Any

from skulk_daemon.models.embedding_demo import EMBEDDING_DEMO_MODEL_ID
from tests.api.in_process import AppNode
from tests.daemon.serving import DEMO

CLAIMING = "test/requirements-claims"


def requirements(app: AppNode, model_id: str) -> dict[str, Any]:
    params = {"model_id": model_id, "context_tokens": 256}
    answer = app.get("/models/requirements", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_required_capabilities_follow_each_card(bare_app: AppNode) -> None:
    demo = requirements(bare_app, DEMO)["required_capabilities"]
    listed = next(m for m in bare_app.get("/v1/models").json()["data"] if m["id"] == DEMO)
    # The whole evidenced set, the same as the catalog shows, in a stable order.
    assert demo == sorted(listed["capabilities"]) and "text" in demo
    embedding = requirements(bare_app, EMBEDDING_DEMO_MODEL_ID)["required_capabilities"]
    assert "embedding" in embedding and "text" not in embedding


def test_a_card_requires_every_capability_it_declares_besides_its_tasks(bare_app: AppNode) -> None:
    card = {
        "modelId": CLAIMING,
        "sourceRepository": CLAIMING,
        "sourceRevision": "3" * 40,
        "storageSize": {"inBytes": 1000},
        "nLayers": 2,
        "tasks": ["TextGeneration"],
        "ggufFile": "model-Q4_K_M.gguf",
        "capabilities": ["vision", "tools"],
    }
    added = bare_app.post("/models/add-card", json={"model_card": card})
    assert added.status_code == 200, added.text
    try:
        # Support for one claim is not enough: an engine must cover the whole set.
        found = requirements(bare_app, CLAIMING)["required_capabilities"]
        assert found == ["text", "tools", "vision"]
    finally:
        assert bare_app.http.delete(f"/models/custom/{CLAIMING}").status_code == 200
