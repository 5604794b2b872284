"""Sessions, invitations and their attempts: the challenge/exchange transitions.

Pure functions of (state, inputs, now) that mutate the state they are given or raise an
:class:`AuthorityError`; the service runs each inside one store transaction, so a
refusal writes nothing.

Precedence when several refusals apply: 404 (unknown) before 409 (already used, or out
of order) before 410 (expired, revoked, exhausted) before 401 (the proof).
"""

from __future__ import annotations

import hmac
import math
import re
import uuid
from dataclasses import dataclass
from typing import Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from skulk_core.operator.bounds import (
    ATTEMPT_TTL,
    ED25519_PUBLIC_KEY_BYTES,
    ED25519_SIGNATURE_BYTES,
    MAX_ISSUED_ATTEMPTS,
    MAX_LIVE_ATTEMPTS,
    SESSION_TTL,
    normalize_device_name,
)
from skulk_core.operator.encoding import b64url_decode, iso8601_utc, secret_digest
from skulk_core.operator.transcripts import (
    pairing_invitation_signature_message,
    pairing_signature_message,
)
from skulk_daemon.operator.credentials import new_secret
from skulk_daemon.operator.errors import (
    Conflict,
    Expired,
    Invalid,
    TooManyAttempts,
    Unauthorized,
    Unknown,
)
from skulk_daemon.operator.results import ChallengeResult, InvitationStatus
from skulk_daemon.operator.state import (
    AttemptRecord,
    AuthorityState,
    InvitationRecord,
    SessionRecord,
)

NONCE_PURPOSE = "pairing-nonce"
_SECRET_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")
# Used sessions and finished attempts are kept this long after expiry so a replay still
# answers 409 (not 404) for a while, then pruned so the store stays small.
RETAIN_AFTER_EXPIRY = 24 * 3600
RETAIN_INVITATION_AFTER_EXPIRY = 30 * 24 * 3600
UNKNOWN_NONCE = "no pairing session or invitation matches that nonce"
INVALID_PROOF = "the device proof does not verify"


@dataclass(frozen=True, slots=True)
class ProvenDevice:
    """What a verified exchange hands to credential issuance."""

    device_name: str
    public_key: str
    invitation_id: str | None


def nonce_digest(nonce: str) -> str:
    return secret_digest(NONCE_PURPOSE, nonce)


# creation ------------------------------------------------------------------------------


def add_session(state: AuthorityState, nonce: str, now: float) -> SessionRecord:
    session = SessionRecord(
        session_id=str(uuid.uuid4()), created_at=now, expires_at=now + SESSION_TTL
    )
    state.sessions[nonce_digest(nonce)] = session
    return session


def add_invitation(
    state: AuthorityState, nonce: str, now: float, valid_for_s: int, max_pairings: int
) -> InvitationRecord:
    invitation = InvitationRecord(
        invitation_id=str(uuid.uuid4()),
        nonce_digest=nonce_digest(nonce),
        created_at=now,
        expires_at=now + valid_for_s,
        max_pairings=max_pairings,
    )
    state.invitations[invitation.invitation_id] = invitation
    return invitation


def prune(state: AuthorityState, now: float) -> None:
    """Forget long-expired sessions, attempts and invitations (counters are kept)."""
    horizon = now - RETAIN_AFTER_EXPIRY
    for digest in [d for d, s in state.sessions.items() if s.expires_at < horizon]:
        del state.sessions[digest]
    for invitation in list(state.invitations.values()):
        if invitation.expires_at < now - RETAIN_INVITATION_AFTER_EXPIRY:
            del state.invitations[invitation.invitation_id]
            continue
        for attempt_id in [a for a, r in invitation.attempts.items() if r.expires_at < horizon]:
            del invitation.attempts[attempt_id]


# status --------------------------------------------------------------------------------


def _live_attempts(invitation: InvitationRecord, now: float) -> list[AttemptRecord]:
    if invitation.revoked_at is not None:
        return []
    return [a for a in invitation.attempts.values() if not a.consumed and now < a.expires_at]


def _unavailable_reason(
    invitation: InvitationRecord, now: float
) -> Literal["revoked", "exhausted", "expired"] | None:
    if invitation.revoked_at is not None:
        return "revoked"
    if invitation.successful_pairings >= invitation.max_pairings:
        return "exhausted"
    if now >= invitation.expires_at:
        return "expired"
    return None


def invitation_status(invitation: InvitationRecord, now: float) -> InvitationStatus:
    return InvitationStatus(
        invitation_id=invitation.invitation_id,
        created_at=iso8601_utc(invitation.created_at),
        expires_at=iso8601_utc(invitation.expires_at),
        successful_pairings=invitation.successful_pairings,
        max_pairings=invitation.max_pairings,
        active_attempts=len(_live_attempts(invitation, now)),
        total_attempts=invitation.issued_attempts,
        state=_unavailable_reason(invitation, now) or "active",
    )


def find_invitation(state: AuthorityState, invitation_id: str) -> InvitationRecord:
    invitation = state.invitations.get(invitation_id)
    if invitation is None:
        raise Unknown("no pairing invitation has that id")
    return invitation


# challenge -----------------------------------------------------------------------------


def _device_inputs(device_name: str, device_public_key: str) -> tuple[str, str]:
    try:
        name = normalize_device_name(device_name)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    try:
        raw = b64url_decode(device_public_key)
        if len(raw) != ED25519_PUBLIC_KEY_BYTES:
            raise ValueError
        Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        raise Invalid(
            "devicePublicKey must be one raw 32-byte Ed25519 public key, unpadded base64url"
        ) from None
    return name, device_public_key


