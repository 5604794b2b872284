"""Keep-alive: which instances placed on demand have been idle long enough to unload.

With ``inference.load_on_demand`` on, a request for an installed but unplaced model
places it (its intent says ``on_demand``) and the instance stays while it is used.
Once it has been idle for its keep-alive (``inference.keep_alive``, or the latest
Ollama request's ``keep_alive``) the master deletes it. An instance placed
explicitly (``POST /place_instance``, ``skulk place``) is never unloaded here.

Everything here is pure: the master's agent
(:mod:`skulk_daemon.placement.keep_alive`) feeds it the State, the task events it
ordered and its own monotonic clock, and deletes what :func:`idle_unloads` names.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Final

from skulk_core.ids import InstanceId
from skulk_core.state.events import (
    Event,
    InstanceCreated,
    TaskCreated,
    TaskDeleted,
    TaskStatusUpdated,
)
from skulk_core.state.shards import RunnerReady, RunnerRunning
from skulk_core.state.state import State, TaskStatus

DEFAULT_KEEP_ALIVE: Final = "5m"
"""How long an instance placed on demand stays once idle (Ollama's default)."""
MAX_KEEP_ALIVE_SECONDS: Final = 365 * 24 * 3600.0
"""A finite keep-alive longer than this is refused: a negative one means "forever"."""

_UNITS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION: Final = re.compile(r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+")


class KeepAliveError(ValueError):
    """A keep-alive that is neither a number of seconds nor a duration like ``5m``."""


def parse_keep_alive(value: str | float) -> float | None:
    """Seconds to keep an idle instance, or ``None`` to keep it until removed.

    Ollama's forms: a number of seconds, or a Go duration (``"30s"``, ``"5m"``,
    ``"1h30m"``); a negative value means forever and ``0`` unloads once the request
    is answered. A bare numeric string counts as seconds.
    """
    if isinstance(value, bool):
        raise KeepAliveError("keep_alive must be a duration such as '5m' or a number of seconds")
    seconds = float(value) if isinstance(value, int | float) else _parse_text(value.strip())
    if math.isnan(seconds):
        raise KeepAliveError("keep_alive must be a number")
    if seconds < 0:
        return None
    if seconds > MAX_KEEP_ALIVE_SECONDS:
        raise KeepAliveError(
            f"keep_alive must be at most {int(MAX_KEEP_ALIVE_SECONDS)} seconds "
            "(a negative value keeps the model loaded until it is removed)"
        )
    return seconds


def _parse_text(text: str) -> float:
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    try:
        return sign * float(body)
    except ValueError:
        pass
    if not body or not _DURATION.fullmatch(body):
        raise KeepAliveError(
            f"keep_alive {text!r} is not a duration such as '30s', '5m' or '1h' "
            "nor a number of seconds"
        )
    return sign * sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(body))


def _active_instances(state: State) -> set[InstanceId]:
    return {
        task.instance_id
        for task in state.tasks.values()
        if task.task_status in (TaskStatus.PENDING, TaskStatus.RUNNING)
    }


def _serving(state: State, instance_id: InstanceId) -> bool:
    """Every runner ready (or running): loading time is not idle time."""
    instance = state.instances[instance_id]
    statuses = [state.runners.get(r) for r in instance.shard_assignments.runner_to_shard]
    return bool(statuses) and all(isinstance(s, RunnerReady | RunnerRunning) for s in statuses)


def note_events(
    last_active: Mapping[InstanceId, float], before: State, events: Iterable[Event], now: float
) -> dict[InstanceId, float]:
    """``last_active`` after ``events`` (ordered against ``before``): a created
    instance and every task event of an instance (a task started, changed or
    finished) count as use at ``now``.

    Task events are what the master orders for every request on every node, so a
    request shorter than the agent's tick still restarts the idle clock.
    """
    updated = dict(last_active)
    tasks = dict(before.tasks)
    for event in events:
        match event:
            case InstanceCreated(instance=instance):
                updated[instance.instance_id] = now
            case TaskCreated(task=task):
                tasks[task.task_id] = task
                updated[task.instance_id] = now
            case TaskStatusUpdated(task_id=task_id) | TaskDeleted(task_id=task_id):
                known = tasks.get(task_id)
                if known is not None:
                    updated[known.instance_id] = now
            case _:
                pass
    return updated


def refresh(
    state: State, last_active: Mapping[InstanceId, float], now: float
) -> dict[InstanceId, float]:
    """The idle clocks of the on-demand instances in ``state``.

    An instance seen for the first time (this master just took over, or it was
    created before the agent heard of it), one with a task in progress and one still
    loading all count as used ``now``; instances that are gone are forgotten.
    """
    busy = _active_instances(state)
    clocks: dict[InstanceId, float] = {}
    for instance_id, intent in state.placement_intents.items():
        if not intent.on_demand or instance_id not in state.instances:
            continue
        seen = last_active.get(instance_id)
        if seen is None or instance_id in busy or not _serving(state, instance_id):
            seen = now
        clocks[instance_id] = seen
    return clocks


def idle_unloads(
    state: State, last_active: Mapping[InstanceId, float], now: float
) -> tuple[InstanceId, ...]:
    """The on-demand instances idle for at least their keep-alive, in id order.

    ``last_active`` is :func:`refresh`'s answer for the same ``state`` and ``now``.
    Explicit placements, instances kept forever (a negative keep-alive), busy and
    loading instances, and instances without a clock yet are never named.
    """
    busy = _active_instances(state)
    due: list[InstanceId] = []
    for instance_id, intent in sorted(state.placement_intents.items()):
        keep = intent.keep_alive_seconds
        if not intent.on_demand or keep is None or instance_id not in state.instances:
            continue
        if instance_id in busy or not _serving(state, instance_id):
            continue
        seen = last_active.get(instance_id)
        if seen is not None and now - seen >= keep:
            due.append(instance_id)
    return tuple(due)


def expiries(
    state: State, last_active: Mapping[InstanceId, float], now: float
) -> dict[InstanceId, float | None]:
    """When each placed instance would be unloaded if nobody used it again.

    In the clock of ``last_active`` and ``now``. ``None``: never (an explicit
    placement, or one kept forever). A busy or loading instance expires one
    keep-alive from ``now``, as Ollama's ``/api/ps`` shows a model in use; an
    instance without a clock yet counts as used ``now``.
    """
    busy = _active_instances(state)
    found: dict[InstanceId, float | None] = {}
    for instance_id in state.instances:
        intent = state.placement_intents.get(instance_id)
        keep = intent.keep_alive_seconds if intent is not None else None
        if intent is None or not intent.on_demand or keep is None:
            found[instance_id] = None
            continue
        seen = last_active.get(instance_id, now)
        if instance_id in busy or not _serving(state, instance_id):
            seen = now
        found[instance_id] = seen + keep
    return found
