"""The fabric's envelope: every message survives the wire unchanged, and nothing a
peer (or an attacker on the segment, or a future version) sends can make decoding
raise anything but :class:`FrameError`, whose ``reason`` names the drop counter."""

from __future__ import annotations

import typing

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skulk_core.cluster.election import Session
from skulk_core.cluster.fabric import (
    PLANE_OF,
    PROTOCOL_VERSION,
    Body,
    FrameError,
    decode_body,
    decode_header,
    encode,
)
from tests.core.fabric_samples import (
    ALPHA,
    BETA,
    header,
    msgpack_values,
    near_miss_bodies,
    sample_bodies,
)

BODY_TYPES = set(typing.get_args(Body))


def test_the_samples_cover_every_body_type_and_plane() -> None:
    assert {type(b) for b in sample_bodies()} == BODY_TYPES
    assert set(PLANE_OF) == BODY_TYPES


@pytest.mark.parametrize("body", sample_bodies(), ids=lambda b: type(b).__name__)
def test_every_body_round_trips_with_its_header(body: Body) -> None:
    sent = header(
        ALPHA, plane=PLANE_OF[type(body)], session=Session(master=ALPHA, term=3), seq=2**40
    )
    frames = encode(sent, body)
    assert len(frames) == 2
    assert decode_header(frames) == sent
    assert decode_body(frames) == body


def test_a_header_without_a_session_round_trips() -> None:
    sent = header(BETA, plane="telemetry")
    assert decode_header(encode(sent, sample_bodies()[0])) == sent


def _reason(frames: list[bytes]) -> str:
    with pytest.raises(FrameError) as caught:
        decode_header(frames)
    return caught.value.reason


def test_a_foreign_protocol_version_is_refused_as_version() -> None:
    body = sample_bodies()[0]
    for version in (0, PROTOCOL_VERSION + 1, -1, 2**31):
        frames = encode(header(version=version), body)
        assert _reason(frames) == "version"


def test_a_future_header_with_extra_fields_is_still_refused_as_version() -> None:
    # A later protocol may grow the header; it must be recognised as foreign, not garbage.
    raw = msgspec.msgpack.encode([PROTOCOL_VERSION + 1, "control", BETA, 1, None, "more", 7])
    assert _reason([raw, b""]) == "version"


@pytest.mark.parametrize("parts", [0, 1, 3, 5])
def test_a_wrong_part_count_is_malformed(parts: int) -> None:
    good = encode(header(), sample_bodies()[0])
    frames = (good * 3)[:parts]
    assert _reason(frames) == "malformed"


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xc1",  # never used in msgpack
        b"garbage",
        msgspec.msgpack.encode({"version": PROTOCOL_VERSION}),
        msgspec.msgpack.encode([PROTOCOL_VERSION, "sideways", BETA, 1]),  # unknown plane
        msgspec.msgpack.encode([PROTOCOL_VERSION, "control", BETA]),  # too short
        msgspec.msgpack.encode([PROTOCOL_VERSION, "control", 5, 1]),  # origin not a string
        msgspec.msgpack.encode([str(PROTOCOL_VERSION), "control", BETA, 1]),
    ],
)
def test_garbage_headers_are_malformed(raw: bytes) -> None:
    assert _reason([raw, b""]) == "malformed"


def test_a_body_that_does_not_decode_is_malformed() -> None:
    head = encode(header(), sample_bodies()[0])[0]
    deep = b"\x91" * 100_000 + b"\xc0"  # nesting far past any real message
    huge = b"\xdd\xff\xff\xff\xff"  # an array claiming 4 G elements, then nothing
    for raw in (b"", b"\x93\x01", deep, huge, msgspec.msgpack.encode({"type": "nope"})):
        with pytest.raises(FrameError) as caught:
            decode_body([head, raw])
        assert caught.value.reason == "malformed"


# -- hypothesis: nothing but FrameError --------------------------------------------

any_frames = st.lists(st.binary(max_size=64), max_size=4)


def _decode_all(frames: list[bytes]) -> None:
    try:
        decode_header(frames)
        decode_body(frames)
    except FrameError as exc:
        assert exc.reason in {"malformed", "version"}


@settings(max_examples=300, deadline=None)
@given(any_frames)
def test_arbitrary_bytes_raise_nothing_but_frame_error(frames: list[bytes]) -> None:
    _decode_all(frames)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(msgpack_values.map(msgspec.msgpack.encode), min_size=2, max_size=2)
    | st.tuples(st.binary(max_size=64), near_miss_bodies()).map(list)
)
def test_arbitrary_msgpack_raises_nothing_but_frame_error(frames: list[bytes]) -> None:
    _decode_all(frames)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_miss_bodies() | st.binary(max_size=256))
def test_a_valid_header_with_a_random_body_raises_nothing_but_frame_error(raw: bytes) -> None:
    frames = [encode(header(), sample_bodies()[0])[0], raw]
    assert decode_header(frames) == header()
    try:
        body = decode_body(frames)
    except FrameError as exc:
        assert exc.reason == "malformed"
    else:
        # What does decode is a real message of a known type, usable as such.
        assert type(body) in BODY_TYPES
        assert decode_body(encode(header(), body)) == body
