"""The capability contract's pure rules: revisions, envelopes, frame ordering, and the
bounds of capability-node summaries."""

from __future__ import annotations

import json
import random

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skulk_core.extensions.capabilities import (
    MAX_TIMEOUT_SECONDS,
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityStreamFrame,
    InlineMediaAttachment,
    descriptor_revision,
)
from skulk_core.extensions.capability_nodes import (
    MAX_ACTION_PAYLOAD_BYTES,
    MAX_ACTIONS,
    MAX_SURFACES,
    CapabilityNodeAction,
    CapabilityNodeSummary,
    CapabilityNodeSurface,
)
from skulk_core.extensions.ordering import FrameOrder, SequenceGap

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
schemas = st.dictionaries(st.text(max_size=8), json_values, max_size=5)


def descriptor(**fields: object) -> CapabilityDescriptor:
    base: dict[str, object] = {
        "id": "echo",
        "version": "1.0.0",
        "title": "Echo",
        "description": "Echoes.",
        "input_schema": {"type": "object"},
        "output_schema": {"type": "object"},
    }
    return CapabilityDescriptor(**{**base, **fields})  # type: ignore[arg-type]


def shuffled(value: object, rng: random.Random) -> object:
    """The same JSON value with every object's keys in another order."""
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {k: shuffled(value[k], rng) for k in keys}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


@given(schemas, schemas, st.randoms())
def test_the_revision_ignores_key_order_and_prose(
    input_schema: dict[str, object], output_schema: dict[str, object], rng: random.Random
) -> None:
    one = descriptor(input_schema=input_schema, output_schema=output_schema)
    other = descriptor(
        input_schema=shuffled(input_schema, rng),
        output_schema=shuffled(output_schema, rng),
        title="Another title",
        description="Reworded for an LLM.",
    )
    assert descriptor_revision(one) == descriptor_revision(other)
    assert descriptor_revision(one).startswith("sha256:")
    assert len(descriptor_revision(one)) == len("sha256:") + 64


@given(schemas, json_values)
def test_the_revision_changes_with_the_contract(schema: dict[str, object], extra: object) -> None:
    base = descriptor(input_schema=schema)
    changed_schema = {**schema, "\x00added": extra}
    assert descriptor_revision(descriptor(input_schema=changed_schema)) != descriptor_revision(base)
    assert descriptor_revision(descriptor(input_schema=schema, version="1.0.1")) != (
        descriptor_revision(base)
    )
    assert descriptor_revision(descriptor(input_schema=schema, id="echo2")) != (
        descriptor_revision(base)
    )
    streamed = descriptor(
        input_schema=schema, io_mode="server_streaming", output_chunk_schema={"type": "object"}
    )
    assert descriptor_revision(streamed) != descriptor_revision(base)


def test_a_revision_survives_the_wire() -> None:
    """What a caller pins after discovery over JSON is what the provider computes."""
    one = descriptor(input_schema={"type": "object", "properties": {"b": {}, "a": {"type": "x"}}})
    back = msgspec.json.decode(msgspec.json.encode(one), type=CapabilityDescriptor)
    assert descriptor_revision(back) == descriptor_revision(one)
    assert back.qualified_id == "echo@1.0.0"


ENVELOPE = {
    "call_id": "c1",
    "capability_id": "echo",
    "version": "1.0.0",
    "descriptor_revision": "sha256:00",
    "caller_node": "a",
    "target_node": "b",
    "timeout_seconds": 5,
    "payload": {"text": "hi"},
}


def decode_call(body: dict[str, object]) -> CapabilityCall:
    return msgspec.json.decode(json.dumps(body).encode(), type=CapabilityCall)


def test_the_envelope_decodes_with_defaults() -> None:
    call = decode_call({k: v for k, v in ENVELOPE.items() if k not in {"timeout_seconds"}})
    assert call.timeout_seconds == 30.0
    assert call.qualified_id == "echo@1.0.0"


@pytest.mark.parametrize(
    "change",
    [
        {"timeout_seconds": 0},
        {"timeout_seconds": MAX_TIMEOUT_SECONDS + 1},
        {"call_id": ""},
        {"payload": [1, 2]},
        {"unknown": True},
        {"version": 1},
    ],
    ids=["zero-timeout", "long-timeout", "empty-id", "list-payload", "unknown-field", "int"],
)
def test_an_envelope_out_of_range_does_not_decode(change: dict[str, object]) -> None:
    with pytest.raises(msgspec.ValidationError):
        decode_call({**ENVELOPE, **change})
    missing = {k: v for k, v in ENVELOPE.items() if k != "target_node"}
    with pytest.raises(msgspec.ValidationError):
        decode_call(missing)


