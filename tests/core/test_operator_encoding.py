from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skulk_core.operator.encoding import (
    b64url_decode,
    b64url_encode,
    iso8601_utc,
    public_key_fingerprint,
    secret_digest,
)


def test_encoding_is_unpadded_and_url_safe() -> None:
    assert b64url_encode(b"\xfb\xff") == "-_8"
    assert b64url_encode(b"") == ""
    assert b64url_encode(bytes(32)) == "A" * 43


@given(st.binary(max_size=200))
def test_round_trip(raw: bytes) -> None:
    text = b64url_encode(raw)
    assert "=" not in text and "+" not in text and "/" not in text
    assert b64url_decode(text) == raw


@pytest.mark.parametrize(
    "text",
    [
        "-_8=",  # padding
        "+/8",  # the standard alphabet
        "-_ 8",  # whitespace
        "A",  # an impossible length
        "-_9",  # non-canonical trailing bits (decodes to the same bytes as "-_8")
        "\u0410\u0410\u0410\u0410",  # non-ASCII
    ],
)
def test_strict_decoding_refuses(text: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        b64url_decode(text)
    assert text not in str(excinfo.value)


def test_fingerprint_is_sha256_of_the_spki() -> None:
    spki = b"example subject public key info"
    digest = base64.urlsafe_b64encode(hashlib.sha256(spki).digest()).rstrip(b"=").decode()
    assert public_key_fingerprint(spki) == "sha256:" + digest
    assert len(public_key_fingerprint(spki)) == 50


def test_secret_digest_is_domain_separated_and_one_way() -> None:
    expected = hashlib.sha256(b"skulk-operator-secret-v1\x00access-token\x00tok").hexdigest()
    assert secret_digest("access-token", "tok") == expected
    assert secret_digest("refresh-token", "tok") != expected
    assert "tok" not in expected


def test_iso8601_is_utc_whole_seconds() -> None:
    assert iso8601_utc(0) == "1970-01-01T00:00:00Z"
    assert iso8601_utc(1_700_000_000.9) == "2023-11-14T22:13:20Z"
