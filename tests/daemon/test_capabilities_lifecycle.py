"""The capability fabric in one process: the unary pipeline's typed errors and the
stream lifecycle (started, ordered frames, exactly one terminal withheld until the
handler's cleanup ran, synthetic failures, cancellation, deadlines), through the
same in-process path an extension on this node uses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skulk_core.extensions.capabilities import (
    MAX_MEDIA_BYTES,
    MAX_PAYLOAD_BYTES,
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityError,
    CapabilityStreamFrame,
    CapabilityStreamSession,
    InlineMediaAttachment,
    descriptor_revision,
)
from skulk_core.extensions.capability_nodes import MAX_NODES_PER_HOST, CapabilityNodeSummary
from skulk_core.ids import NodeId
from skulk_daemon.capabilities.registry import MAX_INFLIGHT_CALLS
from skulk_daemon.capabilities.service import CapabilityService
from tests.core.fabric_samples import telemetry
from tests.extension_site import install_package

T = TypeVar("T")
ECHO_SOURCE = Path(__file__).resolve().parents[2] / "examples" / "extensions" / "echo-provider"
ME = NodeId("12D3KooWalpha")


def run(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(factory())


class NodeStandIn:
    """What the fabric reads of its node: identity and its own telemetry reading."""

    def __init__(self) -> None:
        self.node_id = ME
        self.reading = telemetry(ME)

    def own_telemetry(self) -> Any:
        return self.reading

    def record_telemetry(self, reading: Any) -> None:
        self.reading = reading


OBJ: dict[str, object] = {"type": "object"}
CHUNK = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def desc(name: str, mode: str = "unary", **fields: object) -> CapabilityDescriptor:
    values: dict[str, object] = {"input_schema": OBJ, "output_schema": OBJ}
    if mode in ("server_streaming", "bidirectional"):
        values["output_chunk_schema"] = CHUNK
    if mode in ("client_streaming", "bidirectional"):
        values["input_chunk_schema"] = CHUNK
    values.update(fields)
    return CapabilityDescriptor(
        id=name,
        version="1.0.0",
        title=name,
        description=name,
        io_mode=mode,  # type: ignore[arg-type]
        **values,  # type: ignore[arg-type]
    )


def out(call: CapabilityCall, seq: int, kind: str, payload: Any = None, **kw: Any) -> Any:
    return CapabilityStreamFrame(
        call_id=call.call_id,
        direction="provider_to_caller",
        sequence=seq,
        kind=kind,  # type: ignore[arg-type]
        payload=payload,
        **kw,
    )


class Provider:
    """Streams that behave (or not) per capability id; records its cleanups."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.ready = True
        self.refuse_admission = False

    def capabilities(self) -> list[CapabilityDescriptor]:
        return [
            desc("add", input_schema={"type": "object", "required": ["a", "b"]}),
            desc("hang"),
            desc("boom"),
            desc("big"),
            desc("flaky"),
            desc("good", "server_streaming"),
            desc("trailing", "server_streaming"),
            desc("bad_chunk", "server_streaming"),
            desc("raising", "server_streaming"),
            desc("endless", "server_streaming"),
            desc("silent", "server_streaming"),
            desc("sum", "client_streaming", output_schema={"required": ["total"]}),
            desc("double", "bidirectional"),
        ]

    def capability_ready(self, qualified_id: str) -> bool:
        return self.ready or not qualified_id.startswith("flaky")

    async def admit_stream(self, context: object, call: CapabilityCall) -> CapabilityError | None:
        if self.refuse_admission:
            return CapabilityError(code="not_found", message="the model is not mounted")
        return None

    async def handle_call(self, context: object, call: CapabilityCall) -> object:
        match call.capability_id:
            case "add":
                return {"sum": call.payload["a"] + call.payload["b"]}  # type: ignore[operator]
            case "hang":
                await asyncio.sleep(3600)
            case "boom":
                raise RuntimeError("kaboom")
            case "big":
                return {"x": "y" * MAX_PAYLOAD_BYTES}
        return {}

    async def handle_stream(
        self, context: object, call: CapabilityCall
    ) -> AsyncIterator[CapabilityStreamFrame]:
        name = call.capability_id
        try:
            if name == "endless":
                n = 0
                while True:
                    n += 1
                    yield out(call, n, "chunk", {"n": n})
                    await asyncio.sleep(0.01)
            if name == "silent":
                await asyncio.sleep(3600)
            count = int(call.payload.get("count", 2))  # type: ignore[arg-type]
            for n in range(1, count + 1):
                yield out(call, n, "chunk", {"n": n})
            if name == "bad_chunk":
                yield out(call, count + 1, "chunk", {"n": "nope"})
            if name == "raising":
                raise ValueError("stream broke")
            yield out(call, count + 1, "completed", {"count": count})
            if name == "trailing":
                yield out(call, count + 2, "chunk", {"n": 0})
        finally:
            await asyncio.sleep(0.05)  # a cleanup that takes a moment
            self.events.append(f"cleanup:{call.call_id}")

    async def handle_input_stream(
        self,
        context: object,
        call: CapabilityCall,
        frames: AsyncIterator[CapabilityStreamFrame],
    ) -> AsyncIterator[CapabilityStreamFrame]:
        seen: list[str] = []
        total = 0
        seq = 1
        async for frame in frames:
            seen.append(f"{frame.sequence}:{frame.kind}")
            if frame.kind != "chunk":
                continue
            n = int(frame.payload["n"]) if frame.payload else 0  # type: ignore[call-overload]
            total += n
            if call.capability_id == "double":
                media = frame.media
                yield out(call, seq, "chunk", {"n": 2 * n}, media=media)
                seq += 1
        self.events.append(",".join(seen))
        yield out(call, seq, "completed", {"total": total})


