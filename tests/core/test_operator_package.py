"""The skulk://pair package: exact shapes, round trips, and refusals of anything else."""

from __future__ import annotations

import base64
import contextlib
import json
import zlib
from typing import Any
from urllib.parse import quote

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from skulk_core.operator.encoding import b64url_encode
from skulk_core.operator.package import (
    QR_PAYLOAD_BUDGET,
    DirectPackage,
    InvalidPackage,
    InvitationPackage,
    PackageTooLarge,
    PairingPackage,
    RelayAdmission,
    SessionPackage,
    decode_pairing_uri,
    encode_pairing_uri,
)

CLUSTER = "5f0c6d3e-2b1a-4c8d-9e7f-0a1b2c3d4e5f"
INVITATION = "0b9e8d7c-6a5b-4c3d-8e1f-a2b3c4d5e6f7"
FINGERPRINT = "sha256:" + "F" * 43
NONCE = "N" * 42 + "Q"
APP_CREDENTIAL = "app-role-credential-0123456789"
RELAY = RelayAdmission(
    app_websocket_url="wss://relay.example.com/v1/app",
    routing_locator="route-8f2a",
    app_carrier_credential=APP_CREDENTIAL,
    inner_tls_server_name="localhost",
)


def direct(**changes: Any) -> DirectPackage:
    fields: dict[str, Any] = {
        "cluster_id": CLUSTER,
        "cluster_name": "Home Lab",
        "fingerprint": FINGERPRINT,
        "nonce": NONCE,
        "expires_at": 1_700_000_300,
        "exchange_url": "https://127.0.0.1:52417",
    }
    fields.update(changes)
    return DirectPackage(**fields)


def invitation(**changes: Any) -> InvitationPackage:
    fields: dict[str, Any] = {
        "cluster_id": CLUSTER,
        "cluster_name": "Home Lab",
        "fingerprint": FINGERPRINT,
        "nonce": NONCE,
        "expires_at": 1_700_086_400,
        "exchange_url": "https://gateway.example.invalid",
        "invitation_id": INVITATION,
        "issued_at": 1_700_000_000,
        "max_pairings": 10,
        "relay": RELAY,
    }
    fields.update(changes)
    return InvitationPackage(**fields)


def z_uri(document: object) -> str:
    raw = document if isinstance(document, bytes) else json.dumps(document).encode()
    return "skulk://pair?z=" + b64url_encode(zlib.compress(raw))


def test_version_one_is_uncompressed_query_parameters() -> None:
    assert encode_pairing_uri(direct()) == (
        "skulk://pair?v=1"
        f"&clusterId={CLUSTER}"
        "&clusterName=Home%20Lab"
        "&fingerprint=sha256%3A" + "F" * 43 + f"&nonce={NONCE}"
        "&expiresAt=1700000300"
        "&exchangeUrl=https%3A%2F%2F127.0.0.1%3A52417"
    )


def test_versions_two_and_three_are_compact_json_in_z() -> None:
    uri = encode_pairing_uri(invitation())
    assert uri.startswith("skulk://pair?z=") and "&" not in uri
    document = json.loads(zlib.decompress(_unb64(uri.split("=", 1)[1])))
    assert document == {
        "v": 3,
        "clusterId": CLUSTER,
        "clusterName": "Home Lab",
        "fingerprint": FINGERPRINT,
        "nonce": NONCE,
        "expiresAt": 1_700_086_400,
        "exchangeUrl": "https://gateway.example.invalid",
        "invitationId": INVITATION,
        "issuedAt": 1_700_000_000,
        "maxPairings": 10,
        "relay": {
            "appWebsocketUrl": "wss://relay.example.com/v1/app",
            "routingLocator": "route-8f2a",
            "appCarrierCredential": APP_CREDENTIAL,
            "innerTlsServerName": "localhost",
        },
    }
    session = SessionPackage(
        **{f: getattr(direct(), f) for f in direct().__struct_fields__}, relay=RELAY
    )
    assert decode_pairing_uri(encode_pairing_uri(session)) == session


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_reprs_never_show_the_nonce_or_relay_credential() -> None:
    for package in (direct(), invitation()):
        assert NONCE not in repr(package)
        assert APP_CREDENTIAL not in repr(package)


