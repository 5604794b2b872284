"""The paired-device store and the commands that need no gateway: what stays on disk,
who can read it, and how a missing or unusable pairing is reported."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from skulk_cli.commands import serve
from skulk_cli.operator_credentials import (
    CredentialStore,
    CredentialsUnusable,
    NotPaired,
    StoredPairing,
)

from .fake_node import FakeNode
from .test_cli import flat, plain, run

ACCESS = "access-token-value-that-must-never-be-printed-00"
REFRESH = "refresh-token-value-that-must-never-be-printed-0"
CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _pairing(**changes: object) -> StoredPairing:
    now = datetime.now(UTC).replace(microsecond=0)
    fields: dict[str, object] = {
        "cluster_id": "0b7f5c1e-6a55-4c1e-9e7c-2f1d2c3b4a50",
        "cluster_name": "Home lab",
        "operator_url": "https://127.0.0.1:52417",
        "fingerprint": "sha256:" + "A" * 43,
        "device_id": "5d0c8a8e-0a53-4f43-9e26-6b0f1e2d3c4b",
        "device_name": "laptop",
        "scopes": ("cluster:read", "devices:manage"),
        "paired_at": now,
        "access_token": ACCESS,
        "access_expires_at": now + timedelta(minutes=15),
        "refresh_token": REFRESH,
        "refresh_expires_at": now + timedelta(days=30),
    }
    fields.update(changes)
    return StoredPairing(**fields)  # type: ignore[arg-type]


@pytest.fixture
def config_home(tmp_path: Path) -> Path:
    return tmp_path / "config"


@pytest.fixture
def store(config_home: Path) -> CredentialStore:
    return CredentialStore(config_home / "operator")


def _env(config_home: Path) -> dict[str, str]:
    return {"SKULK_CONFIG_HOME": str(config_home)}


# --- the store ----------------------------------------------------------------------


def test_saved_pairing_is_owner_only_and_round_trips(store: CredentialStore) -> None:
    pairing = _pairing()

    store.save(pairing, CERT)

    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.credentials_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.certificate_path.stat().st_mode) == 0o600
    assert store.load() == pairing
    assert store.certificate_pem() == CERT


def test_rotation_replaces_both_tokens_in_one_file_and_leaves_no_temporaries(
    store: CredentialStore,
) -> None:
    store.save(_pairing(), CERT)
    later = datetime.now(UTC) + timedelta(hours=1)
    renewed = _pairing().with_tokens(
        access_token="new-access",
        access_expires_at=later,
        refresh_token="new-refresh",
        refresh_expires_at=later + timedelta(days=30),
    )

    store.save_tokens(renewed)

    loaded = store.load()
    assert (loaded.access_token, loaded.refresh_token) == ("new-access", "new-refresh")
    assert not [p.name for p in store.directory.iterdir() if p.name.endswith(".tmp")]
    assert store.certificate_pem() == CERT


def test_repr_never_shows_tokens(store: CredentialStore) -> None:
    text = repr(_pairing())

    assert ACCESS not in text and REFRESH not in text
    assert "5d0c8a8e" in text


def test_a_credentials_file_others_can_read_is_refused(store: CredentialStore) -> None:
    store.save(_pairing(), CERT)
    store.credentials_path.chmod(0o644)

    with pytest.raises(CredentialsUnusable, match="readable by other users"):
        store.load()


def test_a_damaged_credentials_file_is_refused_not_reset(store: CredentialStore) -> None:
    store.save(_pairing(), CERT)
    store.credentials_path.write_bytes(b'{"clusterId": ')

    with pytest.raises(CredentialsUnusable, match="not a pairing"):
        store.load()
    assert store.credentials_path.read_bytes() == b'{"clusterId": '


def test_forget_removes_credentials_and_certificate(store: CredentialStore) -> None:
    store.save(_pairing(), CERT)

    assert store.forget() is True
    assert not store.credentials_path.exists() and not store.certificate_path.exists()
    assert store.forget() is False
    with pytest.raises(NotPaired):
        store.load()


# --- commands -----------------------------------------------------------------------


def test_status_shows_the_pairing_but_never_its_tokens(
    store: CredentialStore, config_home: Path
) -> None:
    store.save(_pairing(), CERT)

    result = run("operator", "status", env=_env(config_home))

    assert result.exit_code == 0, result.output
    out = flat(result.stdout)
    assert "Home lab (0b7f5c1e-6a55-4c1e-9e7c-2f1d2c3b4a50)" in out
    assert "laptop (5d0c8a8e-0a53-4f43-9e26-6b0f1e2d3c4b)" in out
    assert "https://127.0.0.1:52417" in out
    assert "cluster:read, devices:manage" in out
    assert ACCESS not in result.output and REFRESH not in result.output

    as_json = run("operator", "status", "--json", env=_env(config_home))
    assert as_json.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)
    assert document["deviceId"] == "5d0c8a8e-0a53-4f43-9e26-6b0f1e2d3c4b"
    assert "accessToken" not in document and "refreshToken" not in document
    assert ACCESS not in as_json.stdout and REFRESH not in as_json.stdout


def test_status_without_a_pairing_says_how_to_pair(config_home: Path) -> None:
    result = run("operator", "status", env=_env(config_home))

    assert result.exit_code == 1
    assert "not paired" in flat(result.output)
    assert "skulk operator connect" in flat(result.output)


def test_operator_mode_without_a_pairing_never_falls_back_to_the_api_url(
    node: FakeNode, config_home: Path
) -> None:
    result = run("--api-url", node.url, "--operator", "status", env=_env(config_home))

    assert result.exit_code == 1
    assert "not paired" in flat(result.output)
    assert node.requests == []


def test_operator_mode_with_unsafe_credentials_says_pair_again(
    node: FakeNode, store: CredentialStore, config_home: Path
) -> None:
    store.save(_pairing(operator_url=node.url), CERT)
    store.credentials_path.chmod(0o640)

    result = run("--operator", "models", "list", env=_env(config_home))

    assert result.exit_code == 1
    out = flat(result.output)
    assert "readable by other users" in out and "Pair again" in out
    assert node.requests == []


def test_operator_mode_with_an_expired_refresh_credential_says_pair_again(
    node: FakeNode, store: CredentialStore, config_home: Path
) -> None:
    # A cleartext loopback pairing (no TLS to pin) whose whole pairing has lapsed: the
    # CLI knows without asking, and sends nothing.
    past = datetime.now(UTC) - timedelta(days=1)
    store.save(
        _pairing(operator_url=node.url, access_expires_at=past, refresh_expires_at=past), None
    )

    result = run("--operator", "status", env=_env(config_home))

    assert result.exit_code == 1
    out = flat(result.output)
    assert "refresh credential expired" in out and "Pair again" in out
    assert node.requests == []


def test_operator_mode_talks_to_the_paired_gateway_and_renders_as_usual(
    node: FakeNode, store: CredentialStore, config_home: Path, closed_url: str
) -> None:
    # (The bearer and pinned TLS are checked against a real gateway in test_operator_e2e.)
    store.save(_pairing(operator_url=node.url), None)

    result = run("--api-url", closed_url, "--operator", "status", env=_env(config_home))

    assert result.exit_code == 0, result.output
    assert "alpha" in plain(result.stdout)
    assert [(r.method, r.path) for r in node.requests] == [
        ("GET", "/node/identity"),
        ("GET", "/state"),
    ]


def test_operator_flag_alone_is_a_usage_error(config_home: Path) -> None:
    result = run("--operator", env=_env(config_home))

    assert result.exit_code == 2
    assert "skulk --operator status" in flat(result.output)


def test_disconnect_forgets_and_is_idempotent(store: CredentialStore, config_home: Path) -> None:
    store.save(_pairing(), CERT)

    first = run("operator", "disconnect", env=_env(config_home))
    second = run("operator", "disconnect", env=_env(config_home))

    assert first.exit_code == 0 and "Forgot the pairing" in first.stdout
    assert second.exit_code == 0 and "was not paired" in second.stdout
    assert not store.credentials_path.exists()


def test_connect_refuses_a_payload_that_is_not_a_package(config_home: Path) -> None:
    result = run("operator", "connect", "skulk://pair?v=9", env=_env(config_home))

    assert result.exit_code == 1
    assert "not a usable pairing payload" in flat(result.output)
    assert not (config_home / "operator" / "credentials.json").exists()


def test_connect_refuses_a_device_name_out_of_bounds(config_home: Path) -> None:
    result = run(
        "operator", "connect", "skulk://pair?v=1", "--device-name", "x" * 81, env=_env(config_home)
    )

    assert result.exit_code == 2
    assert "1-80 characters" in flat(result.output)


def test_serve_passes_the_operator_port_to_the_daemon() -> None:
    options = serve.NodeOptions(api_port=52500, operator_api_port=0)

    assert serve.daemon_argv("/py", options) == [
        "/py",
        "-m",
        "skulk_daemon",
        "--api-port",
        "52500",
        "--operator-api-port",
        "0",
    ]
    assert run("serve", "--operator-api-port", "70000").exit_code == 2
