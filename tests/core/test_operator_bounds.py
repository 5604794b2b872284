from __future__ import annotations

import pytest

from skulk_core.operator import bounds
from skulk_core.operator.bounds import (
    normalize_device_name,
    parse_valid_for,
    validate_exchange_url,
)


def test_the_spec_bounds() -> None:
    assert bounds.SESSION_TTL == bounds.ATTEMPT_TTL == 300
    assert bounds.ACCESS_TTL == 900
    assert bounds.REFRESH_TTL == 30 * 86400
    assert bounds.INVITATION_MIN_LIFETIME == 60
    assert bounds.INVITATION_MAX_LIFETIME == 7_776_000
    assert (bounds.INVITATION_MIN_PAIRINGS, bounds.INVITATION_MAX_PAIRINGS) == (1, 20)
    assert bounds.INVITATION_DEFAULT_PAIRINGS == 10
    assert bounds.MAX_LIVE_ATTEMPTS == 10
    assert bounds.MAX_ISSUED_ATTEMPTS == 100


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Phone", "Phone"),
        ("  Ada's \t phone\n ", "Ada's phone"),
        ("x" * 80, "x" * 80),
        (" " + "y" * 80 + "   ", "y" * 80),
        ("a" + " " * 200 + "b", "a b"),
        ("\u72d0\u72f8", "\u72d0\u72f8"),
    ],
)
def test_device_names_are_normalized(raw: str, expected: str) -> None:
    assert normalize_device_name(raw) == expected


@pytest.mark.parametrize(
    "raw", ["", "   ", "\t\n", "x" * 81, "a" + " " * 10 + "b" * 79, "bell\x07"]
)
def test_device_names_outside_1_to_80_are_refused(raw: str) -> None:
    with pytest.raises(ValueError):
        normalize_device_name(raw)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1m", 60), ("15m", 900), ("2h", 7200), ("90d", 7_776_000), ("129600m", 7_776_000)],
)
def test_valid_for(text: str, seconds: int) -> None:
    assert parse_valid_for(text) == seconds


@pytest.mark.parametrize(
    "text", ["0m", "91d", "2161h", "60s", "1", "m", "-5m", "1.5h", "1 h", "+5m", "\u0665m", ""]
)
def test_valid_for_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_valid_for(text)


@pytest.mark.parametrize(
    "url",
    [
        "https://gateway.example.invalid",
        "https://gateway.example.invalid:52417/base",
        "http://127.0.0.1:52417",
        "http://localhost:1",
        "http://[::1]:52417",
    ],
)
def test_exchange_urls_accepted(url: str) -> None:
    assert validate_exchange_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "http://gateway.example.invalid",  # remote cleartext
        "http://192.168.1.5:52417",
        "ftp://127.0.0.1",
        "https://user:pw@gateway.example.invalid",
        "https://gateway.example.invalid/?token=x",
        "https://gateway.example.invalid/#x",
        "https:///nohost",
        "https://gateway example",
        "https://gateway.example.invalid:99999",
        "https://" + "a" * 2050,
    ],
)
def test_exchange_urls_refused(url: str) -> None:
    with pytest.raises(ValueError):
        validate_exchange_url(url)