def make(provider: object | None = None) -> tuple[CapabilityService, Any]:
    fabric = CapabilityService(NodeStandIn())  # type: ignore[arg-type]
    target = provider if provider is not None else Provider()
    fabric.register_extension(target, context="ctx")
    return fabric, target


def revision_of(fabric: CapabilityService, name: str) -> str:
    return next(descriptor_revision(d) for d in fabric.describe_local() if d.id == name)


async def call(fabric: CapabilityService, name: str, payload: Any, limit: float = 5.0) -> Any:
    return await fabric.call(ME, name, "1.0.0", revision_of(fabric, name), payload, limit)


async def stream(
    fabric: CapabilityService, name: str, payload: Any = None, limit: float = 5.0
) -> CapabilityStreamSession:
    return await fabric.stream(
        ME, name, "1.0.0", revision_of(fabric, name), payload or {}, timeout=limit
    )


async def collect(session: CapabilityStreamSession) -> list[CapabilityStreamFrame]:
    assert session.open_result.ok, session.open_result
    return [frame async for frame in session.frames]


def kinds(frames: list[CapabilityStreamFrame]) -> list[str]:
    return [f.kind for f in frames]


# -- unary ---------------------------------------------------------------------------


def test_unary_calls_answer_every_failure_as_its_typed_code() -> None:
    async def scenario() -> dict[str, Any]:
        fabric, _ = make()
        rev = revision_of(fabric, "add")
        results = {
            "ok": await call(fabric, "add", {"a": 2, "b": 3}),
            "not_found": await fabric.call(ME, "nope", "1.0.0", rev, {}),
            "version_mismatch": await fabric.call(ME, "add", "2.0.0", rev, {}),
            "revision_mismatch": await fabric.call(ME, "add", "1.0.0", "sha256:old", {}),
            "invalid_payload": await call(fabric, "add", {"a": 1}),
            "payload_too_large": await call(fabric, "add", {"a": "x" * MAX_PAYLOAD_BYTES, "b": 1}),
            "provider_error": await call(fabric, "boom", {}),
            "timeout": await call(fabric, "hang", {}, limit=0.2),
            "big_result": await call(fabric, "big", {}),
            "streamed_as_unary": await call(fabric, "good", {}),
            "unreachable": await fabric.call("12D3KooWgone", "add", "1.0.0", rev, {}),
        }
        return {k: (r.ok, r.result, r.error and r.error.code) for k, r in results.items()}

    results = run(scenario)
    assert results.pop("ok") == (True, {"sum": 5}, None)
    expected = {
        "big_result": "payload_too_large",
        "streamed_as_unary": "not_found",
    }
    for name, (ok, result, code) in results.items():
        assert not ok and result is None, name
        assert code == expected.get(name, name), name


