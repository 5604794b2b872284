"""The master's half of steward proposals: expiry, dispatch of approvals, failover recovery.

Only the master acts (as with every agent of its kind). An approval is revalidated
against the master's State (the exact instance still placed and still ordinary, the
model still in the catalog, the transfer still in flight), then armed (recorded
``dispatched`` with the exact command id it will use) and dispatched through the
existing typed command: ``DeleteInstance`` for stop, ``CreateInstance`` planned by the
normal planner for place, both in turn for restart (the re-placement waits up to five
minutes for the released capacity), the hub's cancel for a download. A promoted master
looks at every proposal dispatched in the last five minutes: when the effect is missing
from State (the stopped instance still placed, no instance with the dispatch's id) it
reissues it once, with the same command identity. ``SKULK_FABRIC_CAPABILITIES_DISABLE=1``
on the master turns every approval, and every recovery, into ``failed``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Final

from skulk_core.ids import CommandId, InstanceId, NodeId, new_command_id
from skulk_core.placement import CommandOwnedIds, PlacementRefusal, PlacementRequest, place
from skulk_core.placement.repair import intent_of
from skulk_core.state.commands import ChangeProposal, CreateInstance, DeleteInstance
from skulk_core.state.events import IndexedEvent, ProposalChanged
from skulk_core.state.proposal_rules import find
from skulk_core.state.proposals import (
    RECOVERY_WINDOW,
    RESTART_CAPACITY_WAIT,
    ProposalAction,
    ProposalStatus,
    StewardProposal,
)
from skulk_core.state.state import State
from skulk_core.steward.lifecycle import ACTIVE_DOWNLOAD_STATUSES, is_steward
from skulk_daemon.node.node import CommandRefused, Node

log = logging.getLogger(__name__)

KILL_SWITCH_ENV: Final = "SKULK_FABRIC_CAPABILITIES_DISABLE"
RESTART_POLL_SECONDS: Final = 2.0

CancelDownload = Callable[[NodeId, str, str], Awaitable[None]]
"""Cancels one exact transfer attempt (node, model, attempt id) on its node, which
repeats the attempt check; raises when that attempt is no longer in flight there."""


def _span(wait: timedelta) -> str:
    seconds = int(wait.total_seconds())
    if seconds % 60 == 0 and seconds >= 60:
        minutes = seconds // 60
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{wait.total_seconds():g} s"


def capabilities_disabled() -> bool:
    return os.environ.get(KILL_SWITCH_ENV, "").strip() == "1"


class _Failed(Exception):
    """The approved action cannot be carried out; the message is the outcome."""


class ProposalDispatcher:
    def __init__(
        self,
        node: Node,
        cancel_download: CancelDownload | None = None,
        *,
        restart_capacity_wait: timedelta = RESTART_CAPACITY_WAIT,
    ) -> None:
        self._node = node
        self._cancel_download = cancel_download
        self.restart_capacity_wait = restart_capacity_wait
        """How long a restart waits for the released capacity before it fails (the
        spec's five minutes; shorter where a caller cannot wait that long)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._was_master = False
        self._closed = False
        self._dispatching: set[str] = set()
        """Approvals this master is carrying out (each at most once per process)."""
        node.on_ordered(self._on_ordered)

    def _on_ordered(self, before: State, events: list[IndexedEvent]) -> None:
        if self._closed:
            return
        for indexed in events:
            event = indexed.event
            if isinstance(event, ProposalChanged) and event.status == ProposalStatus.APPROVED:
                self._spawn(self._dispatch(event.proposal_id))

    def _spawn(self, work: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def tick(self) -> None:
        """Expiry, and recovery once when this node has just become the master."""
        node = self._node
        if not node.is_master:
            self._was_master = False
            return
        now = datetime.now(UTC)
        for proposal in node.state.steward_proposals:
            if proposal.status == ProposalStatus.PENDING and now >= proposal.expires_at:
                await self._change(
                    proposal.proposal_id, ProposalStatus.EXPIRED, "expired undecided"
                )
        if not self._was_master:
            self._was_master = True
            for proposal in node.state.steward_proposals:
                if proposal.status == ProposalStatus.APPROVED:
                    # Approved, never armed: the previous master died in between.
                    self._spawn(self._dispatch(proposal.proposal_id, recovering=True))
                else:
                    await self._recover(proposal, now)

    async def _change(
        self,
        proposal_id: str,
        status: ProposalStatus,
        outcome: str | None = None,
        *,
        dispatch: CommandId | None = None,
        reissued: bool = False,
    ) -> bool:
        try:
            await self._node.submit(
                ChangeProposal(
                    command_id=new_command_id(),
                    proposal_id=proposal_id,
                    status=status,
                    observed_at=datetime.now(UTC),
                    outcome=outcome,
                    dispatch_command_id=dispatch,
                    reissued=reissued,
                )
            )
        except CommandRefused as exc:
            log.info("proposal %s could not become %s: %s", proposal_id, status, exc.message)
            return False
        return True

    async def _dispatch(self, proposal_id: str, *, recovering: bool = False) -> None:
        if not self._node.is_master or proposal_id in self._dispatching:
            return
        proposal = find(self._node.state, proposal_id)
        if proposal is None or proposal.status != ProposalStatus.APPROVED:
            return
        self._dispatching.add(proposal_id)
        if capabilities_disabled():
            await self._change(
                proposal_id,
                ProposalStatus.FAILED,
                f"{KILL_SWITCH_ENV}=1 on the master: fabric actions are disabled",
            )
            return
        try:
            outcome = await self._carry_out(
                proposal, new_command_id(), arm=True, recovering=recovering
            )
        except _Failed as exc:
            await self._change(proposal_id, ProposalStatus.FAILED, str(exc))
            return
        log.info("proposal %s dispatched: %s", proposal_id, outcome)

    def _ordinary_instance(self, proposal: StewardProposal) -> InstanceId:
        state = self._node.state
        iid = proposal.instance_id
        instance = state.instances.get(iid) if iid is not None else None
        if iid is None or instance is None:
            raise _Failed("the selected instance is no longer placed")
        if is_steward(state, iid) or instance.shard_assignments.model_id != proposal.model_id:
            raise _Failed("the selected instance is no longer the one proposed")
        return iid

    async def _carry_out(
        self, proposal: StewardProposal, dispatch: CommandId, *, arm: bool, recovering: bool
    ) -> str:
        """Revalidate and dispatch; ``recovering``: a promoted master finishing an
        approval its predecessor left unarmed (a restart's teardown may be done)."""
        node = self._node
        match proposal.action:
            case ProposalAction.STOP_MODEL:
                iid = self._ordinary_instance(proposal)
                await self._arm(proposal, dispatch, arm, "deletion of the selected instance")
                await self._submit(DeleteInstance(command_id=dispatch, instance_id=iid))
                return "deletion accepted"
            case ProposalAction.PLACE_MODEL:
                create = self._plan(proposal, dispatch)
                await self._arm(proposal, dispatch, arm, "placement by the normal planner")
                await self._submit(create)
                return "placement accepted"
            case ProposalAction.RESTART_MODEL:
                torn_down = recovering and proposal.instance_id not in node.state.instances
                chosen = proposal.instance_id if torn_down else self._ordinary_instance(proposal)
                if chosen is None:
                    raise _Failed("the proposal names no instance")
                iid = chosen
                card = node.state.instance_cards.get(iid)
                if card is not None and node.catalog().get(card.model_id) is None:
                    raise _Failed("the captured model card is no longer in the catalog")
                if not torn_down:
                    teardown = DeleteInstance(command_id=new_command_id(), instance_id=iid)
                    await self._submit(teardown)
                create = await self._wait_for_capacity(proposal, dispatch, iid)
                await self._arm(proposal, dispatch, arm, "re-placement after teardown")
                await self._submit(create)
                return "re-placement accepted"
            case ProposalAction.CANCEL_DOWNLOAD:
                if not _attempt_in_flight(node.state, proposal):
                    raise _Failed("the selected transfer attempt finished or was replaced")
                await self._arm(proposal, dispatch, arm, "transfer cancellation")
                await self._cancel(proposal)
                return "cancellation accepted"

    async def _arm(
        self, proposal: StewardProposal, dispatch: CommandId, arm: bool, what: str
    ) -> None:
        # NOTE: armed before the effect is sent, so a master that dies between the two
        # leaves a dispatched record whose effect a promoted master can look for.
        if arm and not await self._change(
            proposal.proposal_id, ProposalStatus.DISPATCHED, f"{what} dispatched", dispatch=dispatch
        ):
            raise _Failed("the proposal changed before dispatch")

    async def _cancel(self, proposal: StewardProposal) -> None:
        """Forward the attempt-bound cancellation (after the armed record is indexed)."""
        node_id, attempt = proposal.node_id, proposal.attempt_id
        if self._cancel_download is None or node_id is None or attempt is None:
            raise _Failed("download cancellation is not available on this master")
        try:
            await self._cancel_download(node_id, str(proposal.model_id), attempt)
        except Exception as exc:  # the node's refusal (a retry replaced it) or no answer
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            raise _Failed(f"the node did not cancel the transfer attempt: {message}") from None

    async def _submit(self, command: CreateInstance | DeleteInstance) -> None:
        try:
            await self._node.submit(command)
        except CommandRefused as exc:
            raise _Failed(f"the command was refused: {exc.message}") from None

    def _plan(self, proposal: StewardProposal, dispatch: CommandId) -> CreateInstance:
        entry = self._node.catalog().get(proposal.model_id) if proposal.model_id else None
        if entry is None:
            raise _Failed(f"{proposal.model_id} is no longer in the catalog")
        request = PlacementRequest()
        planned = place(
            entry.card,
            self._node.placement_facts(),
            request,
            CommandOwnedIds(InstanceId(dispatch)),
        )
        if isinstance(planned, PlacementRefusal):
            raise _Failed(f"no placement: {planned.message}")
        return CreateInstance(
            command_id=dispatch,
            instance=planned.instance,
            intent=intent_of(request),
            card=entry.card,
        )

    async def _wait_for_capacity(
        self, proposal: StewardProposal, dispatch: CommandId, old: InstanceId
    ) -> CreateInstance:
        loop = asyncio.get_running_loop()
        wait = self.restart_capacity_wait
        deadline = loop.time() + wait.total_seconds()
        last = "the old instance is still placed"
        while True:
            if old not in self._node.state.instances:
                try:
                    return self._plan(proposal, dispatch)
                except _Failed as exc:
                    last = str(exc)
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.sleep(min(RESTART_POLL_SECONDS, left))
        raise _Failed(
            f"replacement capacity did not become available within {_span(wait)} ({last})"
        )

    async def _recover(self, proposal: StewardProposal, now: datetime) -> None:
        """Reissue a dispatched proposal's missing effect once (promoted master)."""
        if (
            proposal.status != ProposalStatus.DISPATCHED
            or proposal.reissued
            or proposal.effect_seen
            or proposal.dispatched_at is None
            or proposal.dispatch_command_id is None
            or now - proposal.dispatched_at > RECOVERY_WINDOW
        ):
            return
        state = self._node.state
        dispatch = proposal.dispatch_command_id
        match proposal.action:
            case ProposalAction.STOP_MODEL:
                missing = proposal.instance_id in state.instances
            case ProposalAction.PLACE_MODEL | ProposalAction.RESTART_MODEL:
                missing = InstanceId(dispatch) not in state.instances
            case ProposalAction.CANCEL_DOWNLOAD:
                # The exact attempt still moving: the forward never reached its node.
                missing = _attempt_in_flight(state, proposal)
        if not missing:
            return
        if capabilities_disabled():
            await self._change(
                proposal.proposal_id,
                ProposalStatus.FAILED,
                f"{KILL_SWITCH_ENV}=1 on the promoted master: recovery failed closed",
            )
            return
        if not await self._change(
            proposal.proposal_id,
            ProposalStatus.DISPATCHED,
            "reissued by the promoted master",
            dispatch=dispatch,
            reissued=True,
        ):
            return
        try:
            match proposal.action:
                case ProposalAction.STOP_MODEL:
                    assert proposal.instance_id is not None
                    await self._submit(
                        DeleteInstance(command_id=dispatch, instance_id=proposal.instance_id)
                    )
                case ProposalAction.CANCEL_DOWNLOAD:
                    await self._cancel(proposal)
                case _:
                    await self._submit(self._plan(proposal, dispatch))
        except _Failed as exc:
            await self._change(proposal.proposal_id, ProposalStatus.FAILED, str(exc))
            return
        log.info("proposal %s: reissued its missing effect", proposal.proposal_id)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()


def _attempt_in_flight(state: State, proposal: StewardProposal) -> bool:
    """Whether the proposal's exact transfer attempt is still queued or moving."""
    if proposal.node_id is None or proposal.attempt_id is None:
        return False
    return any(
        d.model_id == proposal.model_id
        and d.attempt_id == proposal.attempt_id
        and d.status in ACTIVE_DOWNLOAD_STATUSES
        for d in state.downloads.get(proposal.node_id, ())
    )
