"""What the pairing service returns: msgspec Structs whose JSON is the spec's bodies.

Field names are camelCase on the wire (``rename="camel"``); the HTTP layer returns them
as they are. Types carrying secrets redact their ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec


class _Wire(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    pass


class ChallengeResult(_Wire, frozen=True, kw_only=True):
    """``POST /v1/auth/pairing-sessions/challenge``: ``attemptId`` only for invitations."""

    challenge: str
    expires_at: str
    attempt_id: str | None = None

    def __repr__(self) -> str:
        return f"ChallengeResult(expires_at={self.expires_at!r}, attempt_id={self.attempt_id!r})"


class RemoteAccess(_Wire, frozen=True, kw_only=True, omit_defaults=False):
    """One-time relay material returned by an exchange when relay access is configured."""

    transport: Literal["paired_websocket_v1"] = "paired_websocket_v1"
    app_websocket_url: str
    routing_locator: str
    app_carrier_credential: str
    inner_tls_server_name: str
    gateway_ca_certificate_pem: str

    def __repr__(self) -> str:
        return "RemoteAccess(...)"


class TokenGrant(_Wire, frozen=True, kw_only=True):
    """``POST /v1/auth/token``: a fresh pair and the device's unchanged scopes."""

    access_token: str
    access_token_expires_at: str
    refresh_token: str
    refresh_token_expires_at: str
    scopes: list[str]

    def __repr__(self) -> str:
        return f"TokenGrant(access_token_expires_at={self.access_token_expires_at!r}, ...)"


class ExchangeResult(_Wire, frozen=True, kw_only=True):
    """``POST /v1/auth/pairing-sessions/exchange``; ``remoteAccess`` only with a relay."""

    device_id: str
    cluster_id: str
    access_token: str
    access_token_expires_at: str
    refresh_token: str
    refresh_token_expires_at: str
    scopes: list[str]
    remote_access: RemoteAccess | None = None

    def __repr__(self) -> str:
        return f"ExchangeResult(device_id={self.device_id!r}, cluster_id={self.cluster_id!r}, ...)"


class DeviceStatus(_Wire, frozen=True, kw_only=True):
    """One row of ``GET /v1/auth/devices``: no key, digest or credential."""

    device_id: str
    device_name: str
    paired_at: str
    refresh_token_expires_at: str | None
    active: bool
    revoked_at: str | None
    current: bool


InvitationState = Literal["active", "revoked", "exhausted", "expired"]


class InvitationStatus(_Wire, frozen=True, kw_only=True):
    """Safe invitation status: never the nonce, the package or any credential."""

    invitation_id: str
    created_at: str
    expires_at: str
    successful_pairings: int
    max_pairings: int
    active_attempts: int
    total_attempts: int
    state: InvitationState


@dataclass(frozen=True, slots=True)
class PairingIssue:
    """A freshly created session or invitation: ``uri`` is the secret QR payload."""

    kind: Literal["session", "invitation"]
    uri: str
    expires_at: str
    invitation: InvitationStatus | None

    def __repr__(self) -> str:
        return f"PairingIssue(kind={self.kind!r}, expires_at={self.expires_at!r}, uri=<redacted>)"


@dataclass(frozen=True, slots=True)
class DeviceGrant:
    """Who a valid access token belongs to, for the bearer guard."""

    device_id: str
    scopes: frozenset[str]
    expires_at: float


@dataclass(frozen=True, slots=True)
class GatewayIdentity:
    """The gateway's public identity and where its TLS files are (key owner-only)."""

    cluster_id: str
    cluster_name: str
    fingerprint: str
    cert_pem: str
    cert_path: Path
    key_path: Path
    operator_api_port: int | None
    relay_configured: bool