def test_the_payload_bound_is_exact() -> None:
    async def scenario() -> tuple[str | None, str | None]:
        fabric, _ = make()
        fits = {"a": "x" * (MAX_PAYLOAD_BYTES - len('{"a":"","b":1}')), "b": 1}
        over = {**fits, "a": fits["a"] + "x"}
        at = await call(fabric, "add", fits)
        past = await call(fabric, "add", over)
        return at.error and at.error.code, past.error and past.error.code

    # At the bound the payload passes the size check (and then fails the handler's
    # arithmetic on a string: provider_error); one byte more is too large.
    assert run(scenario) == ("provider_error", "payload_too_large")


def test_excess_concurrent_calls_are_refused_not_queued() -> None:
    async def scenario() -> tuple[list[str | None], str | None]:
        fabric, _ = make()
        hanging = [
            asyncio.create_task(call(fabric, "hang", {}, limit=1.0))
            for _ in range(MAX_INFLIGHT_CALLS)
        ]
        await asyncio.sleep(0.1)
        extra = await call(fabric, "add", {"a": 1, "b": 1})
        done = await asyncio.gather(*hanging)
        return [r.error and r.error.code for r in done], extra.error and extra.error.code

    hung, extra = run(scenario)
    assert extra == "overloaded"
    assert hung == ["timeout"] * MAX_INFLIGHT_CALLS


def test_readiness_hides_a_capability_and_refuses_pinned_callers() -> None:
    async def scenario() -> tuple[bool, bool, str | None, bool]:
        fabric, provider = make()
        rev = revision_of(fabric, "flaky")
        provider.ready = False
        listed = any(d.id == "flaky" for d in fabric.describe_local())
        refused = await fabric.call(ME, "flaky", "1.0.0", rev, {})
        provider.ready = True
        again = await fabric.call(ME, "flaky", "1.0.0", rev, {})
        return listed, refused.ok, refused.error and refused.error.code, again.ok

    assert run(scenario) == (False, False, "not_found", True)


# -- streams ------------------------------------------------------------------------


def test_a_stream_is_started_ordered_and_ends_once_after_cleanup() -> None:
    async def scenario() -> tuple[list[CapabilityStreamFrame], list[bool]]:
        fabric, provider = make()
        session = await stream(fabric, "good", {"count": 3})
        assert session.input is None
        frames: list[CapabilityStreamFrame] = []
        cleaned_when_seen: list[bool] = []
        async for frame in session.frames:
            frames.append(frame)
            cleaned_when_seen.append(f"cleanup:{session.call_id}" in provider.events)
        return frames, cleaned_when_seen

    frames, cleaned = run(scenario)
    assert kinds(frames) == ["started", "chunk", "chunk", "chunk", "completed"]
    assert [f.sequence for f in frames] == [0, 1, 2, 3, 4]
    assert frames[-1].payload == {"count": 3}
    # The terminal was withheld until the handler's finally had finished.
    assert cleaned == [False, False, False, False, True]


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("trailing", "provider_error"),
        ("bad_chunk", "invalid_result"),
        ("raising", "provider_error"),
    ],
)
def test_misbehaving_handlers_get_one_synthetic_failure_after_their_cleanup(
    name: str, code: str
) -> None:
    async def scenario() -> tuple[list[CapabilityStreamFrame], bool]:
        fabric, provider = make()
        session = await stream(fabric, name, {"count": 1})
        frames = await collect(session)
        return frames, f"cleanup:{session.call_id}" in provider.events

    frames, cleaned = run(scenario)
    assert kinds(frames)[0] == "started"
    assert kinds(frames)[-1] == "failed"
    assert sum(f.terminal for f in frames) == 1
    assert frames[-1].error is not None and frames[-1].error.code == code
    assert [f.sequence for f in frames] == list(range(len(frames)))
    assert cleaned


