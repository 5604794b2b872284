"""Operator pairing end to end: the real `skulk` CLI (a subprocess, as a user runs it)
against a real daemon and its TLS operator listener.

One daemon serves the whole module (starting one is slow on a small machine); every
test pairs its own devices, each with its own CLI config home.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import ssl
import stat
import string
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx
import msgspec
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from skulk_cli.operator_client import certificate_fingerprint, pinned_context
from skulk_cli.operator_credentials import CredentialStore
from skulk_core.operator.bounds import SESSION_TTL
from skulk_core.operator.package import (
    DirectPackage,
    InvitationPackage,
    decode_pairing_uri,
    encode_pairing_uri,
)
from tests.daemon_process import DaemonProcess, free_port

pytestmark = pytest.mark.slow

PAYLOAD_LINE = re.compile(r"^skulk://pair\?\S+$", re.MULTILINE)
LISTENER_WAIT_SECONDS = 30.0


class Gateway:
    """The module's daemon, its operator listener, and a way to run the CLI against it."""

    def __init__(self, daemon: DaemonProcess, operator_port: int, root: Path) -> None:
        self.daemon = daemon
        self.operator_port = operator_port
        self.root = root
        self.operator_url = f"https://127.0.0.1:{operator_port}"
        self._homes = 0

    def new_home(self) -> Path:
        """A fresh CLI config home: one paired device."""
        self._homes += 1
        return self.root / f"device-{self._homes}"

    def skulk(
        self, *args: str, home: Path | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "COLUMNS": "120", "SKULK_CONFIG_HOME": str(home or self.root / "x")}
        env.pop("SKULK_API_URL", None)
        env.pop("SKULK_DATA_DIR", None)
        return subprocess.run(
            [sys.executable, "-m", "skulk_cli", "--api-url", self.daemon.url, *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def pair(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.skulk(
            "operator",
            "pair",
            "--data-dir",
            str(self.daemon.data_dir),
            "--exchange-url",
            self.operator_url,
            *args,
        )

    def invitations(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.skulk("operator", "invitations", *args, "--data-dir", str(self.daemon.data_dir))

    def wait_for_listener(self) -> None:
        deadline = time.monotonic() + LISTENER_WAIT_SECONDS
        while time.monotonic() < deadline:
            try:
                ssl.get_server_certificate(("127.0.0.1", self.operator_port), timeout=1.0)
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"no operator listener on {self.operator_port}:\n{self.log()}")

    def listener_certificate(self) -> str:
        return ssl.get_server_certificate(("127.0.0.1", self.operator_port), timeout=5.0)

    def log(self) -> str:
        return self.daemon.log_text()[-4000:]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path) -> Iterator[Gateway]:
    root = tmp_path_factory.mktemp("operator-gateway")
    operator_port = free_port()
    daemon = DaemonProcess(
        root=root / "node",
        models_dir=shared_models_dir,
        extra_args=["--operator-api-port", str(operator_port)],
    )
    daemon.start()
    try:
        yield Gateway(daemon, operator_port, root)
    finally:
        daemon.kill()


def payload_of(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    found: list[str] = PAYLOAD_LINE.findall(result.stdout)
    assert len(found) == 1, result.stdout
    return found[0]


def stored(home: Path) -> CredentialStore:
    return CredentialStore(home / "operator")


def post_token(gateway: Gateway, device_id: str, refresh_token: str, cert: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.operator_url}/v1/auth/token",
        json={"deviceId": device_id, "refreshToken": refresh_token},
        verify=pinned_context(cert),
        timeout=30.0,
    )


def expire_access(home: Path) -> None:
    """Make the stored access token look expired, as it will be 15 minutes later."""
    store = stored(home)
    current = store.load()
    store.save_tokens(
        msgspec.structs.replace(current, access_expires_at=datetime.now(UTC) - timedelta(seconds=1))
    )


# --- the whole flow -----------------------------------------------------------------


def test_pair_connect_use_rotate_revoke(gateway: Gateway) -> None:
    started = time.time()
    issued = gateway.pair("--cluster-name", "Test   lab")
    payload = payload_of(issued)

    # The terminal shows a QR code, the payload and its expiry.
    assert "▀" in issued.stdout or "▄" in issued.stdout
    assert "Expires" in issued.stdout and "Single use" in issued.stdout

    # The payload decodes back to the spec's fields.
    package = decode_pairing_uri(payload)
    assert isinstance(package, DirectPackage)
    assert package.cluster_name == "Test lab"
    assert package.exchange_url == gateway.operator_url
    assert started + SESSION_TTL - 5 <= package.expires_at <= time.time() + SESSION_TTL + 5
    assert len(package.nonce) == 43
    gateway.wait_for_listener()
    listener_cert = gateway.listener_certificate()
    assert package.fingerprint == certificate_fingerprint(listener_cert)

    # Connect (payload on stdin, kept out of the process list).
    home = gateway.new_home()
    connected = gateway.skulk(
        "operator", "connect", "-", "--device-name", "  test \t laptop ", home=home, stdin=payload
    )
    assert connected.returncode == 0, connected.stderr
    assert "Paired" in connected.stdout and "test laptop" in connected.stdout
    store = stored(home)
    pairing = store.load()
    assert pairing.cluster_id == package.cluster_id
    assert pairing.device_name == "test laptop"
    assert pairing.operator_url == gateway.operator_url
    assert "devices:manage" in pairing.scopes
    assert not any(scope.startswith("plugins:") for scope in pairing.scopes)
    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700
    for path in (store.credentials_path, store.certificate_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert certificate_fingerprint(store.certificate_pem()) == package.fingerprint
    for secret in (pairing.access_token, pairing.refresh_token, package.nonce):
        assert secret not in connected.stdout + connected.stderr

    # The session was single-use: the same payload pairs nothing else.
    replay = gateway.skulk("operator", "connect", payload, home=gateway.new_home())
    assert replay.returncode == 1
    assert "refused the pairing" in replay.stderr

    # Any command, through the operator listener over pinned TLS with the bearer.
    node_id = gateway.daemon.get("/node_id").json()
    status = gateway.skulk("--operator", "status", home=home)
    assert status.returncode == 0, status.stderr
    assert node_id[:8] in status.stdout
    models = gateway.skulk("--operator", "--json", "models", "list", home=home)
    assert models.returncode == 0, models.stderr
    assert json.loads(models.stdout)["data"]
    # The listener itself refuses a request without a bearer, and an invalid one.
    verify = pinned_context(listener_cert)
    assert httpx.get(f"{gateway.operator_url}/state", verify=verify).status_code == 401
    forged = {"Authorization": "Bearer " + "A" * 43}
    assert (
        httpx.get(f"{gateway.operator_url}/state", headers=forged, verify=verify).status_code == 401
    )

    # Rotation before expiry: both tokens replaced, in the one file.
    old = store.load()
    expire_access(home)
    rotated = gateway.skulk("--operator", "status", home=home)
    assert rotated.returncode == 0, rotated.stderr
    new = store.load()
    assert new.access_token != old.access_token and new.refresh_token != old.refresh_token
    assert new.access_expires_at > datetime.now(UTC) + timedelta(minutes=10)
    assert stat.S_IMODE(store.credentials_path.stat().st_mode) == 0o600
    # The old pair is dead: the refresh token cannot be replayed, the access token is refused.
    replayed = post_token(gateway, old.device_id, old.refresh_token, listener_cert)
    assert replayed.status_code == 401
    stale = {"Authorization": f"Bearer {old.access_token}"}
    assert (
        httpx.get(f"{gateway.operator_url}/state", headers=stale, verify=verify).status_code == 401
    )

    # Two commands that both find the token expiring share one rotation.
    expire_access(home)
    both = [
        subprocess.Popen(
            [sys.executable, "-m", "skulk_cli", "--operator", "--json", "models", "list"],
            env={**os.environ, "SKULK_CONFIG_HOME": str(home)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outcomes = [(p.communicate(timeout=120)[1], p.returncode) for p in both]
    assert [code for _, code in outcomes] == [0, 0], outcomes

    # The device list marks this device; revoking it ends access at once.
    listed = gateway.skulk("operator", "devices", "list", home=home)
    assert listed.returncode == 0, listed.stderr
    assert f"{pairing.device_id} *" in listed.stdout and "test laptop" in listed.stdout
    revoked = gateway.skulk("operator", "devices", "revoke", pairing.device_id, home=home)
    assert revoked.returncode == 0, revoked.stderr
    assert "own pairing" in revoked.stdout

    after = gateway.skulk("--operator", "status", home=home)
    assert after.returncode == 1
    assert "no longer accepts" in after.stderr and "Pair again" in after.stderr
    # A rotation attempt is refused too, and still never falls back to direct access.
    expire_access(home)
    refused = gateway.skulk("--operator", "status", home=home)
    assert refused.returncode == 1
    assert "refused to renew" in refused.stderr and "Pair again" in refused.stderr
    assert node_id[:8] not in refused.stdout

    # Disconnect forgets the local credentials.
    gone = gateway.skulk("operator", "disconnect", home=home)
    assert gone.returncode == 0
    assert not store.credentials_path.exists() and not store.certificate_path.exists()


# --- invitations --------------------------------------------------------------------


def test_pair_names_the_operator_port_the_node_really_uses(gateway: Gateway) -> None:
    # The daemon runs with --operator-api-port on a free (non-default) port; `pair`
    # without --exchange-url must name that port, so `connect` reaches the listener.
    data_dir = str(gateway.daemon.data_dir)
    issued = subprocess.run(
        [sys.executable, "-m", "skulk_cli", "operator", "pair", "--data-dir", data_dir],
        # A narrow pipe: the payload still comes out as one whole line.
        env={**os.environ, "COLUMNS": "40", "SKULK_CONFIG_HOME": str(gateway.root / "x")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    payload = payload_of(issued)
    package = decode_pairing_uri(payload)
    assert package.exchange_url == gateway.operator_url
    assert f"Pairs via    {gateway.operator_url}" in issued.stdout

    gateway.wait_for_listener()  # a node that just became a gateway binds within a second
    home = gateway.new_home()
    connected = gateway.skulk("operator", "connect", "-", home=home, stdin=payload)
    assert connected.returncode == 0, connected.stderr + gateway.log()
    assert stored(home).load().operator_url == gateway.operator_url
    listed = gateway.skulk("--operator", "--json", "models", "list", home=home)
    assert listed.returncode == 0, listed.stderr


def test_invitation_pairs_up_to_its_limit_and_writes_an_owner_only_png(
    gateway: Gateway, tmp_path: Path
) -> None:
    png_path = tmp_path / "invite.png"
    issued = gateway.pair("--valid-for", "10m", "--max-pairings", "2", "--qr-output", str(png_path))
    payload = payload_of(issued)
    package = decode_pairing_uri(payload)
    assert isinstance(package, InvitationPackage)
    assert package.max_pairings == 2
    assert package.invitation_id in issued.stdout
    assert 590 <= package.expires_at - package.issued_at <= 600

    assert stat.S_IMODE(png_path.stat().st_mode) == 0o600
    assert png_path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    # Never over an existing path, and then nothing is created on the gateway.
    before = json.loads(gateway.invitations("list", "--json").stdout)["invitations"]
    again = gateway.pair("--max-pairings", "1", "--qr-output", str(png_path))
    assert again.returncode == 1
    assert "already exists" in again.stderr
    assert json.loads(gateway.invitations("list", "--json").stdout)["invitations"] == before

    gateway.wait_for_listener()
    homes = [gateway.new_home() for _ in range(3)]
    for number, home in enumerate(homes[:2]):
        done = gateway.skulk(
            "operator", "connect", payload, "--device-name", f"phone {number}", home=home
        )
        assert done.returncode == 0, done.stderr
        use = gateway.skulk("--operator", "models", "list", home=home)
        assert use.returncode == 0, use.stderr
    third = gateway.skulk("operator", "connect", payload, home=homes[2])
    assert third.returncode == 1
    assert "HTTP 410" in third.stderr
    assert not stored(homes[2]).credentials_path.exists()

    listing = gateway.invitations("list")
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if package.invitation_id[:8] in line)
    assert "2/2" in row and "exhausted" in row
    as_json = gateway.invitations("list", "--json")
    for output in (listing.stdout, as_json.stdout):
        assert package.nonce not in output and payload not in output

    revoked = gateway.invitations("revoke", package.invitation_id)
    assert revoked.returncode == 0, revoked.stderr
    # Revoking the invitation does not disconnect the devices that already paired.
    still = gateway.skulk("--operator", "status", home=homes[0])
    assert still.returncode == 0, still.stderr


def test_invitation_bounds_are_refused_in_one_line(gateway: Gateway) -> None:
    for args in (("--valid-for", "91d"), ("--valid-for", "30s"), ("--max-pairings", "21")):
        refused = gateway.pair(*args)
        assert refused.returncode == 1, refused.stdout
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "Traceback" not in refused.stderr
    assert gateway.invitations("revoke", "not-an-invitation").returncode == 1


def test_an_over_budget_package_is_refused_with_nothing_persisted(
    gateway: Gateway, tmp_path: Path
) -> None:
    # Random characters do not compress, so the package cannot fit the QR budget.
    noise = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(900))
    long_url = f"https://127.0.0.1:1/{noise}"
    fresh = tmp_path / "fresh-data"

    on_fresh_host = gateway.skulk(
        "operator", "pair", "--data-dir", str(fresh), "--exchange-url", long_url
    )
    assert on_fresh_host.returncode == 1
    assert "budget" in on_fresh_host.stderr
    assert not (fresh / "operator" / "authority.store").exists()

    before = json.loads(gateway.invitations("list", "--json").stdout)["invitations"]
    on_gateway = gateway.skulk(
        "operator",
        "pair",
        "--data-dir",
        str(gateway.daemon.data_dir),
        "--exchange-url",
        long_url,
        "--max-pairings",
        "1",
    )
    assert on_gateway.returncode == 1
    assert "budget" in on_gateway.stderr
    assert json.loads(gateway.invitations("list", "--json").stdout)["invitations"] == before


# --- pinning ------------------------------------------------------------------------


class _Impostor:
    """A TLS server with a key of its own, recording whatever reaches it."""

    def __init__(self, directory: Path) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Skulk operator gateway")])
        now = datetime.now(UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(days=1))
            .sign(key, hashes.SHA256())
        )
        cert_path, key_path = directory / "impostor.crt", directory / "impostor.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        self.requests: list[str] = []
        requests = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                requests.append(self.path)
                self.send_response(500)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_path, key_path)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def test_connect_never_sends_the_nonce_to_a_server_without_the_pinned_key(
    gateway: Gateway, tmp_path: Path
) -> None:
    package = decode_pairing_uri(payload_of(gateway.pair()))
    impostor = _Impostor(tmp_path)
    try:
        redirected = encode_pairing_uri(msgspec.structs.replace(package, exchange_url=impostor.url))
        home = gateway.new_home()

        result = gateway.skulk("operator", "connect", redirected, home=home)
    finally:
        impostor.close()

    assert result.returncode == 1
    assert "fingerprint" in result.stderr and "nothing was sent" in result.stderr
    assert impostor.requests == []
    assert not stored(home).credentials_path.exists()


def test_operator_mode_refuses_a_listener_that_swapped_its_certificate(
    gateway: Gateway, tmp_path: Path
) -> None:
    gateway.wait_for_listener()
    home = gateway.new_home()
    assert (
        gateway.skulk("operator", "connect", payload_of(gateway.pair()), home=home).returncode == 0
    )
    impostor = _Impostor(tmp_path)
    try:
        # The stored pairing now points at a server with another key.
        store = stored(home)
        store.save_tokens(msgspec.structs.replace(store.load(), operator_url=impostor.url))

        result = gateway.skulk("--operator", "status", home=home)
    finally:
        impostor.close()

    assert result.returncode == 1
    assert "certificate verify failed" in result.stderr
    assert impostor.requests == []
