"""``GET /config`` and ``PUT /config``: secrets never leave, edits are validated,
persisted atomically and keep what the request did not name."""

from __future__ import annotations

import httpx
import pytest
import yaml

from tests.api.in_process import AppFactory, AppNode


def _put(app: AppNode, body: object) -> httpx.Response:
    return app.http.put("/config", json=body)


def test_get_config_strips_secrets_and_reports_effective(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKULK_KV_CACHE_BACKEND", "q8_0")
    app = make_app(config_yaml="hf_token: hf_topsecret\ncluster:\n  key: psk-topsecret\n")
    response = app.get("/config")
    assert response.status_code == 200
    assert "topsecret" not in response.text
    body = response.json()
    assert body["path"] == str(app.config_home / "skulk.yaml")
    assert body["effective"]["has_hf_token"] is True
    assert body["effective"]["kv_cache_backend"] == "q8_0"
    assert body["effective"]["experimental_mode_enabled"] is False


def test_put_config_validates_persists_and_preserves(make_app: AppFactory) -> None:
    app = make_app(config_yaml="hf_token: hf_keepme\nlogging:\n  level: debug\n")
    path = app.config_home / "skulk.yaml"

    refused = _put(app, {"config": {"inference": {"kv_cache_bakend": "f16"}}})
    assert refused.status_code == 422
    assert "'inference.kv_cache_bakend'" in refused.json()["error"]["message"]
    assert yaml.safe_load(path.read_text())["hf_token"] == "hf_keepme"

    accepted = _put(app, {"inference": {"kv_cache_backend": "f16"}})
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["config"]["inference"]["kv_cache_backend"] == "f16"
    on_disk = yaml.safe_load(path.read_text())
    assert on_disk["hf_token"] == "hf_keepme"
    assert on_disk["logging"]["level"] == "debug"
    assert on_disk["inference"]["kv_cache_backend"] == "f16"
    assert path.stat().st_mode & 0o777 == 0o600

    conflict = _put(app, {"model_trust": {"approved_remote_code_identities": ["x"]}})
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "model_trust_immutable"

    not_json = app.http.put(
        "/config", content=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert not_json.status_code == 400
    # A body that does not say it is JSON is refused before it is read (CSRF).
    untyped = app.http.put("/config", content=b"{nope")
    assert untyped.status_code == 415
