from __future__ import annotations

import httpx
import pytest
import yaml

from tests.daemon_process import DaemonFactory, DaemonProcess

pytestmark = pytest.mark.slow


def _put(daemon: DaemonProcess, body: object) -> httpx.Response:
    return httpx.put(f"{daemon.url}/config", json=body, timeout=30)


def test_get_config_strips_secrets_and_reports_effective(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon(SKULK_KV_CACHE_BACKEND="q8_0")
    daemon.config_home.mkdir(parents=True)
    (daemon.config_home / "skulk.yaml").write_text(
        "hf_token: hf_topsecret\ncluster:\n  key: psk-topsecret\n"
    )
    daemon.start()
    response = daemon.get("/config")
    assert response.status_code == 200
    assert "topsecret" not in response.text
    body = response.json()
    assert body["path"] == str(daemon.config_home / "skulk.yaml")
    assert body["effective"]["has_hf_token"] is True
    assert body["effective"]["kv_cache_backend"] == "q8_0"
    assert body["effective"]["experimental_mode_enabled"] is False


def test_put_config_validates_persists_and_preserves(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    daemon.config_home.mkdir(parents=True)
    path = daemon.config_home / "skulk.yaml"
    path.write_text("hf_token: hf_keepme\nlogging:\n  level: debug\n")
    daemon.start()

    refused = _put(daemon, {"config": {"inference": {"kv_cache_bakend": "f16"}}})
    assert refused.status_code == 422
    assert "'inference.kv_cache_bakend'" in refused.json()["error"]["message"]
    assert yaml.safe_load(path.read_text())["hf_token"] == "hf_keepme"

    accepted = _put(daemon, {"inference": {"kv_cache_backend": "f16"}})
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["config"]["inference"]["kv_cache_backend"] == "f16"
    on_disk = yaml.safe_load(path.read_text())
    assert on_disk["hf_token"] == "hf_keepme"
    assert on_disk["logging"]["level"] == "debug"
    assert on_disk["inference"]["kv_cache_backend"] == "f16"
    assert path.stat().st_mode & 0o777 == 0o600

    conflict = _put(daemon, {"model_trust": {"approved_remote_code_identities": ["x"]}})
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "model_trust_immutable"

    not_json = httpx.put(f"{daemon.url}/config", content=b"{nope", timeout=30)
    assert not_json.status_code == 400
