"""One steward turn: the harness's baseline, the investigation loop, the answer.

The turn runs on the steward instance only (admission pinned to it, never a sibling):

1. the harness's own ``get_cluster_state`` call, before any generation (an unavailable
   baseline ends the turn with the normal chat error);
2. a standalone inventory question (:mod:`skulk_core.steward.inventory`) is answered
   from that observation without generation;
3. otherwise up to :data:`MAX_TOOL_CALLS` calls in all, each chosen by one generation
   under a grammar built from the tool schemas (:func:`~skulk_core.steward.tools.step_schema`),
   so the brain can only emit a call the server runs; the loop ends when the brain
   answers ``{"tool": "answer"}``, repeats a call, or the budget is spent;
4. the answer, generated from the evidence and streamed as content.

Each tool step goes out as a reasoning delta while the investigation runs. The turn's
command id cancels the whole turn: the step generating stops and no further step starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from skulk_core.chat.generation import GenerationStats
from skulk_core.ids import CommandId, InstanceId
from skulk_core.steward.inventory import deterministic_answer
from skulk_core.steward.tools import (
    ANSWER,
    MAX_TOOL_CALLS,
    StewardTool,
    bounded,
    step_schema,
)
from skulk_daemon.chat.admission import Admitted, admit
from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.chat.generation import CANCELLED_MESSAGE, KeepAlive, generation_events
from skulk_daemon.chat.task import ChatTask, JsonSchemaFormat, TaskMessage
from skulk_daemon.chat.turn import ContentDelta, ReasoningDelta, TurnEnd, TurnError, TurnEvent
from skulk_daemon.chat.turn import turn_events as parse_turn
from skulk_daemon.errors import ApiError
from skulk_daemon.node.node import Node
from skulk_daemon.steward.read_tools import ReadTools
from skulk_daemon.worker.supervisor import Supervisor

log = logging.getLogger(__name__)

STEP_MAX_TOKENS: Final = 96
"""One step is one small JSON object; the grammar ends it well before this."""
ANSWER_MAX_TOKENS: Final = 256
MAX_EVIDENCE_CHARS: Final = 6000
"""The evidence a step's prompt repeats (newest kept), on top of the conversation."""
MAX_HISTORY_MESSAGES: Final = 12
_INTERNAL_WORDS: Final = ("steward", "internal service", "resident model", "brain", "yourself")

ProposalMaker = Callable[[str, dict[str, str], str], Awaitable[str]]
"""Creates one inert proposal from a proposal tool's call and the trace so far; answers
the tool's result."""


@dataclass(slots=True)
class _Totals:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stats: GenerationStats | None = None


@dataclass(slots=True)
class TurnControl:
    """What cancelling the turn's command reaches: the step generating now."""

    commands: ActiveCommands
    cancelled: bool = False
    step: CommandId | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if self.step is not None:
            self.commands.cancel(self.step)


