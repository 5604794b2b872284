"""Paired devices and their rotating credentials, as transitions on the authority state.

Tokens are 32 random bytes, unpadded base64url. The state keeps only their one-way
digests and expiries; the raw values leave the gateway once, in the response that
issues them.
"""

from __future__ import annotations

import hmac
import os
import re
import uuid
from typing import Final

from skulk_core.operator.bounds import ACCESS_TTL, REFRESH_TTL, SECRET_BYTES
from skulk_core.operator.encoding import b64url_encode, iso8601_utc, secret_digest
from skulk_core.operator.scopes import PAIRED_SCOPES
from skulk_daemon.operator.errors import Unauthorized, Unknown
from skulk_daemon.operator.results import DeviceGrant, DeviceStatus, TokenGrant
from skulk_daemon.operator.state import AuthorityState, DeviceRecord

ACCESS_PURPOSE: Final = "access-token"
REFRESH_PURPOSE: Final = "refresh-token"
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")
# One message for every refused credential, so a caller learns nothing about which
# check failed (unknown device, revoked, expired, or a replayed refresh token).
REFUSED_CREDENTIAL: Final = "the credential is unknown, revoked, expired or already used"


def new_secret() -> str:
    """32 random bytes from the OS CSPRNG, unpadded base64url (43 characters)."""
    return b64url_encode(os.urandom(SECRET_BYTES))


def _issue_pair(device: DeviceRecord, now: float) -> TokenGrant:
    access, refresh = new_secret(), new_secret()
    device.access_digest = secret_digest(ACCESS_PURPOSE, access)
    device.access_expires_at = now + ACCESS_TTL
    device.refresh_digest = secret_digest(REFRESH_PURPOSE, refresh)
    device.refresh_expires_at = now + REFRESH_TTL
    return TokenGrant(
        access_token=access,
        access_token_expires_at=iso8601_utc(device.access_expires_at),
        refresh_token=refresh,
        refresh_token_expires_at=iso8601_utc(device.refresh_expires_at),
        scopes=list(device.scopes),
    )


def pair_device(
    state: AuthorityState,
    *,
    device_name: str,
    public_key: str,
    now: float,
    invitation_id: str | None,
) -> tuple[DeviceRecord, TokenGrant]:
    """Record a newly paired device and issue its first credential pair."""
    device = DeviceRecord(
        device_id=str(uuid.uuid4()),
        device_name=device_name,
        public_key=public_key,
        paired_at=now,
        scopes=list(PAIRED_SCOPES),
        invitation_id=invitation_id,
    )
    grant = _issue_pair(device, now)
    state.devices[device.device_id] = device
    return device, grant


def rotate(state: AuthorityState, device_id: str, refresh_token: str, now: float) -> TokenGrant:
    """Replace both members of the device's pair; the old refresh token dies with it.

    A replayed (already rotated) refresh token is refused and revokes nothing else: the
    legitimate holder's newer pair stays valid, and an attacker holding a stale token
    cannot use it to lock the owner's device out.
    """
    device = state.devices.get(device_id)
    if (
        device is None
        or device.revoked_at is not None
        or device.refresh_digest is None
        or device.refresh_expires_at is None
        or not _TOKEN_SHAPE.fullmatch(refresh_token)
        or not _digest_matches(device.refresh_digest, secret_digest(REFRESH_PURPOSE, refresh_token))
        or now >= device.refresh_expires_at
    ):
        raise Unauthorized(REFUSED_CREDENTIAL)
    return _issue_pair(device, now)


def authenticate(state: AuthorityState, access_token: str, now: float) -> DeviceGrant:
    """The device an access token belongs to, or :class:`Unauthorized`."""
    if _TOKEN_SHAPE.fullmatch(access_token):
        digest = secret_digest(ACCESS_PURPOSE, access_token)
        for device in state.devices.values():
            if device.access_digest is not None and _digest_matches(device.access_digest, digest):
                expires = device.access_expires_at
                if device.revoked_at is None and expires is not None and now < expires:
                    return DeviceGrant(
                        device_id=device.device_id,
                        scopes=frozenset(device.scopes),
                        expires_at=expires,
                    )
                break
    raise Unauthorized(REFUSED_CREDENTIAL)


def revoke(state: AuthorityState, device_id: str, now: float) -> bool:
    """Clear the device's digests and expiries; ``False`` when it already was revoked."""
    device = state.devices.get(device_id)
    if device is None:
        raise Unknown("no paired device has that id")
    if device.revoked_at is not None:
        return False
    device.access_digest = device.refresh_digest = None
    device.access_expires_at = device.refresh_expires_at = None
    device.revoked_at = now
    return True


def device_status(device: DeviceRecord, caller: str | None, now: float) -> DeviceStatus:
    refresh_expires = device.refresh_expires_at
    active = device.revoked_at is None and refresh_expires is not None and now < refresh_expires
    return DeviceStatus(
        device_id=device.device_id,
        device_name=device.device_name,
        paired_at=iso8601_utc(device.paired_at),
        refresh_token_expires_at=None if refresh_expires is None else iso8601_utc(refresh_expires),
        active=active,
        revoked_at=None if device.revoked_at is None else iso8601_utc(device.revoked_at),
        current=caller is not None and caller == device.device_id,
    )


def _digest_matches(stored: str, presented: str) -> bool:
    return hmac.compare_digest(stored, presented)
