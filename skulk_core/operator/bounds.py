"""Every bound the pairing spec states, as named constants, plus input normalization."""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from typing import Final
from urllib.parse import urlsplit

# A legacy session and each invitation attempt live five minutes.
SESSION_TTL: Final = 300
ATTEMPT_TTL: Final = 300
ACCESS_TTL: Final = 15 * 60
REFRESH_TTL: Final = 30 * 24 * 3600

INVITATION_MIN_LIFETIME: Final = 60
INVITATION_MAX_LIFETIME: Final = 90 * 24 * 3600  # 7,776,000 s
INVITATION_MIN_PAIRINGS: Final = 1
INVITATION_MAX_PAIRINGS: Final = 20
INVITATION_DEFAULT_PAIRINGS: Final = 10
MAX_LIVE_ATTEMPTS: Final = 10
MAX_ISSUED_ATTEMPTS: Final = 100

DEVICE_NAME_MIN: Final = 1
DEVICE_NAME_MAX: Final = 80
CLUSTER_NAME_MAX: Final = 64
EXCHANGE_URL_MAX: Final = 2048

# Opaque secrets (nonces, challenges, tokens) are 32 random bytes, base64url: 43 chars.
SECRET_BYTES: Final = 32
ED25519_PUBLIC_KEY_BYTES: Final = 32
ED25519_SIGNATURE_BYTES: Final = 64

_WHITESPACE = re.compile(r"\s+")
_VALID_FOR = re.compile(r"([0-9]+)([mhd])", re.ASCII)
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400}
_LOOPBACK_NAMES = frozenset({"localhost"})


def _normalize_label(raw: str, what: str, maximum: int) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"{what} must be a string")
    text = _WHITESPACE.sub(" ", raw).strip()
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in text):
        raise ValueError(f"{what} must not contain control characters")
    if not DEVICE_NAME_MIN <= len(text) <= maximum:
        raise ValueError(f"{what} must be 1-{maximum} characters after whitespace normalization")
    return text


def normalize_device_name(raw: str) -> str:
    """Collapse whitespace runs to one space, strip, then require 1-80 characters."""
    return _normalize_label(raw, "deviceName", DEVICE_NAME_MAX)


def normalize_cluster_name(raw: str) -> str:
    """The same normalization for the cluster's display name, 1-64 characters."""
    return _normalize_label(raw, "cluster name", CLUSTER_NAME_MAX)


def parse_valid_for(text: str) -> int:
    """``"15m"``, ``"2h"``, ``"90d"`` -> seconds, from one minute through 90 days."""
    match = _VALID_FOR.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError("--valid-for takes a positive whole number followed by m, h or d")
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    check_invitation_lifetime(seconds)
    return seconds


def check_invitation_lifetime(seconds: int) -> int:
    if not INVITATION_MIN_LIFETIME <= seconds <= INVITATION_MAX_LIFETIME:
        raise ValueError("an invitation lives from one minute through 90 days")
    return seconds


def check_max_pairings(count: int) -> int:
    if not INVITATION_MIN_PAIRINGS <= count <= INVITATION_MAX_PAIRINGS:
        raise ValueError("an invitation allows from 1 through 20 pairings")
    return count


def is_loopback_host(host: str) -> bool:
    """``localhost``, 127.0.0.0/8 or ``::1`` (the only hosts cleartext is allowed for)."""
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def validate_exchange_url(url: str) -> str:
    """An exchange origin: ``https://host[:port][/path]``, or ``http`` only to loopback.

    No credentials, query or fragment: the URL is shown and logged, never secret.
    """
    if not isinstance(url, str) or not url or len(url) > EXCHANGE_URL_MAX:
        raise ValueError(f"the exchange URL must be 1-{EXCHANGE_URL_MAX} characters")
    if any(ord(ch) <= 32 or ord(ch) >= 127 for ch in url):
        raise ValueError("the exchange URL must be printable ASCII without spaces")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port
    except ValueError:
        raise ValueError("the exchange URL is not a valid URL") from None
    if parts.scheme not in ("https", "http") or not host:
        raise ValueError("the exchange URL must be an https:// URL")
    if parts.scheme == "http" and not is_loopback_host(host):
        raise ValueError("a remote exchange URL must use HTTPS (http is for loopback only)")
    if parts.username is not None or parts.password is not None:
        raise ValueError("the exchange URL must not carry credentials")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise ValueError("the exchange URL must not have a query or fragment")
    return url
