"""Unpadded URL-safe base64, public-key fingerprints and the wire timestamp format."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from datetime import UTC, datetime

_B64URL = re.compile(r"[A-Za-z0-9_-]*")
FINGERPRINT_PREFIX = "sha256:"


def b64url_encode(raw: bytes) -> str:
    """URL-safe base64 without ``=`` padding (RFC 4648 section 5, as the spec's bodies use)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strictly decode unpadded URL-safe base64.

    Refuses padding, the standard alphabet's ``+``/``/``, whitespace, an impossible
    length and non-canonical trailing bits (so one value has exactly one encoding).
    Raises ``ValueError`` without echoing the input (it may be a secret).
    """
    if not isinstance(text, str) or not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not unpadded URL-safe base64")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not unpadded URL-safe base64") from None
    if b64url_encode(raw) != text:
        raise ValueError("not canonical unpadded URL-safe base64")
    return raw


def public_key_fingerprint(spki_der: bytes) -> str:
    """``"sha256:" + b64url(SHA-256(SubjectPublicKeyInfo DER))``: 50 ASCII characters.

    Pins the gateway's TLS public key rather than its certificate, so a client can check
    it from the handshake alone. Base64url rather than hex keeps the QR package short.
    """
    return FINGERPRINT_PREFIX + b64url_encode(hashlib.sha256(spki_der).digest())


def iso8601_utc(seconds: float) -> str:
    """A Unix time as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC, whole seconds, truncated)."""
    return datetime.fromtimestamp(int(seconds), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def secret_digest(purpose: str, secret: str) -> str:
    """A one-way, domain-separated digest of a bearer secret, as the gateway stores it.

    ``hex(SHA-256("skulk-operator-secret-v1\\0" || purpose || "\\0" || secret))``. The
    purpose (``"access-token"``, ``"refresh-token"``, ``"pairing-nonce"``) keeps one kind
    of secret from ever matching another's record. The secrets are 256-bit random values,
    so a plain hash (no salt, no stretching) is enough to make the store useless for
    recovering them.
    """
    material = b"skulk-operator-secret-v1\x00" + purpose.encode() + b"\x00" + secret.encode()
    return hashlib.sha256(material).hexdigest()
