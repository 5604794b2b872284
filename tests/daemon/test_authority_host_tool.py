"""``python -m skulk_daemon.operator``: the host tool the CLI runs, as a real subprocess."""

from __future__ import annotations

import json
import os
import secrets
import stat
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from skulk_core.operator.encoding import public_key_fingerprint
from skulk_core.operator.package import (
    DirectPackage,
    InvitationPackage,
    SessionPackage,
    decode_pairing_uri,
)
from tests.daemon.authority_support import (
    APP_CREDENTIAL,
    GATEWAY_CREDENTIAL,
    provisioning_v1,
    provisioning_v2,
)

ROOT = Path(__file__).resolve().parents[2]


def tool(data_dir: Path, *args: str, **extra_env: str) -> tuple[int, dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKULK_")} | extra_env
    done = subprocess.run(
        [sys.executable, "-m", "skulk_daemon.operator", "--data-dir", str(data_dir), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout + done.stderr
    return done.returncode, json.loads(lines[0]), done.stdout + done.stderr


def test_pair_initializes_and_prints_one_session(tmp_path: Path) -> None:
    code, out, _ = tool(tmp_path, "pair", "--cluster-name", "  Home   Lab ")
    assert code == 0
    assert out["kind"] == "session" and out["invitation"] is None
    package = decode_pairing_uri(out["uri"])
    assert isinstance(package, DirectPackage)
    assert package.cluster_name == out["clusterName"] == "Home Lab"
    assert package.cluster_id == out["clusterId"]
    certificate = x509.load_pem_x509_certificate(
        (tmp_path / "operator" / "gateway-tls.crt").read_bytes()
    )
    spki = certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert public_key_fingerprint(spki) == package.fingerprint == out["fingerprint"]
    for name in ("gateway-tls.key", "authority.store", "authority.key"):
        assert stat.S_IMODE((tmp_path / "operator" / name).stat().st_mode) == 0o600
    # A second pair reuses the same identity.
    code, again, _ = tool(tmp_path, "pair")
    assert code == 0 and again["clusterId"] == out["clusterId"] and again["uri"] != out["uri"]


def _exchange_port(out: dict[str, Any]) -> str:
    return decode_pairing_uri(out["uri"]).exchange_url.rsplit(":", 1)[1]


def test_pair_names_the_port_the_running_node_publishes(tmp_path: Path) -> None:
    record = tmp_path / "operator" / "listener.json"
    record.parent.mkdir(mode=0o700)
    # A running node (this test process stands in for it) on port 41234.
    record.write_text(json.dumps({"pid": os.getpid(), "port": 41234}))
    code, out, _ = tool(tmp_path, "pair")
    assert code == 0 and _exchange_port(out) == "41234"
    code, out, _ = tool(tmp_path, "pair", "--max-pairings", "2")
    assert code == 0 and _exchange_port(out) == "41234"

    # A record left by a node that is gone: the port this environment would start with.
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    record.write_text(json.dumps({"pid": int(gone.stdout), "port": 41234}))
    code, out, _ = tool(tmp_path, "pair", SKULK_OPERATOR_API_PORT="41999")
    assert code == 0 and _exchange_port(out) == "41999"
    code, out, _ = tool(tmp_path, "pair")
    assert code == 0 and _exchange_port(out) == "52417"


def test_pair_waits_for_a_port_zero_node_and_says_so_if_it_never_binds(tmp_path: Path) -> None:
    record = tmp_path / "operator" / "listener.json"
    record.parent.mkdir(mode=0o700)
    record.write_text(json.dumps({"pid": os.getpid(), "port": None}))
    code, out, _ = tool(tmp_path, "pair")
    assert code == 1 and "has not bound yet" in out["error"]


def test_invitations_create_list_and_revoke(tmp_path: Path) -> None:
    code, out, _ = tool(tmp_path, "pair", "--valid-for", "90d", "--max-pairings", "3")
    assert code == 0 and out["kind"] == "invitation"
    package = decode_pairing_uri(out["uri"])
    assert isinstance(package, InvitationPackage) and package.max_pairings == 3
    invitation_id = out["invitation"]["invitationId"]
    assert package.invitation_id == invitation_id

    code, default, _ = tool(tmp_path, "pair", "--max-pairings", "2")
    assert code == 0 and default["invitation"]["maxPairings"] == 2

    code, listed, raw = tool(tmp_path, "invitations", "list")
    assert code == 0 and len(listed["invitations"]) == 2
    assert package.nonce not in raw
    code, revoked, _ = tool(tmp_path, "invitations", "revoke", invitation_id)
    assert (code, revoked) == (0, {"revoked": invitation_id})
    code, listed, _ = tool(tmp_path, "invitations", "list")
    assert [i["state"] for i in listed["invitations"]] == ["revoked", "active"]
    code, out, _ = tool(tmp_path, "invitations", "revoke", "00000000-0000-4000-8000-000000000000")
    assert code == 1 and "error" in out


def test_refusals_exit_1_and_usage_errors_exit_2(tmp_path: Path) -> None:
    for flags in (["--valid-for", "91d"], ["--valid-for", "10s"], ["--max-pairings", "21"]):
        code, out, _ = tool(tmp_path, "pair", *flags)
        assert code == 1 and out["error"]
    assert not (tmp_path / "operator" / "authority.store").exists()
    code, out, _ = tool(tmp_path, "pair", "--exchange-url", "http://gateway.example.invalid")
    assert code == 1 and "HTTPS" in out["error"]
    code, out, _ = tool(tmp_path, "invitations", "list")
    assert code == 1 and "initialized" in out["error"]
    code, out, _ = tool(tmp_path, "frobnicate")
    assert code == 2 and out["error"]
    code, out, _ = tool(tmp_path, "pair", "--max-pairings", "many")
    assert code == 2 and out["error"]


def test_an_over_budget_package_is_refused_before_anything_is_persisted(tmp_path: Path) -> None:
    noise = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(900))
    url = f"https://127.0.0.1:52417/{noise}"
    code, out, _ = tool(tmp_path, "pair", "--exchange-url", url)
    assert code == 1 and "budget" in out["error"]
    assert not (tmp_path / "operator" / "authority.store").exists()

    assert tool(tmp_path, "pair")[0] == 0
    store = tmp_path / "operator" / "authority.store"
    before = store.read_bytes()
    for extra in ([], ["--valid-for", "1h"]):
        code, out, _ = tool(
            tmp_path, "pair", "--exchange-url", url, "--cluster-name", "Renamed", *extra
        )
        assert code == 1 and "budget" in out["error"]
    assert store.read_bytes() == before


def test_configure_relay_validates_stores_and_refuses_silent_replacement(tmp_path: Path) -> None:
    first, second, bad = tmp_path / "v1.json", tmp_path / "v2.json", tmp_path / "bad.json"
    first.write_bytes(provisioning_v1())
    second.write_bytes(provisioning_v2())
    bad.write_bytes(provisioning_v1(gateway_carrier_credential=APP_CREDENTIAL))
    data = tmp_path / "data"
    base = ["configure-relay", "--operator-api-port", "52417", "--cluster-name", "Relay"]

    code, out, raw = tool(data, *base, "--provisioning-file", str(bad))
    assert code == 1 and "gateway_carrier_credential" in out["error"]
    assert APP_CREDENTIAL not in raw
    assert not (data / "operator" / "authority.store").exists()

    code, out, _ = tool(data, *base, "--provisioning-file", str(first))
    assert (code, out) == (0, {"configured": True, "version": 1})
    code, out, raw = tool(data, *base, "--provisioning-file", str(second))
    assert code == 1 and "--replace" in out["error"]
    assert GATEWAY_CREDENTIAL not in raw
    code, out, _ = tool(data, *base, "--provisioning-file", str(second), "--replace")
    assert (code, out) == (0, {"configured": True, "version": 2})

    code, out, raw = tool(data, "pair")
    package = decode_pairing_uri(out["uri"])
    assert isinstance(package, SessionPackage) and package.relay is not None
    assert GATEWAY_CREDENTIAL not in raw
    blob = (data / "operator" / "authority.store").read_bytes()
    assert GATEWAY_CREDENTIAL.encode() not in blob and APP_CREDENTIAL.encode() not in blob

    code, out, _ = tool(data, *base, "--provisioning-file", str(tmp_path / "missing.json"))
    assert code == 1 and "provisioning file" in out["error"]


def test_a_corrupt_store_is_refused_and_left_alone(tmp_path: Path) -> None:
    assert tool(tmp_path, "pair")[0] == 0
    store = tmp_path / "operator" / "authority.store"
    damaged = store.read_bytes()[:-1]
    store.write_bytes(damaged)
    for args in (["pair"], ["invitations", "list"], ["pair", "--valid-for", "1h"]):
        code, out, _ = tool(tmp_path, *args)
        assert code == 1 and "authority store" in out["error"]
    assert store.read_bytes() == damaged
