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
    DataFrame,
    FrameError,
    RunTask,
    decode_body,
    decode_header,
    encode,
)
from skulk_core.ids import CommandId, InstanceId
from tests.core.fabric_samples import (
    ALPHA,
    BETA,
    generation_chunks,
    generation_request,
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


def test_a_remote_generation_travels_typed_and_encoded_once() -> None:
    request = generation_request()
    task = RunTask(command_id=CommandId("c1"), instance_id=InstanceId("i1"), request=request)
    frames = encode(header(), task)
    # On the wire the request is part of the frame's own msgpack, not bytes inside it.
    assert isinstance(msgspec.msgpack.decode(frames[1])["request"], dict)
    got = decode_body(frames)
    assert isinstance(got, RunTask) and got.request == request
    for seq, chunk in enumerate(generation_chunks()):
        frame = DataFrame(command_id=CommandId("c1"), seq=seq, payload=chunk)
        frames = encode(header(plane="data"), frame)
        raw = msgspec.msgpack.decode(frames[1])["payload"]
        assert isinstance(raw, dict) and raw["type"] == chunk.__struct_config__.tag
        got_frame = decode_body(frames)
        assert isinstance(got_frame, DataFrame)
        assert type(got_frame.payload) is type(chunk) and got_frame.payload == chunk


def test_opaque_data_payloads_still_travel_as_bytes() -> None:
    frame = DataFrame(command_id=CommandId("c1"), seq=0, payload=b"\x81\xa4type\xa5token")
    got = decode_body(encode(header(plane="data"), frame))
    assert isinstance(got, DataFrame) and got.payload == frame.payload


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "token", "task_id": "t1"},  # a chunk missing its fields
        {"type": "nope", "task_id": "t1"},  # an unknown chunk kind
        "text",  # neither a chunk nor bytes
        7,
    ],
)
def test_a_data_frame_with_a_bad_payload_is_malformed(payload: object) -> None:
    raw = msgspec.msgpack.encode({"type": "data", "command_id": "c1", "seq": 0, "payload": payload})
    with pytest.raises(FrameError) as caught:
        decode_body([encode(header(), sample_bodies()[0])[0], raw])
    assert caught.value.reason == "malformed"


def test_a_run_task_whose_request_does_not_decode_is_malformed() -> None:
    # Protocol 1 carried the request msgpack-encoded in bytes: that is no request now.
    request = msgspec.msgpack.encode(generation_request())
    for bad in (request, {"task_id": "t1", "prompt": "hi"}, None):
        raw = msgspec.msgpack.encode(
            {"type": "run_task", "command_id": "c1", "instance_id": "i1", "request": bad}
        )
        with pytest.raises(FrameError) as caught:
            decode_body([encode(header(), sample_bodies()[0])[0], raw])
        assert caught.value.reason == "malformed"


def test_a_node_of_the_previous_protocol_is_refused_as_version() -> None:
    frames = encode(header(version=1), sample_bodies()[0])
    assert _reason(frames) == "version"


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
        # What does decode is a real message of a known type, usable as such. It is
        # compared by its encoding: a NaN that decoded into a float field (a chunk's
        # logprob, a sampling knob) is never equal to itself.
        assert type(body) in BODY_TYPES
        again = encode(header(), body)
        assert encode(header(), decode_body(again))[1] == again[1]