@dataclass(slots=True)
class StewardTurn:
    node: Node
    worker: Supervisor
    commands: ActiveCommands
    tools: ReadTools
    instance_id: InstanceId
    brain_model: str
    surface: tuple[StewardTool, ...]
    system_prompt: str
    history: tuple[TaskMessage, ...]
    control: TurnControl
    propose: ProposalMaker | None = None
    max_tool_calls: int = MAX_TOOL_CALLS
    answer_tokens: int | None = None
    """The client's ``max_tokens``: the answer's length (at most :data:`ANSWER_MAX_TOKENS`)."""
    evidence: list[str] = field(default_factory=list)

    @property
    def question(self) -> str:
        return self.history[-1].content

    def _messages(self, instruction: str) -> tuple[TaskMessage, ...]:
        history = self.history[-MAX_HISTORY_MESSAGES:]
        kept: list[str] = []
        size = 0
        for item in reversed(self.evidence):
            if size + len(item) > MAX_EVIDENCE_CHARS:
                break
            kept.insert(0, item)
            size += len(item)
        body = (
            f"{self.question}\n\nEvidence gathered by Skulk's tools:\n"
            + "\n".join(kept)
            + f"\n\n{instruction}"
        )
        tools = "\n".join(
            f"- {t.name}({', '.join(t.arguments)}): {t.description}" for t in self.surface
        )
        return (
            TaskMessage(role="system", content=f"{self.system_prompt}\n\nTools:\n{tools}"),
            *history[:-1],
            TaskMessage(role="user", content=body),
        )

    def _task(
        self, instruction: str, max_tokens: int, schema: dict[str, object] | None
    ) -> ChatTask:
        return ChatTask(
            model=self.brain_model,
            messages=self._messages(instruction),
            max_tokens=max_tokens,
            temperature=0.0 if schema is not None else 0.3,
            response_format=JsonSchemaFormat(schema=schema) if schema is not None else None,
            enable_thinking=False,
        )

    async def _generate(self, task: ChatTask, totals: _Totals) -> AsyncIterator[TurnEvent]:
        """One generation on the steward instance, its events parsed."""
        try:
            admitted: Admitted = await asyncio.to_thread(
                admit, self.node, task, pinned=self.instance_id
            )
        except ApiError as exc:
            # NOTE: the response has begun; a steward that disappeared since the check
            # (a repair at the wrong moment) ends the turn as an error chunk.
            yield TurnError(exc.code, exc.message)
            return
        if self.control.cancelled:  # cancelled while the step waited for admission
            yield TurnError("cancelled", CANCELLED_MESSAGE)
            return
        self.control.step = admitted.command_id
        stopped = False
        try:
            events = parse_turn(admitted, generation_events(self.worker, self.commands, admitted))
            async with contextlib.aclosing(events):  # type: ignore[type-var]
                async for event in events:
                    if self.control.cancelled and not stopped:
                        # NOTE: a cancel that came before the step's generation registered
                        # its command reached nothing; the step's events (keep-alives
                        # included) repeat it here, so the step stops within a tick.
                        stopped = self.commands.cancel(admitted.command_id)
                    if isinstance(event, TurnEnd):
                        totals.prompt_tokens += event.prompt_tokens
                        totals.completion_tokens += event.completion_tokens
                        totals.stats = event.stats
                    yield event
        finally:
            self.control.step = None

    def _trace(self, tool: str, arguments: dict[str, str], result: str, note: str = "") -> str:
        args = json.dumps(arguments, separators=(",", ":")) if arguments else "{}"
        line = f"[tool] {tool}{note} {args} -> {result}"
        self.evidence.append(f"{tool} {args}: {result}")
        return line + "\n"

    async def events(self) -> AsyncIterator[TurnEvent]:
        totals = _Totals()
        internal = any(word in self.question.lower() for word in _INTERNAL_WORDS)
        try:
            baseline = self.tools.cluster_state(internal=internal)
        except Exception as exc:  # the baseline is required: no evidence, no answer
            log.exception("the steward's baseline cluster state failed")
            yield TurnError("steward_baseline_unavailable", f"cluster state unavailable: {exc}")
            return
        yield ReasoningDelta(self._trace("get_cluster_state", {}, baseline, " (baseline)"))
        calls = 1
        view = self.node.view()
        answer = deterministic_answer(
            self.question, view.state, self.tools.names(), datetime.now(UTC)
        )
        if answer is not None:
            yield ReasoningDelta("[inventory] answered from the observation, without generation\n")
            yield ContentDelta(answer)
            yield _end(totals)
            return
        seen: set[str] = {"get_cluster_state {}"}
        names = tuple(self.tools.names().values())
        models = tuple(str(e.card.model_id) for e in self.node.catalog().entries())
        called = {"get_cluster_state"}
        budget = min(self.max_tool_calls, MAX_TOOL_CALLS)
        while calls < budget:
            # NOTE: the first model-directed step must call a tool (the baseline alone
            # rarely answers a diagnostic question); later steps may answer.
            schema = step_schema(
                self.surface, names, models, allow_answer=calls > 1, called=frozenset(called)
            )
            if self.control.cancelled:
                yield TurnError("cancelled", CANCELLED_MESSAGE)
                return
            text: list[str] = []
            task = self._task(
                'Choose the next step as JSON: call one tool, or {"tool": "answer"} when the '
                "evidence answers the question.\nNext step:",
                STEP_MAX_TOKENS,
                schema,
            )
            async for event in self._generate(task, totals):
                match event:
                    case ContentDelta():
                        text.append(event.text)
                    case TurnError():
                        yield event
                        return
                    case KeepAlive():
                        yield event
                    case _:
                        pass
            step = _parse_step("".join(text))
            if step is None:
                yield ReasoningDelta("[step] no complete step within its token budget\n")
                break
            if step[0] == ANSWER:
                yield ReasoningDelta("[step] the evidence suffices; answering\n")
                break
            if self.control.cancelled:  # the step finished as the turn was cancelled
                yield TurnError("cancelled", CANCELLED_MESSAGE)
                return
            tool, arguments = step
            key = f"{tool} {json.dumps(arguments, sort_keys=True, separators=(',', ':'))}"
            if key in seen:
                # The same call again would add no evidence.
                yield ReasoningDelta(f"[step] {tool} repeated; answering from the evidence\n")
                break
            seen.add(key)
            called.add(tool)
            calls += 1
            if any(t.name == tool and t.proposal for t in self.surface) and self.propose:
                result = bounded(await self.propose(tool, arguments, "\n".join(self.evidence)))
            else:
                result = await self.tools.run(tool, arguments, internal=internal)
            yield ReasoningDelta(self._trace(tool, arguments, result))
        if self.control.cancelled:
            yield TurnError("cancelled", CANCELLED_MESSAGE)
            return
        task = self._task(
            "Answer the question from this evidence only. Quote node names, models and "
            "numbers exactly as the evidence gives them; say so when the evidence does not "
            "show something.\nSkulk's answer:",
            min(self.answer_tokens or ANSWER_MAX_TOKENS, ANSWER_MAX_TOKENS),
            None,
        )
        async for event in self._generate(task, totals):
            match event:
                case ContentDelta() | KeepAlive():
                    yield event
                case TurnError():
                    yield event
                    return
                case TurnEnd():
                    yield TurnEnd(
                        finish_reason=event.finish_reason,
                        tool_calls=(),
                        prompt_tokens=totals.prompt_tokens,
                        completion_tokens=totals.completion_tokens,
                        stats=event.stats,
                    )
                    return
                case ReasoningDelta():
                    pass  # thinking is off; a stray block is not the answer


_NO_STATS: Final = GenerationStats(
    prompt_tps=0.0,
    generation_tps=0.0,
    prompt_tokens=0,
    generation_tokens=0,
    serving_batches=False,
    in_flight_at_admission=0,
    time_to_first_token_ms=0.0,
)


def _end(totals: _Totals) -> TurnEnd:
    return TurnEnd(
        finish_reason="stop",
        tool_calls=(),
        prompt_tokens=totals.prompt_tokens,
        completion_tokens=totals.completion_tokens,
        stats=totals.stats or _NO_STATS,
    )


def _parse_step(text: str) -> tuple[str, dict[str, str]] | None:
    """The step the grammar let through; ``None`` when it was cut off (max tokens)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("tool"), str):
        return None
    raw = value.get("arguments") or {}
    arguments = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    return value["tool"], arguments
