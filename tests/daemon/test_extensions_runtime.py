"""The extension runtime in process: the loader over real installed entry points, the
``skulk_requires`` check at its edges, the middleware guard's rules, the summary an
observer gets, the lifetime hooks' budget, and the cluster snapshot."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from importlib.metadata import EntryPoint, distributions
from pathlib import Path
from typing import Any, cast

import pytest

from skulk_core.chat.generation import GenerationStats
from skulk_core.cluster.telemetry import (
    Accelerator,
    NodeIdentityInfo,
    NodeMemory,
    NodeResources,
    NodeSystem,
    NodeTelemetry,
    Participation,
)
from skulk_core.ids import NodeId, NodeInstallId
from skulk_core.models.cards import Memory
from skulk_core.state.state import State, Topology
from skulk_daemon.chat.generation import KeepAlive
from skulk_daemon.chat.task import ChatTask, TaskMessage
from skulk_daemon.chat.turn import ContentDelta, ReasoningDelta, TurnEnd, TurnError, TurnEvent
from skulk_daemon.extensions import (
    BaseChatMiddleware,
    ChatResponseSummary,
    ChatTaskParams,
    ClusterNodeView,
    ExtensionContext,
)
from skulk_daemon.extensions.context import cluster_views
from skulk_daemon.extensions.lifecycle import ExtensionHost
from skulk_daemon.extensions.loader import (
    ENTRY_POINT_GROUP,
    LoadedExtension,
    Refusal,
    check_requires,
    load_extensions,
)
from skulk_daemon.extensions.middleware import ChatMiddlewareRunner, NamedMiddleware
from tests.extension_site import install_fixture

pytestmark = pytest.mark.xdist_group("timing")

CONTEXT = cast(ExtensionContext, object())
"""The guard hands the context through untouched; these hooks never use it."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    install_fixture("middleware-probe", site)
    install_fixture("faulty-extensions", site)
    return site


@pytest.fixture
def installed(site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[EntryPoint]]:
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("SKULK_PROBE_OUT", raising=False)
    found = [
        ep
        for dist in distributions(path=[str(site)])
        for ep in dist.entry_points
        if ep.group == ENTRY_POINT_GROUP
    ]
    yield sorted(found, key=lambda ep: ep.name)


# -- the loader ----------------------------------------------------------------------


def test_installed_entry_points_load_or_are_refused_with_a_reason(
    installed: list[EntryPoint], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "skulk.extensions")
    loaded = load_extensions(installed, version="0.1.0")
    assert [(e.name, e.distribution) for e in loaded] == [
        ("hook-raiser", "faulty-extensions 0.1.0"),
        ("middleware-probe", "skulk-middleware-probe 1.0.0"),
        ("stop-hanger", "faulty-extensions 0.1.0"),
    ]
    assert [e.middleware is not None for e in loaded] == [True, True, False]
    refused = {r.message for r in caplog.records if r.levelno == logging.ERROR}
    assert refused == {
        "extension construct-error (faulty-extensions 0.1.0) refused: constructing "
        "faulty_extensions.construct_error:ConstructErrorExtension raised ValueError: "
        "faulty constructor on purpose",
        "extension import-error (faulty-extensions 0.1.0) refused: importing "
        "faulty_extensions.import_error:ImportErrorExtension raised RuntimeError: "
        "faulty import on purpose",
        "extension too-new (faulty-extensions 0.1.0) refused: it requires Skulk >=99.0 "
        "but this node runs Skulk 0.1.0",
    }


def test_a_second_extension_with_a_taken_name_is_refused(
    installed: list[EntryPoint], caplog: pytest.LogCaptureFixture
) -> None:
    probe = next(ep for ep in installed if ep.name == "middleware-probe")
    again = EntryPoint(name="probe-again", value=probe.value, group=ENTRY_POINT_GROUP)
    loaded = load_extensions([probe, again], version="0.1.0")
    assert [e.name for e in loaded] == ["middleware-probe"]
    assert "another loaded extension is already named 'middleware-probe'" in caplog.text


