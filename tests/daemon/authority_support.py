"""Shared pieces for the authority tests: a real Ed25519 device and relay provisioning."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from skulk_core.operator.encoding import b64url_encode
from skulk_core.operator.package import decode_pairing_uri
from skulk_core.operator.transcripts import (
    pairing_invitation_signature_message,
    pairing_signature_message,
)
from skulk_daemon.operator.clock import ManualClock
from skulk_daemon.operator.results import ExchangeResult
from skulk_daemon.operator.service import OperatorPairingService

START = 1_750_000_000.0
APP_CREDENTIAL = "app-carrier-credential-SECRET-0123456789"
GATEWAY_CREDENTIAL = "gateway-carrier-credential-SECRET-9876543210"


@dataclass
class Device:
    """A pairing client holding a real Ed25519 key."""

    key: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)

    @property
    def public_key(self) -> str:
        raw = self.key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return b64url_encode(raw)

    def sign_legacy(self, cluster_id: str, nonce: str, challenge: str) -> str:
        return b64url_encode(self.key.sign(pairing_signature_message(cluster_id, nonce, challenge)))

    def sign_invitation(
        self, cluster_id: str, invitation_id: str, nonce: str, attempt_id: str, challenge: str
    ) -> str:
        message = pairing_invitation_signature_message(
            cluster_id, invitation_id, nonce, attempt_id, challenge
        )
        return b64url_encode(self.key.sign(message))


def make_service(
    tmp_path: Path, clock: ManualClock | None = None
) -> tuple[OperatorPairingService, ManualClock]:
    clock = clock or ManualClock(START)
    service = OperatorPairingService.open(tmp_path, clock=clock)
    service.initialize("Test Cluster")
    return service, clock


def pair_legacy(service: OperatorPairingService, name: str = "phone") -> ExchangeResult:
    """Run the whole legacy flow with a fresh device key."""
    package = decode_pairing_uri(service.create_session().uri)
    device = Device()
    challenge = service.challenge(package.nonce, name, device.public_key)
    signature = device.sign_legacy(package.cluster_id, package.nonce, challenge.challenge)
    return service.exchange(package.nonce, signature)


def provisioning_v1(**changes: Any) -> bytes:
    document: dict[str, Any] = {
        "version": 1,
        "app_websocket_url": "wss://relay.example.com/v1/app",
        "gateway_websocket_url": "wss://relay.example.com/v1/gateway",
        "routing_locator": "route-8f2a",
        "app_carrier_credential": APP_CREDENTIAL,
        "gateway_carrier_credential": GATEWAY_CREDENTIAL,
    }
    document.update(changes)
    return json.dumps(document).encode()


CONNECTOR_KEY_B64 = base64.b64encode(
    Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
).decode()


def provisioning_v2() -> bytes:
    return json.dumps(
        {
            "version": 2,
            "app_websocket_url": "wss://relay.example.com/v1/app",
            "gateway_control_websocket_url": "wss://relay.example.com/v2/gateway/control",
            "gateway_data_websocket_url": "wss://relay.example.com/v2/gateway/data",
            "routing_locator": "route-8f2a",
            "app_carrier_credential": APP_CREDENTIAL,
            "gateway_carrier_credential": GATEWAY_CREDENTIAL,
            "connector_authority_private_key_pkcs8": CONNECTOR_KEY_B64,
            "connector_authority_key_id": "kid-1",
            "connector_region": "eu-central",
            "connector_authority_epoch": 1,
        }
    ).encode()