def test_frames_that_break_the_rules_fail_the_stream() -> None:
    bad_frames: list[Callable[[CapabilityCall], Any]] = [
        lambda c: "not a frame",
        lambda c: out(c, 5, "chunk", {"n": 1}),  # out of sequence
        lambda c: CapabilityStreamFrame(
            call_id="other", direction="provider_to_caller", sequence=1, kind="chunk"
        ),
        lambda c: out(c, 1, "started"),
        lambda c: out(
            c,
            1,
            "chunk",
            {"n": 1},
            media=InlineMediaAttachment(data=b"x" * (MAX_MEDIA_BYTES + 1), media_type="audio/pcm"),
        ),
    ]

    class Odd:
        def __init__(self, make_frame: Callable[[CapabilityCall], Any]) -> None:
            self.make_frame = make_frame
            self.closed = False

        def capabilities(self) -> list[CapabilityDescriptor]:
            return [desc("odd", "server_streaming")]

        async def handle_stream(self, context: object, call: CapabilityCall) -> Any:
            try:
                yield self.make_frame(call)
                yield out(call, 2, "completed")
            finally:
                self.closed = True

    async def scenario(make_frame: Callable[[CapabilityCall], Any]) -> tuple[str, str, bool]:
        provider = Odd(make_frame)
        fabric, _ = make(provider)
        frames = await collect(await stream(fabric, "odd"))
        error = frames[-1].error
        assert error is not None
        return frames[-1].kind, error.code, provider.closed

    codes = [asyncio.run(scenario(f)) for f in bad_frames]
    assert all(kind == "failed" and closed for kind, _, closed in codes)
    assert [code for _, code, _ in codes] == [
        "invalid_result",
        "invalid_result",
        "invalid_result",
        "invalid_result",
        "payload_too_large",
    ]


def test_a_handler_without_a_terminal_fails() -> None:
    class NoEnd:
        def capabilities(self) -> list[CapabilityDescriptor]:
            return [desc("noend", "server_streaming")]

        async def handle_stream(self, context: object, call: CapabilityCall) -> Any:
            yield out(call, 1, "chunk", {"n": 1})

    async def scenario() -> list[CapabilityStreamFrame]:
        fabric, _ = make(NoEnd())
        return await collect(await stream(fabric, "noend"))

    frames = run(scenario)
    assert kinds(frames) == ["started", "chunk", "failed"]
    assert frames[-1].error is not None and frames[-1].error.code == "provider_error"


def test_closing_the_iterator_early_cancels_the_handler() -> None:
    async def scenario() -> tuple[bool, bool, int]:
        fabric, provider = make()
        session = await stream(fabric, "endless")
        async for frame in session.frames:
            if frame.sequence == 3:
                break
        await session.frames.aclose()  # type: ignore[attr-defined]
        for _ in range(100):
            if f"cleanup:{session.call_id}" in provider.events and not fabric._served:
                break
            await asyncio.sleep(0.01)
        again = fabric.cancel_stream(ME, session.call_id)
        return f"cleanup:{session.call_id}" in provider.events, again, len(fabric._served)

    assert run(scenario) == (True, False, 0)


def test_cancel_is_for_the_caller_only_idempotent_and_typed() -> None:
    async def scenario() -> tuple[list[bool], list[CapabilityStreamFrame]]:
        fabric, _ = make()
        session = await stream(fabric, "endless")
        answers = [fabric.cancel_stream(NodeId("12D3KooWstranger"), session.call_id)]
        answers.append(fabric.cancel_stream(ME, session.call_id, "enough"))
        answers.append(fabric.cancel_stream(ME, session.call_id, "enough"))
        frames = [f async for f in session.frames]
        answers.append(fabric.cancel_stream(ME, "unknown"))
        return answers, frames

    answers, frames = run(scenario)
    assert answers == [False, True, False, False]
    assert frames[0].kind == "started"
    assert frames[-1].kind == "cancelled"
    assert frames[-1].error is not None and frames[-1].error.message == "enough"
    assert sum(f.terminal for f in frames) == 1


def test_a_stream_past_its_deadline_fails_with_timeout() -> None:
    async def scenario() -> tuple[list[CapabilityStreamFrame], bool]:
        fabric, provider = make()
        session = await stream(fabric, "silent", limit=0.3)
        frames = await collect(session)
        return frames, f"cleanup:{session.call_id}" in provider.events

    frames, cleaned = run(scenario)
    assert kinds(frames) == ["started", "failed"]
    assert frames[-1].error is not None and frames[-1].error.code == "timeout"
    assert cleaned


def test_admission_refusal_creates_no_stream() -> None:
    async def scenario() -> tuple[bool, str | None, list[CapabilityStreamFrame], int]:
        fabric, provider = make()
        provider.refuse_admission = True
        session = await stream(fabric, "good")
        frames = [f async for f in session.frames]
        error = session.open_result.error
        return session.open_result.ok, error and error.code, frames, len(fabric._served)

    assert run(scenario) == (False, "not_found", [], 0)