def test_a_frame_with_media_round_trips_as_raw_bytes() -> None:
    frame = CapabilityStreamFrame(
        call_id="c1",
        direction="provider_to_caller",
        sequence=1,
        kind="chunk",
        payload={"format": "pcm_s16le"},
        media=InlineMediaAttachment(data=bytes(range(256)), media_type="audio/pcm"),
    )
    packed = msgspec.msgpack.encode(frame)
    assert bytes(range(256)) in packed  # raw, not base64
    assert msgspec.msgpack.decode(packed, type=CapabilityStreamFrame) == frame
    assert not frame.terminal
    assert msgspec.structs.replace(frame, kind="failed").terminal


# -- ordering ------------------------------------------------------------------------


@st.composite
def windowed_permutations(draw: st.DrawFn) -> tuple[int, list[int]]:
    """A window and an arrival order in which no frame is further ahead of the first
    missing one than the window allows."""
    window = draw(st.integers(1, 8))
    count = draw(st.integers(0, 40))
    order: list[int] = []
    pending = list(range(count))
    while pending:
        lowest = pending[0]
        choices = [s for s in pending if s < lowest + window]
        pick = draw(st.sampled_from(choices))
        pending.remove(pick)
        order.append(pick)
    return window, order


@given(windowed_permutations())
def test_frames_within_the_window_come_out_in_order(case: tuple[int, list[int]]) -> None:
    window, arrivals = case
    gate: FrameOrder[int] = FrameOrder(window)
    released = [item for seq in arrivals for item in gate.accept(seq, seq)]
    assert released == sorted(arrivals)
    assert gate.waiting == 0
    assert gate.expected == len(arrivals)


@settings(max_examples=200)
@given(st.integers(1, 8), st.integers(0, 20), st.data())
def test_a_duplicate_or_a_frame_past_the_window_breaks_the_stream(
    window: int, delivered: int, data: st.DataObject
) -> None:
    gate: FrameOrder[int] = FrameOrder(window)
    for seq in range(delivered):
        assert gate.accept(seq, seq) == [seq]
    if delivered:
        with pytest.raises(SequenceGap):
            gate.accept(data.draw(st.integers(0, delivered - 1)), -1)
    with pytest.raises(SequenceGap):
        gate.accept(delivered + window + data.draw(st.integers(0, 5)), -1)


# -- capability-node summaries --------------------------------------------------------


def surface(n: int = 0, url: str = "http://127.0.0.1:8188/") -> CapabilityNodeSurface:
    return CapabilityNodeSurface(surface_id=f"s{n}", title="Open", url=url)


def summary(**fields: object) -> CapabilityNodeSummary:
    base: dict[str, object] = {
        "plugin_id": "foxlight.video-studio",
        "node_id": "studio",
        "bundle_id": "foxlight.video-studio",
        "version": "1.0.0",
    }
    return CapabilityNodeSummary(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url",
    [
        "http://user:secret@example.com/",
        "https://token@example.com/",
        "ftp://example.com/",
        "/relative/path",
        "javascript:alert(1)",
        "http://",
    ],
)
def test_surface_urls_with_credentials_or_no_http_host_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        surface(url=url)


def test_summary_bounds_are_checked_at_construction_and_on_decode() -> None:
    at_limit = summary(surfaces=tuple(surface(n) for n in range(MAX_SURFACES)))
    assert len(at_limit.surfaces) == MAX_SURFACES
    with pytest.raises(ValueError):
        summary(surfaces=tuple(surface(n) for n in range(MAX_SURFACES + 1)))
    action = CapabilityNodeAction(action_id="a", title="Run", kind="descriptor", capability_id="x")
    assert len(summary(actions=(action,) * MAX_ACTIONS).actions) == MAX_ACTIONS
    with pytest.raises(ValueError):
        summary(actions=(action,) * (MAX_ACTIONS + 1))
    fits = {"k": "x" * (MAX_ACTION_PAYLOAD_BYTES - len('{"k":""}'))}
    CapabilityNodeAction(
        action_id="a", title="Run", kind="descriptor", capability_id="x", payload=fits
    )
    with pytest.raises(ValueError):
        CapabilityNodeAction(
            action_id="a",
            title="Run",
            kind="descriptor",
            capability_id="x",
            payload={"k": "x" * MAX_ACTION_PAYLOAD_BYTES},
        )
    # A peer cannot smuggle a bad summary in through the wire either.
    wire = msgspec.msgpack.encode(at_limit)
    assert msgspec.msgpack.decode(wire, type=CapabilityNodeSummary) == at_limit
    bad = msgspec.to_builtins(at_limit)
    bad["surfaces"][0]["url"] = "http://user:pw@example.com/"
    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.decode(msgspec.msgpack.encode(bad), type=CapabilityNodeSummary)