def challenge_session(
    state: AuthorityState, nonce: str, device_name: str, device_public_key: str, now: float
) -> ChallengeResult:
    """Bind the device key to a legacy session; a second challenge is a 409."""
    name, key = _device_inputs(device_name, device_public_key)
    session = _find_session(state, nonce)
    if session.consumed or session.challenge is not None:
        raise Conflict("this pairing session was already used")
    if now >= session.expires_at:
        raise Expired("this pairing session has expired")
    session.device_name, session.device_public_key = name, key
    session.challenge = new_secret()
    return ChallengeResult(challenge=session.challenge, expires_at=iso8601_utc(session.expires_at))


def challenge_invitation(
    state: AuthorityState,
    *,
    invitation_id: str,
    nonce: str,
    device_name: str,
    device_public_key: str,
    now: float,
) -> ChallengeResult:
    """Open a new, independent five-minute attempt on an invitation."""
    name, key = _device_inputs(device_name, device_public_key)
    invitation = _find_invitation_by_nonce(state, invitation_id, nonce)
    reason = _unavailable_reason(invitation, now)
    if reason is not None:
        raise Expired(f"this pairing invitation is {reason}")
    if invitation.issued_attempts >= MAX_ISSUED_ATTEMPTS:
        raise Expired(f"this pairing invitation has issued its {MAX_ISSUED_ATTEMPTS} attempts")
    live = _live_attempts(invitation, now)
    if len(live) >= MAX_LIVE_ATTEMPTS:
        oldest = min(a.expires_at for a in live)
        raise TooManyAttempts(
            f"{MAX_LIVE_ATTEMPTS} pairing attempts are already in progress",
            retry_after=max(1, math.ceil(oldest - now)),
        )
    attempt = AttemptRecord(
        attempt_id=str(uuid.uuid4()),
        created_at=now,
        expires_at=min(now + ATTEMPT_TTL, invitation.expires_at),
        device_name=name,
        device_public_key=key,
        challenge=new_secret(),
    )
    invitation.attempts[attempt.attempt_id] = attempt
    invitation.issued_attempts += 1
    return ChallengeResult(
        challenge=attempt.challenge,
        expires_at=iso8601_utc(attempt.expires_at),
        attempt_id=attempt.attempt_id,
    )


# exchange ------------------------------------------------------------------------------


def exchange_session(state: AuthorityState, nonce: str, signature: str, now: float) -> ProvenDevice:
    """Verify the proof over the legacy transcript and consume the session."""
    session = _find_session(state, nonce)
    if session.consumed:
        raise Conflict("this pairing session was already used")
    if session.challenge is None or session.device_public_key is None:
        raise Conflict("this pairing session has not been challenged yet")
    if now >= session.expires_at:
        raise Expired("this pairing session has expired")
    message = pairing_signature_message(state.cluster_id, nonce, session.challenge)
    _verify(session.device_public_key, signature, message)
    session.consumed = True
    assert session.device_name is not None
    return ProvenDevice(session.device_name, session.device_public_key, None)


def exchange_invitation(
    state: AuthorityState,
    *,
    invitation_id: str,
    attempt_id: str,
    nonce: str,
    signature: str,
    now: float,
) -> ProvenDevice:
    """Verify the proof over the invitation transcript and consume the exact attempt."""
    invitation = _find_invitation_by_nonce(state, invitation_id, nonce)
    attempt = invitation.attempts.get(attempt_id)
    if attempt is None:
        raise Unknown("no pairing attempt has that id")
    if attempt.consumed:
        raise Conflict("this pairing attempt was already used")
    reason = _unavailable_reason(invitation, now)
    if reason is not None:
        raise Expired(f"this pairing invitation is {reason}")
    if now >= attempt.expires_at:
        raise Expired("this pairing attempt has expired")
    message = pairing_invitation_signature_message(
        state.cluster_id, invitation.invitation_id, nonce, attempt.attempt_id, attempt.challenge
    )
    _verify(attempt.device_public_key, signature, message)
    attempt.consumed = True
    invitation.successful_pairings += 1
    return ProvenDevice(attempt.device_name, attempt.device_public_key, invitation_id)


# helpers -------------------------------------------------------------------------------


def _find_session(state: AuthorityState, nonce: str) -> SessionRecord:
    session = state.sessions.get(nonce_digest(nonce)) if _SECRET_SHAPE.fullmatch(nonce) else None
    if session is None:
        raise Unknown(UNKNOWN_NONCE)
    return session


def _find_invitation_by_nonce(
    state: AuthorityState, invitation_id: str, nonce: str
) -> InvitationRecord:
    invitation = find_invitation(state, invitation_id)
    if not _SECRET_SHAPE.fullmatch(nonce) or not hmac.compare_digest(
        invitation.nonce_digest, nonce_digest(nonce)
    ):
        raise Unknown(UNKNOWN_NONCE)
    return invitation


def _verify(public_key: str, signature: str, message: bytes) -> None:
    try:
        raw = b64url_decode(signature)
        if len(raw) != ED25519_SIGNATURE_BYTES:
            raise ValueError
        Ed25519PublicKey.from_public_bytes(b64url_decode(public_key)).verify(raw, message)
    except (ValueError, InvalidSignature):
        raise Unauthorized(INVALID_PROOF) from None
