"""``DELETE /models/custom/{model_id}`` as the headless qualification worker uses it:
the service bearer cleans up only the exact candidate it installed, sending it as the
body, and a card that replaced it in the meantime wins with 409. Real app in process,
with ``SKULK_EXACT_CARD_QUALIFICATION_TOKEN`` configured."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from skulk_daemon.api.authority import SERVICE_TOKEN_ENV
from tests.api.in_process import AppFactory, AppNode

TOKEN = "q" * 48
ALIAS = "qual/model@q4-k-m"


def candidate(**change: Any) -> dict[str, Any]:
    card = {
        "modelId": ALIAS,
        "sourceRepository": "qual/model",
        "sourceRevision": "0123456789abcdef0123456789abcdef01234567",
        "storageSize": {"inBytes": 1234},
        "nLayers": 32,
        "hiddenSize": 4096,
        "supportsTensor": False,
        "tasks": ["TextGeneration"],
        "ggufFile": "model-Q4_K_M.gguf",
    }
    return {"model_card": {**card, **change}}


def as_service(app: AppNode, method: str, body: dict[str, Any] | None) -> httpx.Response:
    path = "/models/add-card" if method == "POST" else f"/models/custom/{ALIAS}"
    headers = {"authorization": f"Bearer {TOKEN}"}
    return app.http.request(method, path, json=body, headers=headers)


def custom_ids(app: AppNode) -> set[str]:
    return {
        m["id"] for m in app.get("/v1/models").json()["data"] if m["catalog_source"] == "custom"
    }


def test_service_cleanup_removes_only_its_exact_candidate(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SERVICE_TOKEN_ENV, TOKEN)
    app = make_app()
    installed = as_service(app, "POST", candidate())
    assert installed.status_code == 200, installed.text

    # The bearer must send the original candidate, and only that candidate matches.
    bare = as_service(app, "DELETE", None)
    assert bare.status_code == 400 and "original candidate" in bare.json()["error"]["message"]
    other = as_service(app, "DELETE", candidate(nLayers=30))
    assert other.status_code == 409, other.text
    assert other.json()["error"]["code"] == "card_conflict"
    assert ALIAS in custom_ids(app)

    # A newer qualification candidate now owns the alias: the first one's cleanup loses.
    assert as_service(app, "POST", candidate(hiddenSize=2048)).status_code == 200
    stale = as_service(app, "DELETE", candidate())
    assert stale.status_code == 409, stale.text
    assert ALIAS in custom_ids(app)

    removed = as_service(app, "DELETE", candidate(hiddenSize=2048))
    assert removed.status_code == 200, removed.text
    assert removed.json() == {"model_id": ALIAS, "deleted": True}
    assert ALIAS not in custom_ids(app)
    assert as_service(app, "DELETE", candidate(hiddenSize=2048)).status_code == 404

    # An operator's card is never the bearer's to delete, even sent back exactly.
    operator = app.post("/models/add-card", json=candidate())
    assert operator.status_code == 200, operator.text
    refused = as_service(app, "DELETE", candidate())
    assert refused.status_code == 409, refused.text
    # The operator removes it, with or without the card as a precondition.
    stale_operator = app.http.request(
        "DELETE", f"/models/custom/{ALIAS}", json=candidate(nLayers=30)
    )
    assert stale_operator.status_code == 409, stale_operator.text
    assert app.http.delete(f"/models/custom/{ALIAS}").status_code == 200
    assert ALIAS not in custom_ids(app)