def test_client_streaming_reads_the_ordered_caller_lifecycle() -> None:
    async def scenario() -> tuple[list[CapabilityStreamFrame], list[str]]:
        fabric, provider = make()
        session = await stream(fabric, "sum")
        assert session.input is not None
        for n in (1, 2, 3):
            assert await session.input.send_chunk({"n": n})
        assert await session.input.complete()
        assert not await session.input.send_chunk({"n": 4})  # input is half-closed
        return await collect(session), provider.events

    frames, events = run(scenario)
    assert kinds(frames) == ["started", "completed"]
    assert frames[-1].payload == {"total": 6}
    assert events == ["0:started,1:chunk,2:chunk,3:chunk,4:completed"]


def test_bidirectional_streams_carry_media_both_ways() -> None:
    async def scenario() -> list[CapabilityStreamFrame]:
        fabric, _ = make()
        session = await stream(fabric, "double")
        assert session.input is not None
        pcm = InlineMediaAttachment(
            data=bytes(range(200)), media_type="audio/pcm", sample_rate=16000, channels=1
        )
        await session.input.send_chunk({"n": 21}, media=pcm)
        await session.input.complete()
        return await collect(session)

    frames = run(scenario)
    assert kinds(frames) == ["started", "chunk", "completed"]
    assert frames[1].payload == {"n": 42}
    assert isinstance(frames[1].media, InlineMediaAttachment)
    assert frames[1].media.data == bytes(range(200))
    assert frames[1].media.sample_rate == 16000


def test_invalid_caller_input_fails_only_that_call() -> None:
    async def scenario() -> tuple[list[CapabilityStreamFrame], bool]:
        fabric, _ = make()
        session = await stream(fabric, "sum")
        assert session.input is not None
        await session.input.send_chunk({"n": "not a number"})
        frames = await collect(session)
        other = await call(fabric, "add", {"a": 1, "b": 2})
        return frames, other.ok

    frames, other_ok = run(scenario)
    assert kinds(frames) == ["started", "failed"]
    assert frames[-1].error is not None and frames[-1].error.code == "invalid_payload"
    assert other_ok


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(-1000, 1000), max_size=30))
def test_bidirectional_output_follows_input_in_order(values: list[int]) -> None:
    async def scenario() -> list[CapabilityStreamFrame]:
        fabric, _ = make()
        session = await stream(fabric, "double")
        assert session.input is not None
        for n in values:
            await session.input.send_chunk({"n": n})
        await session.input.complete()
        return await collect(session)

    frames = run(scenario)
    assert [f.sequence for f in frames] == list(range(len(values) + 2))
    assert [f.payload["n"] for f in frames[1:-1]] == [2 * n for n in values]  # type: ignore[index]
    assert frames[-1].kind == "completed"


# -- registration, gossip and shutdown ------------------------------------------------


def test_bad_descriptors_are_refused_and_builtins_win() -> None:
    class Bad:
        def capabilities(self) -> list[object]:
            return [
                desc("nohandler", "bidirectional"),
                desc("badschema", input_schema={"type": 5}),
                "not a descriptor",
                desc("ok"),
            ]

        async def handle_call(self, context: object, call: CapabilityCall) -> dict[str, object]:
            return {"from": "extension"}

    class Builtin:
        def capabilities(self) -> list[CapabilityDescriptor]:
            return [desc("ok")]

        async def handle_call(self, context: object, call: CapabilityCall) -> dict[str, object]:
            return {"from": "builtin"}

    class Raises:
        def capabilities(self) -> list[CapabilityDescriptor]:
            raise RuntimeError("no")

    async def scenario() -> tuple[list[str], list[str], Any]:
        fabric = CapabilityService(NodeStandIn())  # type: ignore[arg-type]
        accepted = [d.id for d in fabric.register_extension(Bad(), "ctx")]
        fabric.register_extension(Builtin(), "ctx", builtin=True)
        assert fabric.register_extension(Raises(), "ctx") == []
        result = await call(fabric, "ok", {})
        return accepted, sorted(fabric.tags()), result.result

    accepted, tags, result = run(scenario)
    assert accepted == ["ok"]
    assert tags == ["ok"]
    assert result == {"from": "builtin"}


