"""Loading on demand: a request for an installed, unplaced model places it and waits.

Off unless ``inference.load_on_demand`` is set (the spec answers 404 for an unplaced
model). When on, every inference service calls :meth:`OnDemandLoader.serve` before
admission: a model in the catalog whose bytes some node holds and that no instance
serves is placed through :class:`~skulk_daemon.placement.service.PlacementService`
(the planner's first valid preview, as ``skulk place`` chooses), marked
``on_demand`` in its intent, and the request waits up to
``inference.load_timeout_seconds`` for its runners to be ready. Concurrent requests
for the same model share one load. The master's
:class:`~skulk_daemon.placement.keep_alive.KeepAliveAgent` unloads the instance
once it has been idle for its keep-alive.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

import msgspec

from skulk_core.cluster.routing import select_instance
from skulk_core.ids import InstanceId, ModelId, new_command_id
from skulk_core.models.cards import ModelTask
from skulk_core.placement import PreviewQuery
from skulk_core.placement.keep_alive import parse_keep_alive
from skulk_core.placement.on_demand import (
    LoadFailed,
    Loading,
    Ready,
    first_valid,
    load_progress,
    no_placement_reason,
    request_of,
)
from skulk_core.state.commands import SetKeepAlive
from skulk_daemon.errors import ApiError
from skulk_daemon.hub.service import downloaded_somewhere
from skulk_daemon.node.node import CommandRefused, Node
from skulk_daemon.placement.service import PlacementService

log = logging.getLogger(__name__)

POLL_SECONDS: Final = 0.25
"""How often a waiting request reads State while the runners load."""


def load_failed(model: str, why: str, *, code: str = "model_load_failed") -> ApiError:
    return ApiError(503, f"Loading model {model} on demand failed: {why}", code=code)


class OnDemandLoader:
    """Places unplaced models for the requests that ask for them (when enabled)."""

    def __init__(self, node: Node, placement: PlacementService) -> None:
        self._node = node
        self._placement = placement
        self._loads: dict[ModelId, asyncio.Task[InstanceId]] = {}
        self._background: set[asyncio.Task[None]] = set()

    @property
    def enabled(self) -> bool:
        return self._node.config.inference.load_on_demand

    async def serve(
        self,
        model: str,
        task: ModelTask,
        *,
        keep_alive: float | msgspec.UnsetType | None = msgspec.UNSET,
    ) -> None:
        """Make sure an instance serves ``model`` if loading on demand is on.

        Does nothing when it is off, when an instance already serves the model, or
        when admission will refuse the request anyway (an unknown model, one that
        does not do ``task``): the caller's admission answers those. ``keep_alive``
        (seconds, ``None`` forever) is the keep-alive of a placement made here;
        unset, the configured ``inference.keep_alive``. Raises :class:`ApiError`:
        404 for a model whose bytes no node holds, 503 when it cannot be placed or
        is not ready in time.
        """
        if not self.enabled:
            return
        model_id = ModelId(model)
        entry = self._node.catalog().get(model_id)
        if entry is None or task not in entry.card.tasks:
            return
        loading = self._loads.get(model_id)
        if loading is None:
            if select_instance(self._node.state, model_id) is not None:
                return
            if not downloaded_somewhere(self._node, model_id):
                raise ApiError(
                    404,
                    f"No instance found for model {model}, and no node has downloaded it, "
                    f"so it cannot be loaded on demand; download it first: "
                    f"skulk models download {model}",
                    code="model_not_found",
                )
            seconds = (
                self._keep_alive() if isinstance(keep_alive, msgspec.UnsetType) else keep_alive
            )
            loading = asyncio.get_running_loop().create_task(self._load(model, seconds))
            self._loads[model_id] = loading
            loading.add_done_callback(lambda done: self._finished(model_id, done))
        timeout = self._node.config.inference.load_timeout_seconds
        try:
            # NOTE: shielded: a client that hangs up does not cancel the load that
            # other requests (and the next one) wait for.
            await asyncio.wait_for(asyncio.shield(loading), timeout)
        except TimeoutError:
            raise ApiError(
                503,
                f"Model {model} is still loading after {timeout:g} s; try again shortly",
                code="model_loading",
                headers={"Retry-After": "5"},
            ) from None

    def _finished(self, model_id: ModelId, done: asyncio.Task[InstanceId]) -> None:
        self._loads.pop(model_id, None)
        # Retrieved here as well: every waiter may have timed out or hung up.
        if not done.cancelled() and done.exception() is not None:
            log.warning("loading %s on demand failed: %s", model_id, done.exception())

    def _keep_alive(self) -> float | None:
        return parse_keep_alive(self._node.config.inference.keep_alive)

    async def _load(self, model: str, keep_alive: float | None) -> InstanceId:
        previews = await self._placement.previews(model, PreviewQuery())
        chosen = first_valid(previews)
        if chosen is None:
            raise load_failed(
                model,
                f"no node has room for it ({no_placement_reason(previews)})",
                code="no_valid_placement",
            )
        try:
            accepted = await self._placement.launch(
                model, request_of(chosen), on_demand=True, keep_alive_seconds=keep_alive
            )
        except ApiError as exc:
            raise load_failed(model, exc.message, code=exc.code or "model_load_failed") from None
        except CommandRefused as exc:
            raise load_failed(model, exc.message, code=exc.code) from None
        log.info(
            "placed %s on demand as instance %s (keep-alive %s)",
            model,
            accepted.instance_id,
            "forever" if keep_alive is None else f"{keep_alive:g} s",
        )
        await self._ready(model, accepted.instance_id)
        return accepted.instance_id

    async def _ready(self, model: str, instance_id: InstanceId) -> None:
        seen = False
        while True:
            state = self._node.state
            seen = seen or instance_id in state.instances
            match load_progress(state, instance_id, seen=seen):
                case Ready():
                    return
                case LoadFailed(message=message):
                    raise load_failed(model, message)
                case Loading():
                    await asyncio.sleep(POLL_SECONDS)

    def keep_alive_after(self, model: str, keep_alive: float | None) -> None:
        """Once the current request is answered: ``model``'s on-demand instances stay
        ``keep_alive`` idle seconds from now on (Ollama's per-request ``keep_alive``;
        0 unloads them once idle). Explicit placements are left alone."""
        task = asyncio.get_running_loop().create_task(self._set_keep_alive(model, keep_alive))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _set_keep_alive(self, model: str, keep_alive: float | None) -> None:
        state = self._node.state
        for instance_id, instance in state.instances.items():
            intent = state.placement_intents.get(instance_id)
            if instance.shard_assignments.model_id != model or intent is None:
                continue
            if not intent.on_demand or intent.keep_alive_seconds == keep_alive:
                continue
            try:
                await self._node.submit(
                    SetKeepAlive(
                        command_id=new_command_id(),
                        instance_id=instance_id,
                        keep_alive_seconds=keep_alive,
                    )
                )
            except CommandRefused as exc:
                # Gone meanwhile (unloaded, failed): nothing is left to keep.
                log.debug("keep-alive of %s not set: %s", instance_id, exc.message)

    async def close(self) -> None:
        for task in [*self._loads.values(), *self._background]:
            task.cancel()
