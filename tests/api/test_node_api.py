"""What a newcomer sees with curl on a fresh node: its id, identity, state, models,
the API's documents, the error envelope, and the event export."""

from __future__ import annotations

import socket

from tests.api.in_process import AppFactory, AppNode

DEMO_MODEL = "local/gemma-3-270m-q4_k_m"


def test_node_answers_id_identity_state_models_and_docs(bare_app: AppNode) -> None:
    node_id = bare_app.get("/node_id").json()
    assert isinstance(node_id, str) and node_id.startswith("12D3KooW")

    identity = bare_app.get("/node/identity").json()
    assert identity["nodeId"] == node_id
    assert identity["hostname"] == socket.gethostname()
    assert identity["ipAddress"]

    state = bare_app.get("/state").json()
    assert node_id in state["topology"]["nodes"]
    memory = state["nodeMemory"][node_id]
    assert 0 < memory["ramAvailable"]["inBytes"] <= memory["ramTotal"]["inBytes"]
    assert state["nodeIdentities"][node_id]["nodeInstallId"]
    assert state["nodeHealth"][node_id]["level"] in {"ok", "warn", "error"}
    assert "llama_cpp" in state["nodeResources"][node_id]["backends"]
    assert state["nodeResources"][node_id]["kvCache"] == "default"
    assert state["nodeResources"][node_id]["llamaCppSlots"] == 4
    assert state["lastEventAppliedIdx"] >= 0
    assert node_id in state["lastSeen"]

    models = bare_app.get("/v1/models").json()
    demo = next(m for m in models["data"] if m["id"] == DEMO_MODEL)
    assert demo["installed"] is True
    assert demo["catalog_source"] == "installed"
    assert bare_app.get("/models").json() == models

    schema = bare_app.get("/api/openapi.json").json()
    for path in ("/node_id", "/state", "/v1/models", "/config"):
        assert path in schema["paths"]
    assert "swagger" in bare_app.get("/api/docs").text.lower()
    assert "redoc" in bare_app.get("/api/redoc").text.lower()


def test_errors_use_the_openai_envelope(bare_app: AppNode) -> None:
    response = bare_app.get("/no/such/route")
    assert response.status_code == 404
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code"}


def test_events_export_is_empty_when_event_logging_is_off(make_app: AppFactory) -> None:
    app = make_app(config_yaml="logging:\n  event_log: false\n")
    assert app.get("/events").json() == []
