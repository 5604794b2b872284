"""Pairing a device the way a phone does, for tests: host tool, Ed25519 key, HTTP.

The host side runs ``python -m skulk_daemon.operator`` exactly as ``skulk operator``
does; the device side is a real Ed25519 key signing the shared transcripts, talking
plain HTTP to the main port or TLS (pinned to the gateway certificate) to the operator
listener.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from skulk_core.operator.encoding import b64url_encode
from skulk_core.operator.package import InvitationPackage, decode_pairing_uri
from skulk_core.operator.transcripts import (
    pairing_invitation_signature_message,
    pairing_signature_message,
)
from skulk_daemon.operator.clock import ManualClock
from skulk_daemon.operator.service import AUTHORITY_DIR, OperatorPairingService
from skulk_daemon.operator.store import AuthorityStore
from tests import log_secrets

CHALLENGE = "/v1/auth/pairing-sessions/challenge"
EXCHANGE = "/v1/auth/pairing-sessions/exchange"
TOKEN = "/v1/auth/token"
DEVICES = "/v1/auth/devices"
INVITATIONS = "/v1/auth/pairing-invitations"
LISTENER_TIMEOUT_SECONDS = 30.0


def host_tool(data_dir: Path, *args: str, check: bool = True) -> dict[str, Any]:
    """Run the host tool against ``data_dir``; its one JSON object (exit 0 unless not
    ``check``)."""
    result = subprocess.run(
        [sys.executable, "-m", "skulk_daemon.operator", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    body: dict[str, Any] = json.loads(result.stdout)
    return body


def gateway_cert(data_dir: Path) -> str:
    """The pinned certificate the operator listener serves (written owner-only)."""
    return (data_dir / "operator" / "gateway-tls.crt").read_text()


def pinned_client(port: int, cert_pem: str, **kwargs: Any) -> httpx.Client:
    """An HTTPS client trusting exactly the gateway's self-signed certificate."""
    context = ssl.create_default_context(cadata=cert_pem)
    return httpx.Client(
        base_url=f"https://127.0.0.1:{port}", verify=context, timeout=30.0, **kwargs
    )


def wait_for_listener(port: int, cert_pem: str) -> None:
    """Until the operator listener answers over pinned TLS (it starts within ~2 s)."""
    deadline = time.monotonic() + LISTENER_TIMEOUT_SECONDS
    with pinned_client(port, cert_pem) as client:
        while True:
            try:
                client.get("/node_id")
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


@dataclass
class Device:
    """A phone-like device: an Ed25519 key and, once paired, its credentials."""

    name: str = "Test phone"
    key: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)
    credentials: dict[str, Any] = field(default_factory=dict)

    @property
    def public_key(self) -> str:
        return b64url_encode(self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))

    def sign(self, message: bytes) -> str:
        return b64url_encode(self.key.sign(message))

    @property
    def device_id(self) -> str:
        return str(self.credentials["deviceId"])

    @property
    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.credentials['accessToken']}"}


def challenge(client: httpx.Client, uri: str, device: Device) -> httpx.Response:
    package = decode_pairing_uri(uri)
    body: dict[str, Any] = {
        "nonce": package.nonce,
        "deviceName": device.name,
        "devicePublicKey": device.public_key,
    }
    if isinstance(package, InvitationPackage):
        body["invitationId"] = package.invitation_id
    return client.post(CHALLENGE, json=body)


def proof(uri: str, device: Device, challenged: dict[str, Any]) -> dict[str, Any]:
    """The exchange body: the device's signature over the package's transcript."""
    package = decode_pairing_uri(uri)
    if isinstance(package, InvitationPackage):
        message = pairing_invitation_signature_message(
            package.cluster_id,
            package.invitation_id,
            package.nonce,
            challenged["attemptId"],
            challenged["challenge"],
        )
        return {
            "nonce": package.nonce,
            "signature": device.sign(message),
            "invitationId": package.invitation_id,
            "attemptId": challenged["attemptId"],
        }
    message = pairing_signature_message(package.cluster_id, package.nonce, challenged["challenge"])
    return {"nonce": package.nonce, "signature": device.sign(message)}


def pair(client: httpx.Client, uri: str, device: Device) -> Device:
    """Challenge and exchange; the device keeps the issued credentials."""
    challenged = challenge(client, uri, device)
    assert challenged.status_code == 200, challenged.text
    exchanged = client.post(EXCHANGE, json=proof(uri, device, challenged.json()))
    assert exchanged.status_code == 200, exchanged.text
    device.credentials = exchanged.json()
    log_secrets.register("pairing", device.credentials, decode_pairing_uri(uri).nonce)
    return device


def relay_provisioning(
    path: Path, *, credential: str = "app-carrier-credential-0123456789"
) -> Path:
    """A valid version-one Foxlight provisioning file (owner-only, as the spec asks)."""
    document = {
        "version": 1,
        "app_websocket_url": "wss://relay.example.invalid/v1/app",
        "gateway_websocket_url": "wss://relay.example.invalid/v1/gateway",
        "routing_locator": "route-7f3a",
        "app_carrier_credential": credential,
        "gateway_carrier_credential": "gateway-carrier-credential-NEVER-SHARED",
    }
    path.write_text(json.dumps(document))
    path.chmod(0o600)
    log_secrets.register("relay provisioning", document)
    return path


def past_service(data_dir: Path, seconds_ago: float) -> OperatorPairingService:
    """The gateway's own authority, opened in-process with a clock set in the past: what
    it issues now has the lifetimes it would have had then (expired sessions, tokens)."""
    return OperatorPairingService.open(data_dir, clock=ManualClock(time.time() - seconds_ago))


def pair_in_process(service: OperatorPairingService, uri: str, device: Device) -> Device:
    """Pair through the service directly (same transcripts), e.g. at a past time."""
    package = decode_pairing_uri(uri)
    challenged = service.challenge(package.nonce, device.name, device.public_key)
    body = proof(uri, device, msgspec.to_builtins(challenged))
    issued = service.exchange(body["nonce"], body["signature"])
    device.credentials = msgspec.to_builtins(issued)
    log_secrets.register("pairing", device.credentials, package.nonce)
    return device


def set_scopes(data_dir: Path, device_id: str, scopes: list[str]) -> None:
    """Give a paired device other scopes (what an owner grant would change)."""
    with AuthorityStore(data_dir / AUTHORITY_DIR).transaction() as txn:
        assert txn.state is not None
        txn.state.devices[device_id].scopes = scopes
