"""Legacy sessions and invitations, transition by transition, with a settable clock."""

from __future__ import annotations

import json
import secrets
import string
from pathlib import Path

import msgspec
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from skulk_core.operator.encoding import b64url_encode, public_key_fingerprint
from skulk_core.operator.package import (
    DirectPackage,
    InvitationPackage,
    SessionPackage,
    decode_pairing_uri,
)
from skulk_core.operator.relay import parse_provisioning
from skulk_daemon.operator.clock import ManualClock
from skulk_daemon.operator.errors import (
    Conflict,
    Expired,
    Invalid,
    NotGateway,
    Unauthorized,
    Unknown,
)
from skulk_daemon.operator.service import OperatorPairingService
from tests.daemon.authority_support import (
    APP_CREDENTIAL,
    GATEWAY_CREDENTIAL,
    Device,
    make_service,
    provisioning_v1,
)

# -- legacy sessions ----------------------------------------------------------------------


def test_a_legacy_pairing_end_to_end(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    issue = service.create_session()
    package = decode_pairing_uri(issue.uri)
    assert isinstance(package, DirectPackage)
    identity = service.gateway_identity()
    assert package.cluster_id == identity.cluster_id
    assert package.fingerprint == identity.fingerprint
    device = Device()

    challenge = service.challenge(package.nonce, " Ada's   phone ", device.public_key)
    assert challenge.attempt_id is None
    assert set(json.loads(msgspec.json.encode(challenge))) == {"challenge", "expiresAt"}
    signature = device.sign_legacy(package.cluster_id, package.nonce, challenge.challenge)
    result = service.exchange(package.nonce, signature)

    body = json.loads(msgspec.json.encode(result))
    assert set(body) == {
        "deviceId",
        "clusterId",
        "accessToken",
        "accessTokenExpiresAt",
        "refreshToken",
        "refreshTokenExpiresAt",
        "scopes",
    }
    assert body["clusterId"] == identity.cluster_id
    assert body["scopes"] == [
        "cluster:read",
        "models:read",
        "chat:write",
        "operations:write",
        "devices:manage",
    ]
    assert len(result.access_token) == len(result.refresh_token) == 43
    assert service.authenticate(result.access_token).device_id == result.device_id
    [row] = service.list_devices()
    assert row.device_name == "Ada's phone"


def test_the_session_lives_exactly_five_minutes(tmp_path: Path) -> None:
    service, clock = make_service(tmp_path)
    device = Device()
    late = decode_pairing_uri(service.create_session().uri)
    in_time = decode_pairing_uri(service.create_session().uri)
    clock.advance(299)
    challenge = service.challenge(in_time.nonce, "d", device.public_key)
    clock.advance(1)
    with pytest.raises(Expired):
        service.challenge(late.nonce, "d", device.public_key)
    with pytest.raises(Expired):
        service.exchange(
            in_time.nonce,
            device.sign_legacy(in_time.cluster_id, in_time.nonce, challenge.challenge),
        )


def test_unknown_nonces_are_404(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    device = Device()
    for nonce in (b64url_encode(secrets.token_bytes(32)), "short", ""):
        with pytest.raises(Unknown):
            service.challenge(nonce, "d", device.public_key)
        with pytest.raises(Unknown):
            service.exchange(nonce, "A" * 86)


def test_a_second_challenge_an_early_exchange_and_a_reuse_are_409(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    package = decode_pairing_uri(service.create_session().uri)
    device, intruder = Device(), Device()
    with pytest.raises(Conflict):  # exchange before any challenge
        service.exchange(package.nonce, "A" * 86)
    challenge = service.challenge(package.nonce, "d", device.public_key)
    with pytest.raises(Conflict):  # the key is bound: no second challenge, not even by the owner
        service.challenge(package.nonce, "x", intruder.public_key)
    signature = device.sign_legacy(package.cluster_id, package.nonce, challenge.challenge)
    service.exchange(package.nonce, signature)
    with pytest.raises(Conflict):
        service.exchange(package.nonce, signature)
    with pytest.raises(Conflict):
        service.challenge(package.nonce, "d", device.public_key)
    assert len(service.list_devices()) == 1


def test_proofs_that_do_not_verify_are_401_and_do_not_burn_the_session(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    package = decode_pairing_uri(service.create_session().uri)
    device, other = Device(), Device()
    challenge = service.challenge(package.nonce, "d", device.public_key)
    good = device.sign_legacy(package.cluster_id, package.nonce, challenge.challenge)
    bad = [
        other.sign_legacy(package.cluster_id, package.nonce, challenge.challenge),  # other key
        device.sign_legacy(package.cluster_id, package.nonce, "another-challenge"),
        device.sign_legacy(
            "00000000-0000-4000-8000-000000000000", package.nonce, challenge.challenge
        ),
        device.sign_invitation(
            package.cluster_id,
            package.cluster_id,
            package.nonce,
            package.cluster_id,
            challenge.challenge,
        ),
        good[:-2],  # wrong length
        good + "AA",
        good[:-1] + "=",  # not base64url
        "",
    ]
    for signature in bad:
        with pytest.raises(Unauthorized):
            service.exchange(package.nonce, signature)
    assert service.list_devices() == []
    assert service.exchange(package.nonce, good).device_id


@pytest.mark.parametrize(
    "key",
    [
        b64url_encode(bytes(31)),
        b64url_encode(bytes(33)),
        b64url_encode(bytes(32)) + "=",
        "not base64!",
        "",
        b64url_encode(
            Device()
            .key.public_key()
            .public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        ),
    ],
    # One key is made per run: ids every xdist worker agrees on.
    ids=lambda key: key if len(key) < 40 else f"spki-der-{len(key)}",
)
def test_malformed_device_keys_are_422(tmp_path: Path, key: str) -> None:
    service, _ = make_service(tmp_path)
    package = decode_pairing_uri(service.create_session().uri)
    with pytest.raises(Invalid):
        service.challenge(package.nonce, "d", key)
    # The refusal did not consume the session.
    assert service.challenge(package.nonce, "d", Device().public_key).challenge


@pytest.mark.parametrize("name", ["", "   ", "\n\t", "x" * 81, " " + "y" * 81 + " "])
def test_device_names_outside_1_to_80_are_422(tmp_path: Path, name: str) -> None:
    service, _ = make_service(tmp_path)
    package = decode_pairing_uri(service.create_session().uri)
    with pytest.raises(Invalid):
        service.challenge(package.nonce, name, Device().public_key)
    assert service.challenge(package.nonce, "  " + "z" * 80 + "  ", Device().public_key)


def test_a_node_that_is_not_a_gateway_answers_503(tmp_path: Path) -> None:
    service = OperatorPairingService.open(tmp_path)
    assert not service.is_gateway()
    for call in (
        lambda: service.challenge("n", "d", Device().public_key),
        lambda: service.exchange("n", "s"),
        lambda: service.refresh("d", "r"),
        lambda: service.authenticate("a"),
        service.list_devices,
    ):
        with pytest.raises(NotGateway):
            call()
    with pytest.raises(Conflict):  # host-local operations need `pair` to initialize first
        service.create_session()
    assert not (tmp_path / "operator" / "authority.store").exists()


def test_an_over_budget_package_persists_nothing(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    path = tmp_path / "operator" / "authority.store"
    before = path.read_bytes()
    noise = "".join(secrets.choice(string.ascii_letters) for _ in range(900))
    with pytest.raises(Invalid, match="budget"):
        service.create_session(f"https://127.0.0.1:1/{noise}")
    with pytest.raises(Invalid, match="budget"):
        service.create_invitation(3600, 3, f"https://127.0.0.1:1/{noise}")
    assert path.read_bytes() == before

    fresh = OperatorPairingService.open(tmp_path / "fresh")
    with pytest.raises(Invalid, match="budget"):
        fresh.create_session(f"https://127.0.0.1:1/{noise}", cluster_name="New", initialize=True)
    assert not (tmp_path / "fresh" / "operator" / "authority.store").exists()


def test_exchange_urls_must_be_https_except_loopback(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    with pytest.raises(Invalid):
        service.create_session("http://gateway.example.invalid")
    assert decode_pairing_uri(service.create_session("http://127.0.0.1:9").uri).exchange_url == (
        "http://127.0.0.1:9"
    )
    default = decode_pairing_uri(service.create_session().uri)
    assert default.exchange_url == "https://127.0.0.1:52417"


# -- relay --------------------------------------------------------------------------------


def test_relay_packages_and_remote_access(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    service.configure_relay(parse_provisioning(provisioning_v1()), 52417, "Relay Cluster")
    assert service.relay_configured()
    issue = service.create_session()
    package = decode_pairing_uri(issue.uri)
    assert isinstance(package, SessionPackage) and package.relay is not None
    assert package.relay.app_carrier_credential == APP_CREDENTIAL
    assert package.cluster_name == "Relay Cluster"
    assert GATEWAY_CREDENTIAL not in json.dumps(msgspec.to_builtins(package))

    device = Device()
    challenge = service.challenge(package.nonce, "d", device.public_key)
    result = service.exchange(
        package.nonce, device.sign_legacy(package.cluster_id, package.nonce, challenge.challenge)
    )
    remote = json.loads(msgspec.json.encode(result))["remoteAccess"]
    assert remote["transport"] == "paired_websocket_v1"
    assert remote["appWebsocketUrl"] == "wss://relay.example.com/v1/app"
    assert remote["routingLocator"] == "route-8f2a"
    assert remote["appCarrierCredential"] == APP_CREDENTIAL
    assert remote["innerTlsServerName"] == "localhost"
    assert GATEWAY_CREDENTIAL not in json.dumps(remote)
    certificate = x509.load_pem_x509_certificate(remote["gatewayCaCertificatePem"].encode())
    spki = certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert public_key_fingerprint(spki) == package.fingerprint

    invitation = decode_pairing_uri(service.create_invitation(600, 2).uri)
    assert isinstance(invitation, InvitationPackage) and invitation.relay is not None


def test_relay_configuration_is_never_silently_replaced(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    first = parse_provisioning(provisioning_v1())
    service.configure_relay(first, 52417, "C")
    service.configure_relay(first, 52417, "C")  # the same provisioning again: fine
    second = parse_provisioning(provisioning_v1(routing_locator="route-other"))
    with pytest.raises(Conflict):
        service.configure_relay(second, 52417, "C")
    assert decode_pairing_uri(service.create_session().uri).relay.routing_locator == "route-8f2a"  # type: ignore[union-attr]
    service.configure_relay(second, 52417, "C", replace=True)
    assert decode_pairing_uri(service.create_session().uri).relay.routing_locator == "route-other"  # type: ignore[union-attr]


def test_configure_relay_initializes_a_fresh_gateway(tmp_path: Path) -> None:
    service = OperatorPairingService.open(tmp_path, clock=ManualClock(1e9))
    service.configure_relay(parse_provisioning(provisioning_v1()), 52499, "Fresh")
    identity = service.gateway_identity()
    assert identity.relay_configured and identity.operator_api_port == 52499
    assert (
        decode_pairing_uri(service.create_session().uri).exchange_url == "https://127.0.0.1:52499"
    )
    with pytest.raises(Invalid):
        service.configure_relay(parse_provisioning(provisioning_v1()), 0, "Fresh")