def test_the_kill_switch_loads_nothing(
    installed: list[EntryPoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKULK_EXTENSIONS_DISABLE", "1")
    assert load_extensions(installed, version="0.1.0") == []


@pytest.mark.parametrize(
    ("requires", "version"),
    [(">=0.1,<1", "0.1.0"), ("~=0.1", "0.1.5"), (">=0.1", "0.2.0.dev3"), ("==0.1.*", "0.1.0")],
)
def test_skulk_requires_that_matches(requires: str, version: str) -> None:
    check_requires(requires, version)


@pytest.mark.parametrize(
    ("requires", "reason"),
    [
        (">=2.0,<3", "it requires Skulk >=2.0,<3 but this node runs Skulk 0.1.0"),
        ("<0.1", "it requires Skulk <0.1 but this node runs Skulk 0.1.0"),
        ("two or later", "skulk_requires 'two or later' is not a PEP 440 specifier"),
        (None, "it declares no skulk_requires"),
        ("", "it declares no skulk_requires"),
        (2, "it declares no skulk_requires"),
    ],
)
def test_skulk_requires_that_is_refused(requires: object, reason: str) -> None:
    with pytest.raises(Refusal) as refused:
        check_requires(requires, "0.1.0")
    assert str(refused.value.args[0]).startswith(reason)


# -- the middleware guard -------------------------------------------------------------

ASK = ChatTask(
    model="m",
    messages=(TaskMessage(role="system", content="s"), TaskMessage(role="user", content="hi")),
    extra_template_args={"k": 1},
)


class Scripted(BaseChatMiddleware):
    def __init__(self, result: Any = None, *, raises: bool = False, scribble: bool = False):
        self.result = result
        self.raises = raises
        self.scribble = scribble
        self.given: list[ChatTaskParams] = []
        self.seen: list[ChatResponseSummary] = []

    async def transform_chat_request(
        self, context: ExtensionContext, task_params: ChatTaskParams
    ) -> ChatTaskParams:
        self.given.append(task_params)
        if self.scribble:
            task_params.extra_template_args["k"] = "scribbled"
        if self.raises:
            raise RuntimeError("boom")
        return task_params if self.result is None else cast(ChatTaskParams, self.result)

    async def observe_chat_response(
        self, context: ExtensionContext, task_params: ChatTaskParams, summary: ChatResponseSummary
    ) -> None:
        if self.raises:
            raise RuntimeError("boom")
        self.seen.append(summary)


def runner(*middleware: BaseChatMiddleware) -> ChatMiddlewareRunner:
    return ChatMiddlewareRunner(
        [NamedMiddleware(f"ext{i}", m) for i, m in enumerate(middleware)], CONTEXT
    )


def transform(*middleware: BaseChatMiddleware, task: ChatTask = ASK) -> ChatTask:
    return asyncio.run(runner(*middleware).transform(task))


def test_no_middleware_is_inert() -> None:
    idle = ChatMiddlewareRunner()
    assert not idle.active
    assert asyncio.run(idle.transform(ASK)) is ASK


def test_transforms_chain_in_load_order() -> None:
    shorter = dataclasses.replace(ASK, max_tokens=5)
    second = Scripted()
    assert transform(Scripted(shorter), second).max_tokens == 5
    assert second.given[0].max_tokens == 5


def test_a_raising_transform_is_skipped_and_cannot_scribble_on_the_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    after = Scripted()
    result = transform(Scripted(raises=True, scribble=True), after)
    assert result == ASK
    assert ASK.extra_template_args == {"k": 1}
    assert after.given[0].extra_template_args == {"k": 1}
    assert "extension ext0: transform_chat_request raised; skipped" in caplog.text


@pytest.mark.parametrize(
    ("returned", "why"),
    [
        ("not params", "returned str, not ChatTaskParams; discarded"),
        (dataclasses.replace(ASK, messages=()), "result discarded: it has no messages"),
        (
            dataclasses.replace(
                ASK, max_tokens=3, messages=(*ASK.messages, TaskMessage(role="assistant"))
            ),
            "result discarded: its last message is 'assistant', not a trailing 'user' turn",
        ),
    ],
)
def test_an_unanswerable_transform_is_discarded_wholesale(
    returned: object, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert transform(Scripted(returned)) == ASK
    assert why in caplog.text


def test_a_request_ending_in_a_tool_result_keeps_that_trailing_turn() -> None:
    tool_turn = dataclasses.replace(
        ASK, messages=(*ASK.messages, TaskMessage(role="tool", content="42", tool_call_id="c"))
    )
    kept = dataclasses.replace(tool_turn, max_tokens=7)
    assert transform(Scripted(kept), task=tool_turn) == kept
    user_last = dataclasses.replace(tool_turn, messages=ASK.messages)
    assert transform(Scripted(user_last), task=tool_turn) == tool_turn


# -- observation ---------------------------------------------------------------------

END = TurnEnd(
    finish_reason="stop",
    tool_calls=(),
    prompt_tokens=4,
    completion_tokens=3,
    stats=GenerationStats(
        prompt_tps=1.0,
        generation_tps=1.0,
        prompt_tokens=4,
        generation_tokens=3,
        serving_batches=False,
        in_flight_at_admission=1,
        time_to_first_token_ms=1.0,
    ),
)


async def _events(*events: TurnEvent) -> AsyncIterator[TurnEvent]:
    for event in events:
        yield event


async def _serve(
    chain: ChatMiddlewareRunner, events: list[TurnEvent], *, stop_after: int | None = None
) -> list[bytes]:
    """Shape the events like a wire format would, through the observation taps."""
    turn = chain.observe_turn(ASK, "cmd-1", _events(*events))

    async def body() -> AsyncIterator[bytes]:
        async for event in turn.events:
            yield repr(event).encode()

    sent: list[bytes] = []
    stream = turn.respond(body())
    async for chunk in stream:
        sent.append(chunk)
        if stop_after is not None and len(sent) == stop_after:
            await stream.aclose()  # type: ignore[attr-defined]
            break
    await chain.drain(5)
    return sent


def test_observers_get_an_immutable_summary_after_the_body_and_cannot_touch_it() -> None:
    raising, watching = Scripted(raises=True), Scripted()
    chain = runner(raising, watching)
    events: list[TurnEvent] = [
        KeepAlive(),
        ReasoningDelta("hmm "),
        ContentDelta("one,"),
        ContentDelta(" two"),
        END,
    ]
    sent = asyncio.run(_serve(chain, events))
    assert sent == [repr(e).encode() for e in events]
    (summary,) = watching.seen
    assert summary == ChatResponseSummary(
        text="one, two",
        thinking="hmm ",
        finish_reason="stop",
        error=False,
        model="m",
        command_id="cmd-1",
        prompt_tokens=4,
        completion_tokens=3,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.text = "changed"  # type: ignore[misc]


def test_an_error_turn_and_a_client_that_left_are_observed_as_errors() -> None:
    watching = Scripted()
    chain = runner(watching)
    asyncio.run(_serve(chain, [ContentDelta("a"), TurnError("cancelled", "gone")]))
    asyncio.run(_serve(chain, [ContentDelta("a"), ContentDelta("b"), END], stop_after=1))
    failed, left = watching.seen
    assert (failed.error, failed.error_code, failed.finish_reason) == (True, "cancelled", None)
    assert (left.error, left.error_code, left.text) == (True, "client_disconnected", "a")


def test_a_hanging_observer_holds_up_no_other_and_is_cancelled_at_drain() -> None:
    class Hanging(BaseChatMiddleware):
        cancelled = False

        async def observe_chat_response(
            self, context: ExtensionContext, task_params: ChatTaskParams, s: ChatResponseSummary
        ) -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                Hanging.cancelled = True
                raise

    watching = Scripted()
    chain = runner(Hanging(), watching)

    async def scenario() -> None:
        chain.observe(
            ASK, ChatResponseSummary(text="", thinking="", finish_reason="stop", error=False)
        )
        await asyncio.sleep(0.05)
        assert len(watching.seen) == 1
        await chain.drain(0.1)

    asyncio.run(scenario())
    assert Hanging.cancelled


# -- lifetime hooks ------------------------------------------------------------------


class Lifetime:
    def __init__(self, name: str, delay: float, events: list[str], *, raises: bool = False):
        self.name, self.delay, self.events, self.raises = name, delay, events, raises

    async def on_start(self, context: ExtensionContext) -> None:
        self.events.append(f"{self.name}:start")
        if self.raises:
            raise RuntimeError("boom")

    async def on_stop(self) -> None:
        self.events.append(f"{self.name}:stop")
        if self.raises:
            raise RuntimeError("boom")
        await asyncio.sleep(self.delay)
        self.events.append(f"{self.name}:stopped")


def host(*objs: Lifetime) -> ExtensionHost:
    return ExtensionHost([LoadedExtension(o.name, "test 0", o) for o in objs], CONTEXT)


def test_on_start_runs_once_and_on_stop_hooks_share_one_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[str] = []
    lifetimes = host(
        Lifetime("slow", 3600, events),
        Lifetime("quick", 0, events),
        Lifetime("bad", 0, events, raises=True),
    )

    async def scenario() -> float:
        await lifetimes.start()
        await lifetimes.start()
        began = asyncio.get_running_loop().time()
        await lifetimes.stop(budget=0.2)
        await lifetimes.stop(budget=0.2)
        return asyncio.get_running_loop().time() - began

    took = asyncio.run(scenario())
    assert sorted(e for e in events if e.endswith(":start")) == [
        "bad:start",
        "quick:start",
        "slow:start",
    ]
    assert {"slow:stop", "quick:stop", "quick:stopped", "bad:stop"} <= set(events)
    assert "slow:stopped" not in events
    assert took < 0.2 + 2.5  # the budget, then the cancellation grace at most
    assert lifetimes.abandoned == ()
    assert "extension bad: on_start raised; skipped" in caplog.text
    assert "extension bad: on_stop raised; skipped" in caplog.text
    assert "on_stop hook(s) of slow still running after the 0 s shutdown budget" in caplog.text


class Stubborn:
    """An ``on_stop`` that swallows its cancellation until the test lets it go."""

    name = "stubborn"

    def __init__(self) -> None:
        self.cancelled = 0
        self.release: asyncio.Event | None = None

    async def on_stop(self) -> None:
        self.release = asyncio.Event()
        while not self.release.is_set():
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled += 1


def test_a_hook_that_ignores_its_cancellation_is_abandoned_not_awaited() -> None:
    events: list[str] = []
    stubborn = Stubborn()
    lifetimes = ExtensionHost(
        [
            LoadedExtension(stubborn.name, "test 0", stubborn),
            LoadedExtension("quick", "test 0", Lifetime("quick", 0.1, events)),
        ],
        CONTEXT,
    )

    async def scenario() -> float:
        began = asyncio.get_running_loop().time()
        await lifetimes.stop(budget=0.3)
        took = asyncio.get_running_loop().time() - began
        assert stubborn.release is not None
        stubborn.release.set()  # so the loop can close
        return took

    took = asyncio.run(scenario())
    assert events == ["quick:stop", "quick:stopped"]
    assert stubborn.cancelled == 1
    assert lifetimes.abandoned == ("stubborn",)
    assert took < 0.3 + 2.5  # the budget, then the cancellation grace at most


# -- the cluster snapshot --------------------------------------------------------------

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def reading(node: str, *, tags: tuple[str, ...] = (), gpu: str | None = None) -> NodeTelemetry:
    return NodeTelemetry(
        node_id=NodeId(node),
        identity=NodeIdentityInfo(
            friendly_name=f"{node}-box", node_install_id=NodeInstallId("i"), skulk_version="0.1.0"
        ),
        memory=NodeMemory(ram_total=Memory(in_bytes=8 << 30), ram_available=Memory(in_bytes=1)),
        system=NodeSystem(
            os="Linux",
            os_version="6",
            machine="x86_64",
            cpu_model="cpu",
            cpu_count=4,
            hostname=node,
            python_version="3.11",
            accelerator=Accelerator(vendor=gpu, name="card") if gpu else None,
        ),
        resources=NodeResources(
            backends=("llama_cpp",),
            participation=Participation.API_ONLY,
            api_available=True,
            data_transport="zmq",
        ),
        observed_at=NOW,
        capabilities=tags,
    )


def test_the_cluster_snapshot_reads_telemetry_and_leaves_the_unknown_empty() -> None:
    later = NOW + timedelta(seconds=5)
    state = State(
        topology=Topology(nodes=(NodeId("c"), NodeId("a"))), last_seen={NodeId("a"): later}
    )
    telemetry = {
        NodeId("a"): reading("a", tags=("memory", "echo"), gpu="amd"),
        NodeId("b"): reading("b"),
    }
    views = cluster_views(state, telemetry)
    assert isinstance(views, tuple)
    assert [v.node_id for v in views] == ["a", "b", "c"]
    assert views[0] == ClusterNodeView(
        node_id="a",
        friendly_name="a-box",
        backends=("llama_cpp",),
        participation="api_only",
        skulk_version="0.1.0",
        accelerator_vendor="amd",
        ram_total_bytes=8 << 30,
        last_telemetry=later,
        capabilities=("echo", "memory"),
    )
    assert views[1].accelerator_vendor is None
    assert views[1].last_telemetry == NOW
    assert views[2] == ClusterNodeView(node_id="c")
    with pytest.raises(dataclasses.FrozenInstanceError):
        views[0].capabilities = ()  # type: ignore[misc]
