"""Refreshing the local manager's runtime after a Skulk update.

When a staged manager answers ``list`` naming a build other than this host's
(``access.py`` refuses it as ``manager_build_differs``), the host refreshes it on a
thread of its own, at most one at a time:

1. only when the registered service (the setup record: a systemd or launchd service
   that runs ``runtimes/current/bin/python``, whose selected generation is sealed to this
   host's base interpreter) would start the staged generation; otherwise the service is
   left running and the refusal asks for ``skulk-plugin-service setup``;
2. it stages a generation of this environment under the runtimes fence
   (``skulk_host.plugin_service.staging``; a complete copy of the same source is reused);
3. a manager that names ``reload_runtime`` in ``list`` is asked to select it and exit,
   for its keep-alive to restart it; one that refuses keeps serving, and the candidate is
   removed. A manager that does not name it is stopped (SIGTERM to the process that
   answered, which closes its owners before it exits), and the generation is selected
   under both the manager's lifetime fence and the runtimes fence;
4. it waits until a manager answers on the selected generation: one that answers on
   another (started by the keep-alive on the old pointer) is stopped once more;
5. it records the generation in the setup record and removes the generations nothing
   uses (``skulk_host.plugin_service.generations``; a busy fence defers that).

A refusal or a missing setup is settled for that manager (generation and build): no
new attempt until another manager answers. A failure is tried again after a minute.
"""

from __future__ import annotations

import logging
import os
import select as selectors
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from skulk_core.plugins.errors import PluginRefusal, refuse
from skulk_host.plugin_manager.client import call, call_with_peer
from skulk_host.plugin_manager.runtime import lifetime_fence
from skulk_host.plugin_service.bootstrap import python_identity
from skulk_host.plugin_service.generations import collect, discard
from skulk_host.plugin_service.runtime import (
    RERUN_SETUP,
    Completion,
    current_python,
    fence,
    generation_dir,
    read_registration,
    read_seal,
    record_selection,
    select,
    selected,
    verify,
)
from skulk_host.plugin_service.staging import base_interpreter, stage_service_runtime

log = logging.getLogger("skulk.plugins.refresh")

READY_SECONDS: Final = 180.0
"""How long a manager has to answer on the selected generation (it verifies ~1 GB)."""
STOP_SECONDS: Final = 60.0
"""How long a stopped manager has to close its owners and exit."""
FENCE_SECONDS: Final = 10.0
MAX_STOPS: Final = 5
"""Managers stopped at most in one refresh (the keep-alive may start one in between)."""
RETRY_SECONDS: Final = 60.0
POLL_SECONDS: Final = 0.5
SERVICES: Final = ("systemd", "launchd")

REFRESHING: Final = (
    "this host is staging a manager runtime of its build and restarting the manager on it: "
    "try again in a moment."
)

Phase = Literal["idle", "refreshing", "refreshed", "setup_required", "refused", "failed"]
Key = tuple[object, object]


@dataclass(frozen=True, slots=True)
class RefreshState:
    phase: Phase
    next_step: str
    """What the ``manager_build_differs`` refusal tells the caller meanwhile."""
    key: Key | None = None


def registration_blocker(service_root: Path) -> str | None:
    """Why the registered service would not start a generation staged here (``None``
    when it would): it must be a registered staged service on the ``current`` link, its
    selected generation sealed to this host's interpreter."""
    record = read_registration(service_root)
    if record is None or record.runtime != "staged" or record.service not in SERVICES:
        return (
            "no registered service keeps a staged manager running here, so the host does not "
            f"restart it: {RERUN_SETUP}"
        )
    if record.python != str(current_python(service_root)):
        return (
            "the registered service does not start the selected runtime, so the host leaves "
            f"it running: {RERUN_SETUP}"
        )
    current = selected(service_root)
    try:
        seal = read_seal(generation_dir(service_root, current)) if current else None
    except PluginRefusal:
        seal = None
    interpreter = str(base_interpreter())
    if seal is None or (seal.interpreter, seal.python) != (interpreter, python_identity()):
        return (
            "the registered service does not run this host's Python interpreter "
            f"({interpreter}), so the host leaves it running: {RERUN_SETUP}"
        )
    return None


