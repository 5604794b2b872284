"""Relay provisioning: both schemas validated exactly, and no secret in any error."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from skulk_core.operator.relay import (
    ProvisioningError,
    RelayProvisioningV1,
    RelayProvisioningV2,
    parse_provisioning,
)

APP_SECRET = "app-carrier-SECRET-0123456789abcdef"
GATEWAY_SECRET = "gateway-carrier-SECRET-fedcba9876543210"


def _pkcs8(key: Any, encoding: serialization.Encoding) -> bytes:
    return bytes(
        key.private_bytes(encoding, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


CONNECTOR_KEY = Ed25519PrivateKey.generate()
CONNECTOR_DER_B64 = base64.b64encode(_pkcs8(CONNECTOR_KEY, serialization.Encoding.DER)).decode()


def v1(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "version": 1,
        "app_websocket_url": "wss://relay.example.com/v1/app",
        "gateway_websocket_url": "wss://relay.example.com/v1/gateway",
        "routing_locator": "route-8f2a",
        "app_carrier_credential": APP_SECRET,
        "gateway_carrier_credential": GATEWAY_SECRET,
    }
    document.update(changes)
    return {k: v for k, v in document.items() if v is not None}


def v2(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "version": 2,
        "app_websocket_url": "wss://relay.example.com/v1/app",
        "gateway_control_websocket_url": "wss://relay.example.com/v2/gateway/control",
        "gateway_data_websocket_url": "wss://relay.example.com/v2/gateway/data",
        "routing_locator": "route-8f2a",
        "app_carrier_credential": APP_SECRET,
        "gateway_carrier_credential": GATEWAY_SECRET,
        "connector_authority_private_key_pkcs8": CONNECTOR_DER_B64,
        "connector_authority_key_id": "kid-2025-01",
        "connector_region": "eu-central",
        "connector_authority_epoch": 7,
    }
    document.update(changes)
    return {k: v for k, v in document.items() if v is not None}


def parse(document: dict[str, Any]) -> Any:
    return parse_provisioning(json.dumps(document).encode())


def refused(document: dict[str, Any] | bytes) -> str:
    raw = document if isinstance(document, bytes) else json.dumps(document).encode()
    with pytest.raises(ProvisioningError) as excinfo:
        parse_provisioning(raw)
    message = str(excinfo.value)
    for secret in (APP_SECRET, GATEWAY_SECRET, CONNECTOR_DER_B64, "SECRET"):
        assert secret not in message
    return message


def test_version_one_with_the_default_lane_count() -> None:
    parsed = parse(v1())
    assert isinstance(parsed, RelayProvisioningV1)
    assert parsed.lane_count == 4
    assert parse(v1(lane_count=8)).lane_count == 8
    assert APP_SECRET not in repr(parsed)


def test_version_two_with_its_connector_authority() -> None:
    parsed = parse(v2())
    assert isinstance(parsed, RelayProvisioningV2)
    assert parsed.connector_authority_epoch == 7
    assert CONNECTOR_DER_B64 not in repr(parsed) and GATEWAY_SECRET not in repr(parsed)


@pytest.mark.parametrize(
    "key_text",
    [
        _pkcs8(CONNECTOR_KEY, serialization.Encoding.PEM).decode(),
        base64.urlsafe_b64encode(_pkcs8(CONNECTOR_KEY, serialization.Encoding.DER))
        .rstrip(b"=")
        .decode(),
    ],
    ids=["pem", "base64url-der"],  # the key is made per run: ids every worker agrees on
)
def test_connector_key_as_pem_or_base64url(key_text: str) -> None:
    assert isinstance(
        parse(v2(connector_authority_private_key_pkcs8=key_text)), RelayProvisioningV2
    )


def test_loopback_development_may_use_ws() -> None:
    parse(
        v1(
            app_websocket_url="ws://127.0.0.1:8080/v1/app",
            gateway_websocket_url="ws://localhost:8080/v1/gateway",
        )
    )


@pytest.mark.parametrize(
    ("document", "field"),
    [
        (v1(app_websocket_url="ws://relay.example.com/v1/app"), "app_websocket_url"),
        (v1(app_websocket_url="https://relay.example.com/v1/app"), "app_websocket_url"),
        (v1(app_websocket_url="wss://relay.example.com/v1/app/"), "app_websocket_url"),
        (v1(app_websocket_url="wss://relay.example.com/v1/gateway"), "app_websocket_url"),
        (v1(app_websocket_url="wss://relay.example.com/v1/app?x=1"), "app_websocket_url"),
        (v1(app_websocket_url="wss://u:p@relay.example.com/v1/app"), "app_websocket_url"),
        (v1(gateway_websocket_url="wss://relay.example.com/v1/app"), "gateway_websocket_url"),
        (v1(lane_count=0), "lane_count"),
        (v1(lane_count=65), "lane_count"),
        (v1(lane_count="4"), "lane_count"),
        (v1(routing_locator=""), "routing_locator"),
        (v1(routing_locator="has space"), "routing_locator"),
        (v1(app_carrier_credential=None), "app_carrier_credential"),
        (v1(gateway_carrier_credential=APP_SECRET), "gateway_carrier_credential"),
        (v1(connector_region="eu"), "connector_region"),  # a v2 field in a v1 file
        (v1(gateway_control_websocket_url="wss://r/v2/gateway/control"), "gateway_control"),
        (v2(gateway_websocket_url="wss://relay.example.com/v1/gateway"), "gateway_websocket_url"),
        (v2(lane_count=4), "lane_count"),
        (
            v2(gateway_control_websocket_url="wss://relay.example.com/v2/gateway/data"),
            "gateway_control_websocket_url",
        ),
        (
            v2(gateway_data_websocket_url="ws://relay.example.com/v2/gateway/data"),
            "gateway_data_websocket_url",
        ),
        (v2(connector_authority_private_key_pkcs8=None), "connector_authority_private_key_pkcs8"),
        (
            v2(connector_authority_private_key_pkcs8="not-a-key"),
            "connector_authority_private_key_pkcs8",
        ),
        (
            v2(
                connector_authority_private_key_pkcs8=base64.b64encode(
                    _pkcs8(generate_private_key(SECP256R1()), serialization.Encoding.DER)
                ).decode()
            ),
            "connector_authority_private_key_pkcs8",
        ),
        (v2(connector_authority_key_id=None), "connector_authority_key_id"),
        (v2(connector_region=""), "connector_region"),
        (v2(connector_authority_epoch=-1), "connector_authority_epoch"),
        (v2(connector_authority_epoch="1"), "connector_authority_epoch"),
        (v2(gateway_carrier_credential=APP_SECRET), "gateway_carrier_credential"),
    ],
)
def test_refusals_name_the_field_and_never_the_secret(document: dict[str, Any], field: str) -> None:
    assert field in refused(document)


@pytest.mark.parametrize("version", [0, 3, "1", True, None, 1.0])
def test_only_versions_one_and_two(version: object) -> None:
    assert "version" in refused(v1(version=version) if version is not None else {"x": 1})


def test_garbage_and_oversize_files_are_refused() -> None:
    refused(b"not json " + APP_SECRET.encode())
    refused(b"[]")
    refused(b'{"version": 1, "app_carrier_credential": "' + b"A" * 70000 + b'"}')
