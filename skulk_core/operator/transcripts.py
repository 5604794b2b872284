"""The exact byte strings a pairing device signs (spec: "Create a device challenge").

One copy for the gateway (which verifies) and every client (which signs). Each part is
ASCII; a non-ASCII or NUL-bearing part is refused because it would make the framing
ambiguous.
"""

from __future__ import annotations

LEGACY_DOMAIN = b"skulk-device-pairing-v1\x00"
INVITATION_DOMAIN = b"skulk-device-pairing-v2\x00"
_SEPARATOR = b"\x00"


def _ascii(value: str, name: str) -> bytes:
    try:
        raw = value.encode("ascii")
    except UnicodeEncodeError:
        raise ValueError(f"{name} must be ASCII") from None
    if _SEPARATOR in raw:
        raise ValueError(f"{name} must not contain a NUL byte")
    return raw


def pairing_signature_message(cluster_id: str, nonce: str, challenge: str) -> bytes:
    """What a legacy (version one and two package) device signs.

    ``"skulk-device-pairing-v1\\0" || clusterId || "\\0" || nonce || "\\0" || challenge``
    """
    return LEGACY_DOMAIN + _SEPARATOR.join(
        (
            _ascii(cluster_id, "clusterId"),
            _ascii(nonce, "nonce"),
            _ascii(challenge, "challenge"),
        )
    )


def pairing_invitation_signature_message(
    cluster_id: str, invitation_id: str, nonce: str, attempt_id: str, challenge: str
) -> bytes:
    """What a device pairing through a version-three invitation signs.

    ``"skulk-device-pairing-v2\\0" || clusterId || "\\0" || invitationId || "\\0" ||
    nonce || "\\0" || attemptId || "\\0" || challenge``; the UUIDs in their canonical
    lowercase hyphenated form (the caller passes them as the gateway returned them).
    """
    return INVITATION_DOMAIN + _SEPARATOR.join(
        (
            _ascii(cluster_id, "clusterId"),
            _ascii(invitation_id, "invitationId"),
            _ascii(nonce, "nonce"),
            _ascii(attempt_id, "attemptId"),
            _ascii(challenge, "challenge"),
        )
    )
