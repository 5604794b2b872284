"""The runner wire format: frames, their bound, and the tagged unions."""

from __future__ import annotations

import io
import struct

import pytest

from skulk_core.chat.generation import GenerationRequest, SamplingParams, TokenChunk
from skulk_core.ids import TaskId
from skulk_daemon.runner.protocol import (
    MAX_FRAME_BYTES,
    Cancel,
    FrameSplitter,
    Generate,
    Load,
    Phase,
    ProtocolError,
    Shutdown,
    decode_parent_message,
    decode_runner_message,
    encode_frame,
    read_frame,
)


def test_messages_round_trip_through_frames() -> None:
    request = GenerationRequest(
        task_id=TaskId("t"),
        prompt="<bos>héllo",
        sampling=SamplingParams(max_tokens=3, stop=("\n",), seed=1),
    )
    parent = [
        Load(model_path="/m.gguf", context_tokens=512, slots=2),
        Generate(request=request),
        Cancel(task_id=TaskId("t")),
        Shutdown(),
    ]
    stream = io.BytesIO(b"".join(encode_frame(m) for m in parent))
    decoded = []
    while (body := read_frame(stream)) is not None:
        decoded.append(decode_parent_message(body))
    assert decoded == parent

    token = TokenChunk(
        task_id=TaskId("t"), text="é", token_id=5, logprob=-0.5, top_logprobs=[("é", -0.5)]
    )
    for message in (Phase(phase="ready"), token):
        body = read_frame(io.BytesIO(encode_frame(message)))
        assert body is not None
        assert decode_runner_message(body) == message


def test_a_frame_at_the_bound_is_accepted_and_one_past_it_refused() -> None:
    at_bound = struct.pack(">I", MAX_FRAME_BYTES)
    # Accepted: the reader goes on to read the body (and finds it cut short).
    with pytest.raises(ProtocolError, match="ended inside a frame"):
        read_frame(io.BytesIO(at_bound + b"x"))
    with pytest.raises(ProtocolError, match="exceeds"):
        read_frame(io.BytesIO(struct.pack(">I", MAX_FRAME_BYTES + 1)))


def test_garbage_and_truncation_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError):
        decode_parent_message(b"\x93\x01\x02\x03")
    with pytest.raises(ProtocolError, match="header"):
        read_frame(io.BytesIO(b"\x00\x00"))
    assert read_frame(io.BytesIO(b"")) is None


def test_the_splitter_finds_the_same_frames_however_the_bytes_arrive() -> None:
    messages = [Shutdown(), Cancel(task_id=TaskId("t")), Shutdown()]
    stream = b"".join(encode_frame(m) for m in messages)
    for step in (1, 3, 7, len(stream)):
        splitter = FrameSplitter()
        bodies = [
            body
            for at in range(0, len(stream), step)
            for body in splitter.feed(stream[at : at + step])
        ]
        assert [decode_parent_message(b) for b in bodies] == messages
        splitter.end()  # ended on a frame boundary: nothing held back


def test_the_splitter_refuses_an_oversized_header_and_a_cut_short_stream() -> None:
    with pytest.raises(ProtocolError, match="exceeds"):
        FrameSplitter().feed(struct.pack(">I", MAX_FRAME_BYTES + 1))
    at_bound = FrameSplitter()
    assert at_bound.feed(struct.pack(">I", MAX_FRAME_BYTES) + b"x") == []
    with pytest.raises(ProtocolError, match="ended inside a frame"):
        at_bound.end()
    in_header = FrameSplitter()
    assert in_header.feed(encode_frame(Shutdown()) + b"\x00")
    with pytest.raises(ProtocolError, match="header"):
        in_header.end()


def test_embedding_messages_round_trip_through_frames() -> None:
    from skulk_core.chat.generation import ErrorChunk  # noqa: PLC0415
    from skulk_daemon.runner.protocol import (  # noqa: PLC0415
        ERROR_CANCELLED,
        Embed,
        Embedded,
    )

    parent = [
        Load(model_path="/m.gguf", context_tokens=512, mode="embed"),
        Embed(task_id=TaskId("e"), inputs=("héllo", "wörld")),
    ]
    for message in parent:
        body = read_frame(io.BytesIO(encode_frame(message)))
        assert body is not None
        assert decode_parent_message(body) == message
    # A Load from before the mode existed still means text generation.
    assert Load(model_path="/m.gguf", context_tokens=512).mode == "generate"

    vectors = struct.pack("<4f", 0.5, -0.25, 1.0, 0.0)
    embedded = Embedded(
        task_id=TaskId("e"), vectors=vectors, count=2, dimensions=2, prompt_tokens=6
    )
    cancelled = ErrorChunk(task_id=TaskId("e"), code=ERROR_CANCELLED, message="cancelled")
    for message in (embedded, cancelled):
        body = read_frame(io.BytesIO(encode_frame(message)))
        assert body is not None
        assert decode_runner_message(body) == message
    with pytest.raises(ProtocolError):
        decode_parent_message(encode_frame(embedded)[4:])  # a runner message, not a parent one
