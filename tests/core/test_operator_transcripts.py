"""The signed transcripts are the protocol: their exact bytes are checked here."""

from __future__ import annotations

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from skulk_core.operator.transcripts import (
    pairing_invitation_signature_message,
    pairing_signature_message,
)

CLUSTER = "5f0c6d3e-2b1a-4c8d-9e7f-0a1b2c3d4e5f"
INVITATION = "0b9e8d7c-6a5b-4c3d-8e1f-a2b3c4d5e6f7"
ATTEMPT = "c1d2e3f4-a5b6-4789-8abc-def012345678"
NONCE = "n0nce-Value_0123456789abcdefghijklmnopqrstu"
CHALLENGE = "ch4llenge_ABCDEFGHIJKLMNOPQRSTUVWXYZ-01234"


def test_legacy_transcript_is_byte_exact() -> None:
    expected = (
        b"skulk-device-pairing-v1\x00"
        b"5f0c6d3e-2b1a-4c8d-9e7f-0a1b2c3d4e5f\x00"
        b"n0nce-Value_0123456789abcdefghijklmnopqrstu\x00"
        b"ch4llenge_ABCDEFGHIJKLMNOPQRSTUVWXYZ-01234"
    )
    assert pairing_signature_message(CLUSTER, NONCE, CHALLENGE) == expected


def test_invitation_transcript_is_byte_exact() -> None:
    expected = (
        b"skulk-device-pairing-v2\x00"
        b"5f0c6d3e-2b1a-4c8d-9e7f-0a1b2c3d4e5f\x00"
        b"0b9e8d7c-6a5b-4c3d-8e1f-a2b3c4d5e6f7\x00"
        b"n0nce-Value_0123456789abcdefghijklmnopqrstu\x00"
        b"c1d2e3f4-a5b6-4789-8abc-def012345678\x00"
        b"ch4llenge_ABCDEFGHIJKLMNOPQRSTUVWXYZ-01234"
    )
    message = pairing_invitation_signature_message(CLUSTER, INVITATION, NONCE, ATTEMPT, CHALLENGE)
    assert message == expected


def test_tiny_parts_are_framed_not_concatenated() -> None:
    assert pairing_signature_message("a", "b", "c") == b"skulk-device-pairing-v1\x00a\x00b\x00c"
    assert pairing_signature_message("ab", "", "c") != pairing_signature_message("a", "b", "c")


def test_a_legacy_signature_never_verifies_as_an_invitation_proof() -> None:
    key = Ed25519PrivateKey.generate()
    legacy = key.sign(pairing_signature_message(CLUSTER, NONCE, CHALLENGE))
    invitation_message = pairing_invitation_signature_message(
        CLUSTER, INVITATION, NONCE, ATTEMPT, CHALLENGE
    )
    with pytest.raises(InvalidSignature):
        key.public_key().verify(legacy, invitation_message)
    key.public_key().verify(key.sign(invitation_message), invitation_message)


@pytest.mark.parametrize("bad", ["caf\u00e9", "with\x00nul"])
def test_non_ascii_or_nul_parts_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        pairing_signature_message(CLUSTER, bad, CHALLENGE)
    with pytest.raises(ValueError):
        pairing_invitation_signature_message(CLUSTER, INVITATION, NONCE, bad, CHALLENGE)