def test_no_package_field_can_hold_a_gateway_credential_or_token() -> None:
    names: set[str] = set()
    for struct in (DirectPackage, SessionPackage, InvitationPackage, RelayAdmission):
        names |= set(struct.__struct_fields__)
    assert not [n for n in names if "gateway_carrier" in n or "token" in n or "refresh" in n]
    assert "gatewayCarrierCredential" not in json.dumps(msgspec.to_builtins(invitation()))


def test_over_budget_is_refused_when_encoding() -> None:
    noise = b64url_encode(bytes(range(256)) * 3)  # incompressible enough
    with pytest.raises(PackageTooLarge):
        encode_pairing_uri(invitation(exchange_url="https://gateway.example.invalid/" + noise))
    with pytest.raises(PackageTooLarge):
        encode_pairing_uri(direct(exchange_url="https://gateway.example.invalid/" + "a" * 900))
    # The same long but repetitive URL compresses under the budget in a v3 package.
    assert encode_pairing_uri(invitation(exchange_url="https://g.example/" + "a" * 900))


# -- refusals ---------------------------------------------------------------------------

VALID_V3 = json.loads(zlib.decompress(_unb64(encode_pairing_uri(invitation()).split("=", 1)[1])))


@pytest.mark.parametrize(
    "uri",
    [
        "",
        "hello",
        "https://example.com/?z=abc",
        "skulk://pair?",
        "skulk://pair/?v=1",
        "skulk://pair?z=",
        "skulk://pair?z=!!!!",
        "skulk://pair?z=" + b64url_encode(b"not zlib at all"),
        z_uri(b"not json"),
        z_uri(b"[]"),
        z_uri({**VALID_V3, "v": 1}),
        z_uri({**VALID_V3, "v": 4}),
        z_uri({**VALID_V3, "v": "3"}),
        z_uri({**VALID_V3, "unexpected": True}),
        z_uri({**VALID_V3, "gatewayCarrierCredential": "x"}),
        z_uri({k: v for k, v in VALID_V3.items() if k != "invitationId"}),
        z_uri({**VALID_V3, "nonce": "short"}),
        z_uri({**VALID_V3, "maxPairings": 21}),
        z_uri({**VALID_V3, "maxPairings": 0}),
        z_uri({**VALID_V3, "issuedAt": VALID_V3["expiresAt"] + 1}),
        z_uri({**VALID_V3, "clusterId": CLUSTER.upper()}),
        z_uri({**VALID_V3, "clusterName": "  padded  "}),
        z_uri({**VALID_V3, "clusterName": ""}),
        z_uri({**VALID_V3, "fingerprint": "md5:abc"}),
        z_uri({**VALID_V3, "exchangeUrl": "http://gateway.example.invalid"}),
        z_uri(
            {
                **VALID_V3,
                "relay": {**VALID_V3["relay"], "appWebsocketUrl": "ws://relay.example.com/v1/app"},
            }
        ),
        z_uri(
            {
                **VALID_V3,
                "relay": {**VALID_V3["relay"], "appWebsocketUrl": "wss://relay.example.com/other"},
            }
        ),
        z_uri({**VALID_V3, "relay": {**VALID_V3["relay"], "innerTlsServerName": "not a host"}}),
        "skulk://pair?z=" + b64url_encode(zlib.compress(b" " * 100_000)),  # inflation bomb
        "skulk://pair?z=" + b64url_encode(zlib.compress(json.dumps(VALID_V3).encode()) + b"x"),
        "skulk://pair?z=" + b64url_encode(zlib.compress(json.dumps(VALID_V3).encode())[:-4]),
        "skulk://pair?z=" + b64url_encode(zlib.compress(json.dumps(VALID_V3).encode())) + "&z=a",
        encode_pairing_uri(direct()).replace("v=1", "v=2"),
        encode_pairing_uri(direct()).replace("v=1&", ""),
        encode_pairing_uri(direct()) + "&extra=1",
        encode_pairing_uri(direct()) + "&nonce=" + NONCE,
        encode_pairing_uri(direct()).replace("expiresAt=1700000300", "expiresAt=-1"),
        encode_pairing_uri(direct()).replace("expiresAt=1700000300", "expiresAt=1e9"),
        encode_pairing_uri(direct())
        .replace("https%3A", "http%3A")
        .replace("127.0.0.1", "10.0.0.1"),
        encode_pairing_uri(direct()) + "x" * QR_PAYLOAD_BUDGET,
    ],
)
def test_decode_refuses(uri: str) -> None:
    with pytest.raises(InvalidPackage) as excinfo:
        decode_pairing_uri(uri)
    assert NONCE not in str(excinfo.value) and APP_CREDENTIAL not in str(excinfo.value)


