"""``GET /store/storage`` on the session's serving node: what an operator sees about
each installed artifact (last use, live dependants, artifact role, owner and signed
card ids) and the event log's size, through the real app in process."""

from __future__ import annotations

from typing import Any

from skulk_daemon.models.embedding_demo import EMBEDDING_DEMO_MODEL_ID
from tests.api.in_process import Served
from tests.daemon.serving import DEMO as MODEL

OWNER = "test/storage-owner"


def artifacts(served: Served) -> dict[str, dict[str, Any]]:
    answer = served.app.get("/store/storage")
    assert answer.status_code == 200, answer.text
    return {a["model_id"]: a for a in answer.json()["artifacts"]}


def test_storage_reports_use_role_and_the_event_log(demo_app: Served) -> None:
    body = demo_app.app.get("/store/storage").json()
    # Every append to the durable log lands on disk before it is applied.
    assert body["event_log_bytes"] > 8
    demo = artifacts(demo_app)[MODEL]
    # The demo model is serving: it is in use and a runner launched from its bytes.
    assert demo["in_use"] is True
    assert demo["lastUsedAt"] is not None and demo["lastUsedAt"] >= demo["installed_at"]
    assert demo["artifactRole"] == "base"
    assert demo["ownerModelId"] is None and demo["ownerCardId"] is None
    assert demo["registryCardId"] is None  # a local card, not a signed one
    # The shared node may have served the embedding demo in an earlier test: its use
    # follows whether it is placed now, and any last use is after its install.
    embedding = artifacts(demo_app)[EMBEDDING_DEMO_MODEL_ID]
    placed = {
        body["shardAssignments"]["modelId"]
        for wrapped in demo_app.app.get("/state").json()["instances"].values()
        for body in wrapped.values()
    }
    assert embedding["in_use"] is (EMBEDDING_DEMO_MODEL_ID in placed)
    used = embedding["lastUsedAt"]
    assert used is None or used >= embedding["installed_at"]


def test_a_companion_is_reported_under_the_card_that_declares_it(demo_app: Served) -> None:
    app = demo_app.app
    card = {
        "modelId": OWNER,
        "sourceRepository": OWNER,
        "sourceRevision": "1" * 40,
        "storageSize": {"inBytes": 1000},
        "nLayers": 2,
        "tasks": ["TextGeneration"],
        "ggufFile": "model-Q4_K_M.gguf",
        "companions": [
            {
                "role": "assistant",
                "sourceRepository": "local/embedding",
                "sourceRevision": "2" * 40,
                "modelId": EMBEDDING_DEMO_MODEL_ID,
            }
        ],
    }
    added = app.post("/models/add-card", json={"model_card": card})
    assert added.status_code in (200, 201), added.text
    try:
        embedding = artifacts(demo_app)[EMBEDDING_DEMO_MODEL_ID]
        assert embedding["artifactRole"] == "assistant"
        assert embedding["ownerModelId"] == OWNER
        assert embedding["in_use"] is False  # its owner is not placed
    finally:
        removed = app.http.delete(f"/models/custom/{OWNER}")
        assert removed.status_code == 200, removed.text
    assert artifacts(demo_app)[EMBEDDING_DEMO_MODEL_ID]["artifactRole"] == "base"