def stop_manager(pid: int, seconds: float = STOP_SECONDS) -> None:
    """SIGTERM the manager process ``pid`` and wait until it has exited (it closes every
    owner it supervises first); a refusal when it is still running after ``seconds``."""
    if sys.platform == "linux":
        try:
            handle = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        try:
            # NOTE: through the pidfd, so a reused process id is never signalled.
            signal.pidfd_send_signal(handle, signal.SIGTERM)
            if not selectors.select([handle], [], [], seconds)[0]:
                raise refuse("timeout", "The stopped plugin manager did not exit in time.")
        except ProcessLookupError:
            return
        finally:
            os.close(handle)
        return
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            os.kill(pid, 0)
            time.sleep(0.1)
    except ProcessLookupError:
        return
    raise refuse("timeout", "The stopped plugin manager did not exit in time.")


def _listing(root: Path) -> tuple[dict[str, object] | None, int | None]:
    """The answering manager's ``list`` result and process id (``None``: none answers)."""
    try:
        answer, pid = call_with_peer(root, {"action": "list"}, timeout=5.0)
    except PluginRefusal:
        return None, None
    result = answer.get("result") if answer.get("ok") else None
    return (result if isinstance(result, dict) else None), pid


class RuntimeRefresh:
    """One host's refreshes of its local manager (see the module docstring)."""

    def __init__(
        self,
        *,
        ready_seconds: float = READY_SECONDS,
        stop_seconds: float = STOP_SECONDS,
    ) -> None:
        self.ready_seconds = ready_seconds
        self.stop_seconds = stop_seconds
        # NOTE: one lock for the state and the worker: at most one refresh (or
        # collection) runs, and a caller reads a state the worker finished writing.
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._state = RefreshState("idle", RERUN_SETUP)
        self._retry_at = 0.0
        self._collected = False

    @property
    def state(self) -> RefreshState:
        with self._lock:
            return self._state

    @property
    def running(self) -> bool:
        with self._lock:
            return self._busy()

    def _busy(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    def differs(self, root: Path, listed: Mapping[str, object], host_build: str) -> str:
        """A manager on another build answered ``listed``: start refreshing it unless a
        refresh runs or this manager's outcome is settled; what happens, in a sentence."""
        key: Key = (listed.get("runtime_generation"), listed.get("build_sha256"))
        with self._lock:
            if self._busy():
                return self._state.next_step
            state = self._state
            settled = state.key == key and state.phase in ("setup_required", "refused")
            waiting = state.phase == "failed" and time.monotonic() < self._retry_at
            if settled or waiting:
                return state.next_step
            self._state = RefreshState("refreshing", REFRESHING, key)
            self._start(self._refresh, root, dict(listed), host_build, key)
            return REFRESHING

    def attached(self, root: Path, listed: Mapping[str, object]) -> None:
        """A staged manager of this build answered: remove the generations nothing uses,
        once per process (after a refresh too), unless the fence deferred it."""
        with self._lock:
            if self._collected or self._busy() or time.monotonic() < self._retry_at:
                return
            self._start(self._collect_only, root, str(listed.get("runtime_generation") or ""))

    def _start(self, target: Callable[..., None], *args: object) -> None:
        self._worker = threading.Thread(
            target=target, args=args, name="manager-refresh", daemon=True
        )
        self._worker.start()

    def _finish(self, state: RefreshState) -> None:
        with self._lock:
            self._state = state
            if state.phase == "failed":
                self._retry_at = time.monotonic() + RETRY_SECONDS

    # -- the worker ------------------------------------------------------------------

    def _refresh(self, root: Path, listed: dict[str, object], host_build: str, key: Key) -> None:
        try:
            phase, next_step = self._run(root, listed, host_build)
        except PluginRefusal as refusal:
            log.warning("refreshing the plugin manager's runtime failed: %s", refusal.message)
            phase, next_step = (
                "failed",
                f"refreshing the manager's runtime failed ({refusal.message}); the host tries "
                f"again in a minute, or {RERUN_SETUP}",
            )
        except Exception:
            log.exception("refreshing the plugin manager's runtime failed")
            phase, next_step = "failed", f"refreshing the manager's runtime failed: {RERUN_SETUP}"
        self._finish(RefreshState(phase, next_step, key))

    def _run(self, root: Path, listed: dict[str, object], host_build: str) -> tuple[Phase, str]:
        service_root = root.parent
        blocker = registration_blocker(service_root)
        if blocker is not None:
            return "setup_required", blocker
        completion, fresh = stage_service_runtime(service_root)
        log.info(
            "%s the manager runtime %s for this build",
            "staged" if fresh else "reusing",
            completion.generation,
        )
        if completion.build_sha256 != host_build:
            raise refuse(
                "source_invalid",
                "this environment's Skulk files changed since the host started: restart it",
            )
        old = str(listed.get("runtime_generation") or "")
        asked: int | None = None
        if listed.get("reload_runtime") is True:
            refused, asked = self._reload(root, completion)
            if refused is not None:
                discard(service_root, completion.generation, {old})
                return "refused", (
                    f"the manager refused the runtime staged for this build ({refused}) and "
                    f"keeps serving; the staged copy was removed: {RERUN_SETUP}"
                )
        else:
            self._stop_and_select(root, completion)
        # NOTE: both paths recorded the selection with it (reload_runtime does in the
        # manager), so the record names the new runtime before any manager answers on
        # it, and `status` agrees with the 200 the plugin routes then give.
        self._await(root, completion, asked)
        log.info("the plugin manager runs the runtime %s of this build", completion.generation)
        self._collect(service_root, completion.generation)
        return "refreshed", ""

    def _reload(self, root: Path, completion: Completion) -> tuple[str | None, int | None]:
        """Ask the manager to select ``completion`` and exit: the refusal's sentence (or
        ``None``) and the process asked."""
        _, pid = _listing(root)
        request = {
            "action": "reload_runtime",
            "generation": completion.generation,
            "manifest_sha256": completion.seal_sha256,
        }
        try:
            answer = call(root, request)
        except PluginRefusal:
            # NOTE: it may have selected and stopped before its answer arrived.
            if selected(root.parent) == completion.generation:
                return None, pid
            raise
        if answer.get("ok"):
            return None, pid
        error = answer.get("error") or {}
        if error.get("reason") == "busy":
            raise refuse("busy", str(error.get("message") or "the manager is busy"))
        return str(error.get("message") or "refused"), pid

    def _stop_and_select(self, root: Path, completion: Completion) -> None:
        """Stop the answering manager and select ``completion`` under both fences."""
        service_root = root.parent
        for _ in range(MAX_STOPS):
            listed, pid = _listing(root)
            if listed is not None and pid is not None:
                stop_manager(pid, self.stop_seconds)
            # NOTE: the lifetime fence first: a manager the keep-alive started in
            # between holds it while it serves, and is stopped on the next round.
            with lifetime_fence(root, FENCE_SECONDS) as held:
                if not held:
                    continue
                with fence(service_root):
                    target = generation_dir(service_root, completion.generation)
                    verify(target, completion.seal_sha256)
                    select(service_root, completion.generation)
                    record_selection(service_root, completion)
                return
        raise refuse("busy", "the plugin manager kept restarting before its runtime was selected")

    def _await(self, root: Path, completion: Completion, asked: int | None) -> None:
        """Until a manager answers on ``completion``'s generation; one answering on
        another (started on the old pointer) is stopped once more."""
        deadline = time.monotonic() + self.ready_seconds
        stops = 0
        while time.monotonic() < deadline:
            listed, pid = _listing(root)
            generation = listed.get("runtime_generation") if listed else None
            if generation == completion.generation:
                return
            if generation is not None and pid is not None and pid != asked:
                if stops >= MAX_STOPS:
                    break
                stops += 1
                stop_manager(pid, self.stop_seconds)
            time.sleep(POLL_SECONDS)
        raise refuse("timeout", "no manager answered on the selected runtime in time")

    def _collect(self, service_root: Path, running: str) -> bool:
        collected = collect(service_root, {running} if running else set())
        if collected is None:
            log.info("removing unused manager runtimes waits: the runtimes fence is busy")
            return False
        if collected.removed:
            log.info("removed unused manager runtimes: %s", ", ".join(collected.removed))
        with self._lock:
            self._collected = True
        return True

    def _collect_only(self, root: Path, running: str) -> None:
        try:
            # NOTE: only once the manager runs the selected generation (setup may be
            # moving it right now).
            done = running == selected(root.parent) and self._collect(root.parent, running)
        except (OSError, PluginRefusal):
            log.exception("removing unused manager runtimes failed")
            done = False
        if not done:
            with self._lock:
                self._retry_at = time.monotonic() + RETRY_SECONDS
