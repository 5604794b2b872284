"""``GET /config`` and ``PUT /config``: secrets never leave, edits are validated,
persisted atomically and keep what the request did not name."""

from __future__ import annotations

import httpx
import pytest
import yaml

from skulk_core.config import SkulkConfig
from skulk_daemon.api.config import editing_for
from skulk_daemon.authority.policy import Caller
from tests.api.in_process import AppFactory, AppNode
from tests.daemon.serving import wait_for


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
    # The node advertises it, so placement sizes what this node serves at q8_0.
    node_id = app.get("/node_id").json()
    wait_for(lambda: node_id in app.get("/state").json()["nodeResources"], "telemetry", 10)
    assert app.get("/state").json()["nodeResources"][node_id]["kvCache"] == "q8_0"
    # The override is held to the file's rule: with flash attention off no runner
    # could start on a q8_0 cache, so the edit is refused and nothing is written.
    path = app.config_home / "skulk.yaml"
    before = path.read_text()
    refused = _put(app, {"inference": {"flash_attention": "off"}})
    assert refused.status_code == 422
    assert "q8_0 KV cache needs flash attention" in refused.json()["error"]["message"]
    assert path.read_text() == before


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


def test_get_config_tells_an_editor_what_it_may_change(make_app: AppFactory) -> None:
    app = make_app(config_yaml="hf_token: hf_topsecret\ncluster:\n  key: psk-topsecret\n")
    response = app.get("/config")
    assert "topsecret" not in response.text
    editing = response.json()["editing"]
    assert "cluster.peers" in editing["trust_keys"] and "hf_token" in editing["trust_keys"]
    # This machine (loopback) may change the trust keys.
    assert editing["trust_editable"] is True and editing["trust_reason"] is None
    assert editing["secrets"] == {
        "hf_token": True,
        "cluster.key": True,
        "browser_tools.search_api_key": False,
        "api.keys": False,
    }
    assert "node.friendly_name" in editing["restart_keys"]
    assert "inference.kv_cache_backend" not in editing["restart_keys"]
    saved = _put(app, {"node": {"friendly_name": "renamed"}})
    assert saved.status_code == 200, saved.text
    assert saved.json()["editing"]["secrets"]["cluster.key"] is True


@pytest.mark.parametrize("caller", [Caller.TRUSTED_FABRIC, Caller.OTHER])
def test_trust_keys_are_read_only_beyond_this_machine_and_the_gateway(caller: Caller) -> None:
    editing = editing_for(caller, SkulkConfig(), has_hf_token=False)
    assert editing.trust_editable is False
    assert editing.trust_reason is not None and "localhost" in editing.trust_reason
    assert editing_for(Caller.OPERATOR, SkulkConfig(), has_hf_token=False).trust_editable