# -- properties ---------------------------------------------------------------------------

_words = st.text(
    alphabet=st.characters(categories=("L", "N", "P", "S"), exclude_characters="\x85"),
    min_size=1,
    max_size=8,
)
cluster_names = (
    st.lists(_words, min_size=1, max_size=4).map(" ".join).filter(lambda name: len(name) <= 64)
)
secrets = st.binary(min_size=32, max_size=32).map(b64url_encode)
# DNS labels: letters, digits and inner hyphens (a label never ends with one).
hosts = st.from_regex(
    r"[a-z](?:[a-z0-9-]{0,19}[a-z0-9])?(\.[a-z][a-z0-9]{0,10}){0,3}", fullmatch=True
)
exchange_urls = st.one_of(
    st.builds(lambda h, p: f"https://{h}:{p}", hosts, st.integers(1, 65535)),
    st.builds(
        lambda h, path: f"https://{h}/{path}",
        hosts,
        st.from_regex(r"[a-z0-9/_-]{0,30}", fullmatch=True),
    ),
    st.sampled_from(["http://127.0.0.1:52417", "http://localhost:9", "http://[::1]:1"]),
)
opaque = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=60
)
relays = st.builds(
    RelayAdmission,
    app_websocket_url=st.builds(lambda h: f"wss://{h}/v1/app", hosts),
    routing_locator=opaque,
    app_carrier_credential=opaque,
    inner_tls_server_name=st.one_of(st.just("localhost"), hosts),
)
common = {
    "cluster_id": st.uuids().map(str),
    "cluster_name": cluster_names,
    "fingerprint": st.binary(min_size=32, max_size=32).map(lambda b: "sha256:" + b64url_encode(b)),
    "nonce": secrets,
    "expires_at": st.integers(0, 2**40),
    "exchange_url": exchange_urls,
}
packages: st.SearchStrategy[PairingPackage] = st.one_of(
    st.builds(DirectPackage, **common),
    st.builds(SessionPackage, **common, relay=st.none() | relays),
    st.builds(
        lambda issued, **kw: InvitationPackage(issued_at=min(issued, kw["expires_at"]), **kw),
        st.integers(0, 2**40),
        **common,
        invitation_id=st.uuids().map(str),
        max_pairings=st.integers(1, 20),
        relay=st.none() | relays,
    ),
)


@given(packages)
def test_every_valid_package_round_trips(package: PairingPackage) -> None:
    uri = encode_pairing_uri(package)
    assert len(uri) <= QR_PAYLOAD_BUDGET
    decoded = decode_pairing_uri(uri)
    assert decoded == package
    assert type(decoded) is type(package)


@given(st.text(max_size=300))
def test_arbitrary_text_decodes_or_is_refused_cleanly(text: str) -> None:
    for candidate in (text, "skulk://pair?" + text, "skulk://pair?z=" + text):
        with contextlib.suppress(InvalidPackage):
            decode_pairing_uri(candidate)


@given(st.binary(max_size=400))
def test_arbitrary_compressed_bytes_are_refused_cleanly(raw: bytes) -> None:
    for candidate in (raw, zlib.compress(raw)):
        with pytest.raises(InvalidPackage):
            decode_pairing_uri("skulk://pair?z=" + b64url_encode(candidate))


def test_percent_encoded_values_survive_version_one() -> None:
    package = direct(cluster_name="R&D = \u72d0 lab?", exchange_url="https://gw.example/a/b")
    uri = encode_pairing_uri(package)
    assert quote("R&D", safe="") in uri
    assert decode_pairing_uri(uri) == package
