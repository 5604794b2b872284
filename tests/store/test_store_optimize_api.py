"""OptiQ optimization's refusals, in process on the real app and the store's transport.

One store-host app for the module, pointed at the fake hub, holding the tiny GGUF
(headers and filler, no weights an optimizer could requantize); one app without a
store. What succeeds (the demo model optimized, placed and chatting) is in
``test_store_optimize.py`` against a real daemon.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.api.in_process import AppNode
from tests.hub.conftest import TINY
from tests.store.store_app import GGUF


def error(answer: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = answer.json()["error"]
    return body


def test_without_a_store_both_routes_answer_503(tmp_path: Path, models_dir: Path) -> None:
    with AppNode(root=tmp_path, models_dir=models_dir) as node:
        started = node.post(f"/store/models/{TINY}/optimize", json={})
        assert started.status_code == 503, started.text
        assert error(started)["message"] == "Store not configured"
        polled = node.get(f"/store/models/{TINY}/optimize/status")
        assert polled.status_code == 503, polled.text


def test_no_known_job_is_404(app: AppNode) -> None:
    answer = app.get("/store/models/nobody/none/optimize/status")
    assert answer.status_code == 404, answer.text
    assert "no optimization of nobody/none" in error(answer)["message"]


def test_a_model_the_store_lacks_is_404(app: AppNode) -> None:
    answer = app.post("/store/models/nobody/none/optimize", json={})
    assert answer.status_code == 404, answer.text
    assert "nobody/none is not in the store" in error(answer)["message"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"target_bpw": 4.5, "bits": [4]}, "unknown field"),
        ({"candidate_bits": [4, 7]}, "[7] are not supported"),
        ({"candidate_bits": []}, "1 to 7 widths"),
        ({"target_bpw": 16.5}, "between 2.0 and 16.0"),
        ({"target_bpw": 3.5, "candidate_bits": [4, 8]}, "below the narrowest"),
        ({"target_bpw": "high"}, "Expected `float`"),
    ],
)
def test_a_malformed_body_is_400_and_says_why(
    app: AppNode, stored: str, body: dict[str, object], says: str
) -> None:
    answer = app.post(f"/store/models/{stored}/optimize", json=body)
    assert answer.status_code == 400, answer.text
    assert says in error(answer)["message"]
    assert app.get(f"/store/models/{stored}/optimize/status").status_code == 404


def test_a_gguf_without_weights_cannot_be_optimized_503(app: AppNode, stored: str) -> None:
    answer = app.post(f"/store/models/{stored}/optimize", json={})
    assert answer.status_code == 503, answer.text
    assert GGUF in error(answer)["message"]
    assert app.get(f"/store/models/{stored}/optimize/status").status_code == 404


def test_the_store_transport_answers_other_nodes_the_same_way(stored: str, store_port: int) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{store_port}", timeout=30) as transport:
        path = f"/models/{quote(stored, safe='')}/optimize"
        assert transport.post(path, json={"candidate_bits": [9]}).status_code == 400
        refused = transport.post(path, json={})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "optimizer_unavailable"
        unknown = transport.get(f"/models/{quote('nobody/none', safe='')}/optimize/status")
        assert unknown.status_code == 404, unknown.text
