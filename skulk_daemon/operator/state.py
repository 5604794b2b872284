"""The authority's records, as they live (encrypted) in the store.

Mutable Structs: a transaction decodes a private copy, changes it and commits it whole.
Nothing here holds a raw token or nonce: only their one-way digests
(:func:`skulk_core.operator.encoding.secret_digest`).
"""

from __future__ import annotations

import msgspec


class _Record(msgspec.Struct, kw_only=True):
    def __repr__(self) -> str:
        # NOTE: records hold digests, challenges, keys and credentials; keep them out of
        # any repr that could reach a log or a traceback.
        return f"{type(self).__name__}(...)"


class SessionRecord(_Record, kw_only=True):
    """A legacy single-use session, keyed in the state by its nonce digest."""

    session_id: str
    created_at: float
    expires_at: float
    device_name: str | None = None
    device_public_key: str | None = None
    challenge: str | None = None
    consumed: bool = False


class AttemptRecord(_Record, kw_only=True):
    attempt_id: str
    created_at: float
    expires_at: float
    device_name: str
    device_public_key: str
    challenge: str
    consumed: bool = False


class InvitationRecord(_Record, kw_only=True):
    invitation_id: str
    nonce_digest: str
    created_at: float
    expires_at: float
    max_pairings: int
    successful_pairings: int = 0
    issued_attempts: int = 0
    revoked_at: float | None = None
    attempts: dict[str, AttemptRecord] = msgspec.field(default_factory=dict)


class DeviceRecord(_Record, kw_only=True):
    device_id: str
    device_name: str
    public_key: str
    paired_at: float
    scopes: list[str]
    access_digest: str | None = None
    access_expires_at: float | None = None
    refresh_digest: str | None = None
    refresh_expires_at: float | None = None
    revoked_at: float | None = None
    invitation_id: str | None = None
    plugin_grant_revision: int = 0
    """The fence of this device's plugin grants (``/v1/auth/plugin-grants``)."""


class TlsRecord(_Record, kw_only=True):
    """The pinned TLS identity: a self-signed certificate and its owner-only key."""

    cert_pem: str
    key_pem: str
    fingerprint: str


class RelayRecord(_Record, kw_only=True):
    """The validated provisioning file, canonical JSON, re-validated on every read."""

    provisioning_json: bytes
    version: int
    configured_at: float


class AuthorityState(_Record, kw_only=True):
    format: int = 1
    cluster_id: str
    cluster_name: str
    created_at: float
    tls: TlsRecord
    operator_api_port: int | None = None
    relay: RelayRecord | None = None
    sessions: dict[str, SessionRecord] = msgspec.field(default_factory=dict)
    invitations: dict[str, InvitationRecord] = msgspec.field(default_factory=dict)
    devices: dict[str, DeviceRecord] = msgspec.field(default_factory=dict)
