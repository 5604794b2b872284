"""This node's registration with the master, awaited or in the background.

A daemon serves its API as soon as it is built (identity, health, OpenAPI, State as
known) instead of waiting for its cluster's election first: its ``RegisterNode``
goes out in the background, retried until a master is elected, and what plans
against this node's own place in State (placement) waits for it with
:meth:`Registration.done`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from skulk_core.ids import NodeId, new_command_id
from skulk_core.state.commands import Command, RegisterNode

log = logging.getLogger(__name__)

WAIT_SECONDS: Final = 15.0
"""The longest :meth:`Registration.done` waits (a master-less node's commands wait
as long for one)."""


class Registration:
    def __init__(
        self,
        submit: Callable[[Command], Awaitable[object]],
        node_id: NodeId,
        *,
        no_master: type[Exception],
        refused: type[Exception],
    ) -> None:
        """``submit`` sends a command to the master; it raises ``no_master`` when
        none takes it in time and ``refused`` (a base of it) for a refusal."""
        self._submit = submit
        self._node_id = node_id
        self._no_master = no_master
        self._refused = refused
        self._task: asyncio.Task[None] | None = None

    async def start(self, *, wait: bool) -> None:
        """Register: at once (``wait``), raising what ``submit`` raises, or in the
        background, however long the election takes."""
        if wait:
            await self._submit(self._command())
        else:
            self._task = asyncio.create_task(self._register(), name="node-register")

    async def done(self) -> None:
        """Until a background registration is done, for at most :data:`WAIT_SECONDS`."""
        task = self._task
        if task is not None and not task.done():
            # NOTE: asyncio.wait, not wait_for: it neither cancels the registration
            # when the caller gives up nor raises when it was cancelled (closing).
            await asyncio.wait({task}, timeout=WAIT_SECONDS)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _command(self) -> RegisterNode:
        return RegisterNode(command_id=new_command_id(), node_id=self._node_id)

    async def _register(self) -> None:
        while True:
            try:
                await self._submit(self._command())
                return
            except self._no_master:
                log.info("no master elected yet; this node registers once there is one")
            except self._refused as exc:
                log.error("the master refused to register this node: %s", exc)
                return