def test_tags_and_capability_nodes_ride_the_nodes_own_reading() -> None:
    async def scenario() -> None:
        node = NodeStandIn()
        fabric = CapabilityService(node)  # type: ignore[arg-type]
        before = node.reading.observed_at
        fabric.advertise("memory")
        fabric.advertise("memory")
        assert node.reading.capabilities == ("memory",)
        assert node.reading.observed_at != before  # a fresh reading, published at once
        summaries = [
            CapabilityNodeSummary(plugin_id="p", node_id=f"n{i}", bundle_id="b", version="1")
            for i in range(MAX_NODES_PER_HOST + 1)
        ]
        assert all(fabric.publish_node(s) for s in summaries[:-1])
        assert not fabric.publish_node(summaries[-1])
        assert fabric.publish_node(summaries[0])  # a replacement is not a new one
        assert len(node.reading.capability_nodes) == MAX_NODES_PER_HOST
        for s in summaries[:-1]:
            assert fabric.withdraw_node(s.plugin_id, s.node_id)
        fabric.withdraw("memory")
        assert node.reading.capabilities == ()
        assert node.reading.capability_nodes == ()
        assert fabric.gossip() == ((), ())

    run(scenario)


def test_close_stops_discovery_new_calls_and_running_streams() -> None:
    async def scenario() -> tuple[list[CapabilityDescriptor], str | None, str, frozenset[str]]:
        fabric, _ = make()
        rev = revision_of(fabric, "add")
        session = await stream(fabric, "endless")
        reader: Awaitable[list[CapabilityStreamFrame]] = asyncio.ensure_future(collect(session))
        await asyncio.sleep(0.05)
        await fabric.close()
        frames = await reader
        refused = await fabric.call(ME, "add", "1.0.0", rev, {"a": 1, "b": 1})
        return (
            fabric.describe_local(),
            refused.error and refused.error.code,
            frames[-1].kind,
            (fabric.tags()),
        )

    listed, code, last, tags = run(scenario)
    assert listed == []
    assert code == "not_found"
    assert last == "cancelled"
    assert tags == frozenset()


def test_the_reference_echo_provider_serves_all_four_modes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_package(ECHO_SOURCE, tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    from skulk_echo_provider import EchoExtension  # noqa: PLC0415 (installed just above)

    async def scenario() -> dict[str, Any]:
        fabric, _ = make(EchoExtension())
        found = {d.qualified_id: d.io_mode for d in fabric.describe_local()}
        unary = await call(fabric, "echo", {"text": "hi"})
        streamed = await collect(await stream(fabric, "echo.stream", {"text": "ab", "count": 2}))
        session = await stream(fabric, "echo.collect")
        assert session.input is not None
        await session.input.send_chunk(
            {"text": "x"}, InlineMediaAttachment(data=b"12", media_type="a/b")
        )
        await session.input.complete()
        collected = await collect(session)
        return {"found": found, "unary": unary.result, "streamed": streamed, "collected": collected}

    result = run(scenario)
    assert result["found"] == {
        "echo@1.0.0": "unary",
        "echo.collect@1.0.0": "client_streaming",
        "echo.duplex@1.0.0": "bidirectional",
        "echo.stream@1.0.0": "server_streaming",
    }
    assert result["unary"] == {"text": "hi"}
    assert [f.media.data for f in result["streamed"] if f.media] == [b"ab", b"ab"]
    assert result["collected"][-1].payload["media_bytes"] == 2


def test_an_oversized_input_chunk_is_refused_before_it_leaves_the_caller() -> None:
    async def scenario() -> tuple[bool, list[CapabilityStreamFrame]]:
        fabric, _ = make()
        session = await stream(fabric, "double")
        assert session.input is not None
        huge = InlineMediaAttachment(data=b"\0" * (MAX_MEDIA_BYTES + 1), media_type="audio/pcm")
        sent = await session.input.send_chunk({"n": 1}, media=huge)
        frames = [f async for f in session.frames]
        for _ in range(100):
            if not fabric._served:
                break
            await asyncio.sleep(0.01)
        assert not fabric._served  # the provider was cancelled too
        return sent, frames

    sent, frames = run(scenario)
    assert not sent
    assert kinds(frames) == ["started", "failed"]
    assert frames[-1].error is not None and frames[-1].error.code == "payload_too_large"


def test_a_slow_reader_slows_a_local_provider_and_loses_nothing() -> None:
    async def scenario() -> list[CapabilityStreamFrame]:
        fabric, _ = make()
        session = await stream(fabric, "good", {"count": 700})
        frames: list[CapabilityStreamFrame] = []
        async for frame in session.frames:
            frames.append(frame)
            if frame.sequence % 100 == 0:
                await asyncio.sleep(0.02)
        return frames

    frames = run(scenario)
    assert [f.sequence for f in frames] == list(range(702))
    assert frames[-1].kind == "completed"
