"""End to end: ``skulk registry publish`` builds a repository, a plain HTTP server
serves it on loopback, and one daemon (a subprocess) lists its cards in ``/v1/models``.

The module shares one daemon; the last two tests restart it (repository down, then
``SKULK_OFFLINE=true``), so they run in file order, after the others.
"""

from __future__ import annotations

import json
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from typer.testing import CliRunner

from skulk_cli.main import app as cli
from skulk_core.models.cards import ModelCard
from skulk_core.registry.format import registry_card_id
from skulk_daemon.models.demo import DEMO_MODEL_ID
from tests.daemon_process import DaemonProcess
from tests.registry.repository import Server, card

runner = CliRunner()
CARDS = (card("org/alpha"), card("org/beta", context_length=4096))


@dataclass
class Published:
    base: Path
    repo: Path
    server: Server
    result: dict[str, Any]


def _publish(cards_dir: Path, repo: Path, keys: Path) -> dict[str, Any]:
    done = runner.invoke(
        cli,
        ["registry", "publish", str(cards_dir), "-o", str(repo), "--keys", str(keys), "--json"],
    )
    assert done.exit_code == 0, done.output
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _write_cards(directory: Path, cards: tuple[ModelCard, ...]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for item in cards:
        name = item.model_id.replace("/", "_")
        (directory / f"{name}.json").write_bytes(msgspec.json.encode(item))
    advisory = {
        "id": "SKA-2026-7",
        "severity": "moderate",
        "summary": "alpha's chat template drops system prompts",
        "card_ids": [registry_card_id(cards[0])],
    }
    (directory / "advisories.json").write_text(json.dumps([advisory]))


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    base = tmp_path_factory.mktemp("registry-e2e")
    _write_cards(base / "cards", CARDS)
    result = _publish(base / "cards", base / "repo", base / "keys")
    server = Server(base / "repo")
    server.start()
    try:
        yield Published(base, base / "repo", server, result)
    finally:
        server.stop()


def _status(daemon: DaemonProcess) -> dict[str, Any]:
    answer = daemon.get("/v1/registry/status")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _until(daemon: DaemonProcess, check: Any, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status = _status(daemon)
        if check(status):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


@pytest.fixture(scope="module")
def daemon(published: Published, shared_models_dir: Path) -> Iterator[DaemonProcess]:
    node = DaemonProcess(root=published.base / "node", models_dir=shared_models_dir)
    node.config_home.mkdir(parents=True)
    (node.config_home / "skulk.yaml").write_text(
        f"registry:\n  url: {published.server.url}\n  root: {published.result['root']}\n"
    )
    node.start()
    try:
        _until(node, lambda s: s["state"] == "current")
        yield node
    finally:
        node.kill()


def _models(daemon: DaemonProcess) -> dict[str, dict[str, Any]]:
    answer = daemon.get("/v1/models")
    assert answer.status_code == 200
    return {item["id"]: item for item in answer.json()["data"]}


def test_publish_builds_a_signed_repository_and_keeps_the_keys_private(
    published: Published, tmp_path: Path
) -> None:
    result = published.result
    assert result["version"] == 1 and result["keys_generated"]
    ids = {c["model_id"]: c["registry_card_id"] for c in result["cards"]}
    assert ids == {c.model_id: registry_card_id(c) for c in CARDS}
    assert result["advisories"] == ["SKA-2026-7"]
    for role in ("root", "targets", "snapshot", "timestamp"):
        mode = (published.base / "keys" / f"{role}.pem").stat().st_mode
        assert stat.S_IMODE(mode) == 0o600
    assert not list(published.repo.rglob("*.pem"))
    # Publishing again with the same keys bumps every version.
    copy = tmp_path / "repo"
    _write_cards(tmp_path / "cards", CARDS)
    first = _publish(tmp_path / "cards", copy, tmp_path / "keys")
    again = _publish(tmp_path / "cards", copy, tmp_path / "keys")
    assert (first["version"], again["version"]) == (1, 2) and not again["keys_generated"]
    # Other keys than the repository's root trusts are refused, and nothing is written.
    before = sorted(p.name for p in (copy / "metadata").iterdir())
    done = runner.invoke(
        cli,
        ["registry", "publish", str(tmp_path / "cards"), "-o", str(copy), "--keys",
         str(tmp_path / "other-keys")],
    )  # fmt: skip
    assert done.exit_code == 1 and "root rotation" in done.output
    assert sorted(p.name for p in (copy / "metadata").iterdir()) == before
    inside = runner.invoke(
        cli, ["registry", "publish", str(tmp_path / "cards"), "-o", str(copy), "--keys",
              str(copy / "keys")],
    )  # fmt: skip
    assert inside.exit_code == 1 and "must not be inside" in inside.output


def test_publish_refuses_a_card_a_node_would_refuse(tmp_path: Path) -> None:
    cards = tmp_path / "cards"
    _write_cards(cards, (card("org/alpha", source_revision="main"),))
    done = runner.invoke(
        cli, ["registry", "publish", str(cards), "-o", str(tmp_path / "repo"), "--keys",
              str(tmp_path / "keys")],
    )  # fmt: skip
    assert done.exit_code == 1 and "40-character" in done.output
    assert not (tmp_path / "repo").exists()
    (cards / "org_alpha.json").write_text("{not json")
    done = runner.invoke(
        cli, ["registry", "publish", str(cards), "-o", str(tmp_path / "repo"), "--keys",
              str(tmp_path / "keys")],
    )  # fmt: skip
    assert done.exit_code == 1 and "org_alpha.json" in done.output


def test_registry_cards_reach_v1_models_with_their_identities(daemon: DaemonProcess) -> None:
    status = _status(daemon)
    models = _models(daemon)
    alpha, beta = models["org/alpha"], models["org/beta"]
    assert alpha["catalog_source"] == "registry"
    assert alpha["registry_card_id"] == registry_card_id(CARDS[0])
    assert alpha["current_registry_identity"] == alpha["registry_card_id"]
    assert alpha["registry_snapshot_id"] == status["snapshot_id"]
    assert alpha["registry_provenance"] == "community"
    assert not alpha["installed"] and alpha["installed_verification"] is None
    assert not alpha["update_available"]
    assert [a["id"] for a in alpha["advisories"]] == ["SKA-2026-7"]
    assert alpha["advisories"][0]["severity"] == "moderate"
    assert beta["advisories"] == [] and beta["context_length"] == 4096
    # The installed demo model is still there, as the installed card it is.
    assert models[DEMO_MODEL_ID]["catalog_source"] == "installed"


def test_the_status_route_and_command(daemon: DaemonProcess, published: Published) -> None:
    status = _status(daemon)
    assert status["state"] == "current" and status["source_url"] == published.server.url
    assert status["card_count"] == 2 and status["last_refusal"] is None
    assert status["refresh_interval_seconds"] == 60
    assert status["max_cache_age_seconds"] == 30 * 24 * 3600
    # Operator facts (local paths, refusal details): trusted-fabric authority.
    forwarded = daemon.get("/v1/registry/status", headers={"X-Forwarded-For": "203.0.113.9"})
    assert forwarded.status_code == 403
    assert forwarded.json()["error"]["code"] == "forwarded_request"
    done = runner.invoke(cli, ["--api-url", daemon.url, "registry", "status", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["snapshot_id"] == status["snapshot_id"]
    table = runner.invoke(cli, ["--api-url", daemon.url, "registry", "status"])
    assert table.exit_code == 0
    assert "current" in table.output and published.server.url in table.output


def test_a_custom_card_overrides_the_registry_card(daemon: DaemonProcess) -> None:
    custom = msgspec.structs.replace(CARDS[1], context_length=1024)
    body = {"model_card": msgspec.to_builtins(custom)}
    added = httpx.post(f"{daemon.url}/models/add-card", json=body, timeout=30)
    assert added.status_code == 200, added.text
    try:
        beta = _models(daemon)["org/beta"]
        assert beta["catalog_source"] == "custom" and beta["context_length"] == 1024
        assert beta["registry_card_id"] is None and beta["registry_provenance"] is None
        assert beta["current_registry_identity"] == registry_card_id(CARDS[1])
    finally:
        removed = httpx.delete(f"{daemon.url}/models/custom/org/beta", timeout=30)
        assert removed.status_code == 200, removed.text
    assert _models(daemon)["org/beta"]["catalog_source"] == "registry"


def test_a_restart_with_the_repository_down_keeps_the_verified_catalog(
    daemon: DaemonProcess, published: Published
) -> None:
    published.server.stop()
    daemon.stop()
    daemon.start()
    status = _until(daemon, lambda s: s["last_refusal"] is not None)
    assert status["state"] == "cached"
    assert status["last_refusal"]["reason"] == "unreachable"
    assert _models(daemon)["org/alpha"]["catalog_source"] == "registry"
    assert "registry refresh refused (unreachable)" in daemon.log_text()


def test_offline_leaves_installed_and_custom_cards(daemon: DaemonProcess) -> None:
    custom = msgspec.structs.replace(CARDS[1], context_length=1024)
    body = {"model_card": msgspec.to_builtins(custom)}
    assert httpx.post(f"{daemon.url}/models/add-card", json=body, timeout=30).status_code == 200
    daemon.stop()
    daemon.extra_env["SKULK_OFFLINE"] = "true"
    daemon.start()
    status = _status(daemon)
    assert status["state"] == "offline" and status["offline"]
    assert status["card_count"] == 0 and status["last_attempt_at"] is None
    models = _models(daemon)
    assert "org/alpha" not in models
    assert models["org/beta"]["catalog_source"] == "custom"
    assert models["org/beta"]["current_registry_identity"] is None
    assert models[DEMO_MODEL_ID]["catalog_source"] == "installed"
