"""The steward service: its status, its turns' admission, and the turns themselves.

``GET /v1/steward`` answers :meth:`StewardService.status`; a chat request for the
reserved ``skulk/steward`` id passes :meth:`StewardService.check` (404 while the mode is
off, 400 for client tools, 503 with ``Retry-After`` and the status as ``detail`` while the
steward is not ready) and then runs as a :class:`~skulk_daemon.steward.turn.StewardTurn`
on the steward instance. The chat service wraps the turn in the middleware hooks.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Final

import msgspec

from skulk_core.chat.generation import GenerationRequest, SamplingParams
from skulk_core.chat.tools import NO_TOOLS
from skulk_core.ids import CommandId, InstanceId, ModelId, new_task_id
from skulk_core.steward.lifecycle import STEWARD_MODEL_ID, StewardStatus, steward_status
from skulk_core.steward.mode import effective_fabric
from skulk_core.steward.tools import tool_surface
from skulk_daemon.chat.admission import Admitted
from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.chat.task import ChatTask, TaskMessage
from skulk_daemon.chat.turn import ReasoningDelta, TurnEvent
from skulk_daemon.diagnostics.service import DiagnosticsService
from skulk_daemon.errors import ApiError
from skulk_daemon.node.node import Node
from skulk_daemon.steward.agent import StewardAgent
from skulk_daemon.steward.canary import Canary
from skulk_daemon.steward.dispatch import CancelDownload, ProposalDispatcher
from skulk_daemon.steward.proposals import ProposalBook
from skulk_daemon.steward.read_tools import ReadTools
from skulk_daemon.steward.turn import ProposalMaker, StewardTurn, TurnControl
from skulk_daemon.worker.supervisor import Supervisor

RETRY_AFTER_SECONDS: Final = 5
SYSTEM_PROMPT: Final = (
    "You are Skulk, the AI inference cluster itself, answering its operator. You "
    "investigate with read-only tools and answer only from the evidence they return: "
    "quote node names, model ids and numbers exactly, never invent a node, model or id, "
    "and say plainly when the evidence does not show something. You cannot change the "
    "cluster; you can only propose an action, which an operator must approve. Be brief."
)


class StewardService:
    def __init__(
        self,
        node: Node,
        worker: Supervisor,
        commands: ActiveCommands,
        diagnostics: DiagnosticsService | None = None,
        cancel_download: CancelDownload | None = None,
    ) -> None:
        self._node = node
        self._worker = worker
        self._commands = commands
        self._tools = ReadTools(node, diagnostics)
        self._turns: set[CommandId] = set()
        self.agent = StewardAgent(node)
        self.proposals = ProposalBook(node)
        self.dispatcher = ProposalDispatcher(node, cancel_download)
        self.canary = Canary(node, worker, commands, self.agent)
        self.agent.also.extend([self.dispatcher.tick, self._probe])
        self.propose: ProposalMaker | None = self.proposals.propose
        """Creates proposals for operator-authority turns."""

    def start(self) -> None:
        """The master-side agent's loop (the daemon calls it once the loop runs)."""
        self.agent.start()

    async def _probe(self) -> None:
        status = self.status()
        if status.ready:
            await self.canary.tick(status.instance_id, status.steward_model)

    async def close(self) -> None:
        await self.agent.close()
        await self.dispatcher.close()

    def status(self) -> StewardStatus:
        fabric = effective_fabric(self._node.state, self._node.config.intelligent_fabric)
        return steward_status(
            self._node.state,
            enabled=fabric.enabled,
            brain_model=fabric.brain_model,
            canary_failures=self.agent.canary_failures,
            repairing=self.agent.repairing,
        )

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def owns(self, command_id: CommandId) -> bool:
        """Whether ``command_id`` is a steward turn in flight on this node."""
        return command_id in self._turns

    def check(self, task: ChatTask) -> StewardStatus:
        """Admission of a steward turn before anything streams (raises :class:`ApiError`)."""
        status = self.status()
        if not status.enabled:
            raise ApiError(
                404,
                f"model {STEWARD_MODEL_ID} is served only while intelligent-fabric mode is "
                "enabled (intelligent_fabric.enabled in the cluster configuration)",
                code="model_not_found",
            )
        if task.tools:
            raise ApiError(
                400,
                "the steward's tool surface belongs to the server; send the request "
                f"to {STEWARD_MODEL_ID} without tools",
                code="steward_tools_not_allowed",
            )
        if not status.ready or status.instance_id is None:
            detail = {
                **msgspec.to_builtins(status),
                "message": f"Skulk is not ready to answer yet ({status.state}); retry in "
                f"{RETRY_AFTER_SECONDS} s or poll GET /v1/steward",
            }
            raise ApiError(
                503,
                str(detail["message"]),
                code="steward_not_ready",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
                detail=detail,
            )
        return status

    def wire_admitted(
        self, command_id: CommandId, status: StewardStatus, include_usage: bool
    ) -> Admitted:
        """What the response shapers need of a turn: its id, model and usage choice."""
        assert status.instance_id is not None and status.steward_model is not None
        instance_id = InstanceId(status.instance_id)
        card = self._node.state.instance_cards.get(instance_id)
        if card is None:
            entry = self._node.catalog().get(ModelId(status.steward_model))
            if entry is None:
                raise ApiError(
                    503, "the steward's brain left the catalog", code="steward_not_ready"
                )
            card = entry.card
        task_id = new_task_id()
        return Admitted(
            command_id=command_id,
            task_id=task_id,
            model=STEWARD_MODEL_ID,
            instance_id=instance_id,
            card=card,
            generation=GenerationRequest(
                task_id=task_id, prompt="", sampling=SamplingParams(max_tokens=1)
            ),
            offer=NO_TOOLS,
            starts_in_reasoning=False,
            include_usage=include_usage,
            created=int(time.time()),
        )

    async def turn(
        self,
        command_id: CommandId,
        status: StewardStatus,
        system_prompt: str,
        history: tuple[TaskMessage, ...],
        *,
        operator: bool,
        max_tokens: int | None = None,
    ) -> AsyncIterator[TurnEvent]:
        """The turn's events; ``operator`` arms the proposal tools."""
        assert status.instance_id is not None and status.steward_model is not None
        control = TurnControl(self._commands)
        surface = tool_surface(proposals=operator and self.propose is not None)
        turn = StewardTurn(
            node=self._node,
            worker=self._worker,
            commands=self._commands,
            tools=self._tools,
            instance_id=InstanceId(status.instance_id),
            brain_model=status.steward_model,
            surface=surface,
            system_prompt=system_prompt,
            history=history,
            control=control,
            propose=self.propose if operator else None,
            answer_tokens=max_tokens,
            max_tool_calls=effective_fabric(
                self._node.state, self._node.config.intelligent_fabric
            ).max_tool_calls,
        )
        self._turns.add(command_id)
        self._commands.register(command_id, control.cancel)
        try:
            offered = ", ".join(t.name for t in surface if t.proposal) or "none"
            yield ReasoningDelta(f"[surface] proposal tools: {offered}\n")
            async for event in turn.events():
                yield event
        finally:
            self._turns.discard(command_id)
            self._commands.finish(command_id)
