"""Assembling what a gateway hands out: pairing packages and one-time relay material.

Only app-role relay material ever leaves through here; the gateway-role carrier
credential and the connector authority stay in the store.
"""

from __future__ import annotations

from typing import Final

from skulk_core.operator.package import (
    DirectPackage,
    InvitationPackage,
    PackageTooLarge,
    PairingPackage,
    RelayAdmission,
    SessionPackage,
    encode_pairing_uri,
)
from skulk_core.operator.relay import ProvisioningError, RelayProvisioning, parse_provisioning
from skulk_daemon.operator.errors import Invalid, StoreCorrupt
from skulk_daemon.operator.results import RemoteAccess
from skulk_daemon.operator.state import AuthorityState
from skulk_daemon.operator.tls import INNER_TLS_SERVER_NAME

DEFAULT_OPERATOR_API_PORT: Final = 52417


def build_package(
    state: AuthorityState,
    *,
    nonce: str,
    expires_at: float,
    exchange_url: str | None,
    invitation: tuple[str, int, int] | None = None,
    listener_port: int | None = None,
) -> PairingPackage:
    """The package for a session (v1 direct, v2 with relay) or an invitation (v3).

    Without an ``exchange_url`` the package names the loopback operator listener:
    ``listener_port`` (the port the node really serves it on), else the port
    ``configure-relay`` stored, else the default.
    """
    port = listener_port or state.operator_api_port or DEFAULT_OPERATOR_API_PORT
    cluster_id, cluster_name = state.cluster_id, state.cluster_name
    fingerprint, expires = state.tls.fingerprint, int(expires_at)
    url = exchange_url or f"https://127.0.0.1:{port}"
    relay = relay_admission(state)
    if invitation is not None:
        invitation_id, issued_at, max_pairings = invitation
        return InvitationPackage(
            cluster_id=cluster_id,
            cluster_name=cluster_name,
            fingerprint=fingerprint,
            nonce=nonce,
            expires_at=expires,
            exchange_url=url,
            invitation_id=invitation_id,
            issued_at=issued_at,
            max_pairings=max_pairings,
            relay=relay,
        )
    if relay is not None:
        return SessionPackage(
            cluster_id=cluster_id,
            cluster_name=cluster_name,
            fingerprint=fingerprint,
            nonce=nonce,
            expires_at=expires,
            exchange_url=url,
            relay=relay,
        )
    return DirectPackage(
        cluster_id=cluster_id,
        cluster_name=cluster_name,
        fingerprint=fingerprint,
        nonce=nonce,
        expires_at=expires,
        exchange_url=url,
    )


def encode(package: PairingPackage) -> str:
    try:
        return encode_pairing_uri(package)
    except PackageTooLarge as exc:
        raise Invalid(str(exc)) from None


def _provisioning(state: AuthorityState) -> RelayProvisioning | None:
    if state.relay is None:
        return None
    try:
        return parse_provisioning(state.relay.provisioning_json)
    except ProvisioningError:
        raise StoreCorrupt("the stored relay provisioning no longer validates") from None


def relay_admission(state: AuthorityState) -> RelayAdmission | None:
    provisioning = _provisioning(state)
    if provisioning is None:
        return None
    return RelayAdmission(
        app_websocket_url=provisioning.app_websocket_url,
        routing_locator=provisioning.routing_locator,
        app_carrier_credential=provisioning.app_carrier_credential,
        inner_tls_server_name=INNER_TLS_SERVER_NAME,
    )


def remote_access(state: AuthorityState) -> RemoteAccess | None:
    provisioning = _provisioning(state)
    if provisioning is None:
        return None
    return RemoteAccess(
        app_websocket_url=provisioning.app_websocket_url,
        routing_locator=provisioning.routing_locator,
        app_carrier_credential=provisioning.app_carrier_credential,
        inner_tls_server_name=INNER_TLS_SERVER_NAME,
        gateway_ca_certificate_pem=state.tls.cert_pem,
    )
