"""Views of what the pairing host tool and the gateway's ``/v1/auth/*`` routes answer.

Like :mod:`skulk_cli.views`: unknown fields are ignored, so a newer gateway still
works. Fields the flow cannot do without (tokens, ids) have no default, so an answer
missing one is reported instead of half-used. Types holding a secret redact ``repr``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec


class _View(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pass


class InvitationStatus(_View, frozen=True, kw_only=True):
    """Safe invitation status: the nonce and package are never part of it."""

    invitation_id: str
    created_at: datetime | None = None
    expires_at: datetime | None = None
    successful_pairings: int = 0
    max_pairings: int = 0
    active_attempts: int = 0
    total_attempts: int = 0
    state: str = "active"


class PairIssued(_View, frozen=True, kw_only=True):
    """``pair``: the secret ``uri`` (the QR payload), its expiry, the invitation if any."""

    kind: Literal["session", "invitation"]
    uri: str
    expires_at: datetime
    invitation: InvitationStatus | None = None

    def __repr__(self) -> str:
        return f"PairIssued(kind={self.kind!r}, uri=<redacted>)"


class InvitationList(_View, frozen=True, kw_only=True):
    invitations: tuple[InvitationStatus, ...] = ()


class RelayConfigured(_View, frozen=True, kw_only=True):
    configured: bool = True
    version: int | None = None


class ChallengeReply(_View, frozen=True, kw_only=True):
    """``POST /v1/auth/pairing-sessions/challenge``; ``attemptId`` only for invitations."""

    challenge: str
    expires_at: datetime | None = None
    attempt_id: str | None = None

    def __repr__(self) -> str:
        return f"ChallengeReply(attempt_id={self.attempt_id!r}, challenge=<redacted>)"


class TokenReply(_View, frozen=True, kw_only=True):
    """A token pair (``/v1/auth/token``, and the core of an exchange)."""

    access_token: str
    access_token_expires_at: datetime
    refresh_token: str
    refresh_token_expires_at: datetime
    scopes: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(tokens=<redacted>)"


class RemoteAccess(_View, frozen=True, kw_only=True):
    """Relay material an exchange returns when the gateway has a relay configured."""

    gateway_ca_certificate_pem: str | None = None

    def __repr__(self) -> str:
        return "RemoteAccess(...)"


class ExchangeReply(TokenReply, frozen=True, kw_only=True):
    """``POST /v1/auth/pairing-sessions/exchange``."""

    device_id: str
    cluster_id: str
    remote_access: RemoteAccess | None = None


class Device(_View, frozen=True, kw_only=True):
    """One row of ``GET /v1/auth/devices``."""

    device_id: str
    device_name: str = ""
    paired_at: datetime | None = None
    refresh_token_expires_at: datetime | None = None
    active: bool = False
    revoked_at: datetime | None = None
    current: bool = False


class DeviceList(_View, frozen=True, kw_only=True):
    devices: tuple[Device, ...] = ()
