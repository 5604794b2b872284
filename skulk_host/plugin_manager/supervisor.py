"""Supervising each installation's owner process from its published selection.

Every half second the supervisor compares each installation's desired state
(``runtime-selection.json``: enabled, not uninstalled, a runtime digest) with the owner
it runs. A wanted owner that is not running starts once its backoff allows
(``skulk_core.plugins.supervision``), from the sealed generation only
(:func:`owner_command` checks the seal first; a refusal counts as a failed lifetime)
and through the owner runtime (``owner_host.py``), which serves the plugin on the
installation's owner-only ``owner/control.sock``; an owner that exits without being
asked to is a failed lifetime; an owner no longer wanted is stopped (SIGTERM to its
process group, SIGKILL after a grace). A disable or uninstall during a wait starts
nothing. Owner output goes to a bounded ``owner.log`` in the installation; a restart
never replays work.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Final

from skulk_core.plugins.answers import OwnerProcess
from skulk_core.plugins.errors import PluginRefusal
from skulk_core.plugins.supervision import Backoff, after_exit
from skulk_host.fsutil import ensure_private_dir
from skulk_host.plugin_manager.store import Store
from skulk_host.plugin_owners.wire import owner_dir

log = logging.getLogger("skulk.plugins.manager")

POLL_SECONDS: Final = 0.5
STOP_GRACE_SECONDS: Final = 5.0
OWNER_LOG_BYTES: Final = 256 * 1024
_OWNER_ENV: Final = {"PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
"""An owner inherits nothing of the manager's environment but ``PATH``."""


@dataclass
class _Owner:
    digest: str | None = None
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff: Backoff = field(default_factory=Backoff)
    lifetimes: int = 0
    last_error: str | None = None


def owner_command(store: Store, plugin_id: str, digest: str) -> list[str]:
    """argv of the owner runtime (``owner_host``) for the sealed generation ``digest``:
    Skulk's own interpreter, isolated (``-I -B``), the seals checked first, the
    generation's verified ``site-packages`` appended to the path, its one owner launcher
    (the bundle's ``__owner__.py``, passed as ``--bundle``, or the signed wheel's owner
    entry), and the installation's owner-only socket directory."""
    launcher = store.stager(plugin_id).launcher(digest, "owner")
    control = owner_dir(store.directory(plugin_id))
    ensure_private_dir(control)
    control.chmod(0o700)
    bundle = [] if launcher.bundle is None else ["--bundle", str(launcher.bundle)]
    return [
        sys.executable,
        "-I",
        "-B",
        "-m",
        "skulk_host.plugin_owners.owner_host",
        "--entry",
        launcher.entry,
        "--site",
        str(launcher.site),
        *bundle,
        "--control",
        str(control),
    ]


class Supervisor:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._owners: dict[str, _Owner] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="owner-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def observe(self, plugin_id: str) -> OwnerProcess:
        """The observed process state: never a readiness claim."""
        with self._lock:
            owner = self._owners.get(plugin_id)
            if owner is None:
                # NOTE: the same keys as a supervised owner's, so a reader polling
                # right after activation (before the first pass) sees zeros, not gaps.
                return OwnerProcess(
                    status="stopped",
                    lifetimes=0,
                    consecutive_failures=0,
                    backoff_seconds=0.0,
                    restart_in_seconds=None,
                    error_code=None,
                )
            running = owner.process is not None and owner.process.poll() is None
            waiting = None
            if not running and owner.backoff.failures:
                waiting = max(0.0, round(owner.backoff.next_start_at - time.monotonic(), 1))
            return OwnerProcess(
                status="running"
                if running
                else ("failed" if owner.backoff.failures else "stopped"),
                lifetimes=owner.lifetimes,
                consecutive_failures=owner.backoff.failures,
                backoff_seconds=owner.backoff.delay,
                restart_in_seconds=waiting,
                error_code=owner.last_error,
            )

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                for plugin_id in self.store.ids():
                    self._reconcile(plugin_id)
            except Exception:
                log.exception("owner supervision pass failed")

    def _wanted(self, plugin_id: str) -> str | None:
        selection = self.store.selection(plugin_id)
        if selection.enabled and not selection.uninstalled:
            return selection.runtime_digest
        return None

    def _reconcile(self, plugin_id: str) -> None:
        wanted = self._wanted(plugin_id)
        with self._lock:
            owner = self._owners.setdefault(plugin_id, _Owner())
            now = time.monotonic()
            if owner.process is not None and owner.process.poll() is not None:
                owner.backoff = after_exit(owner.backoff, owner.started_at, now)
                owner.last_error = f"exit_{owner.process.returncode}"
                owner.process = None
            if owner.process is not None and wanted != owner.digest:
                self._terminate(owner)
                owner.backoff = Backoff()
            if wanted != owner.digest:
                owner.digest, owner.backoff = wanted, Backoff()
            if wanted is None or owner.process is not None or now < owner.backoff.next_start_at:
                return
            self._spawn(plugin_id, owner, wanted, now)

    def _spawn(self, plugin_id: str, owner: _Owner, digest: str, now: float) -> None:
        owner.lifetimes += 1
        owner.started_at = now
        try:
            command = owner_command(self.store, plugin_id, digest)
        except PluginRefusal as refusal:
            owner.last_error = refusal.reason
            owner.backoff = after_exit(owner.backoff, now, now)
            return
        path = self.store.directory(plugin_id) / "owner.log"
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_size > OWNER_LOG_BYTES:
                path.unlink()
        with path.open("ab") as output:
            os.chmod(path, 0o600)
            owner.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=self.store.directory(plugin_id),
                env={
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "PYTHONDONTWRITEBYTECODE": "1",
                },
                start_new_session=True,
            )
        log.info("%s: owner lifetime %d started", plugin_id, owner.lifetimes)

    @staticmethod
    def _terminate(owner: _Owner) -> None:
        process = owner.process
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        owner.process = None

    def stop(self) -> None:
        """Stop supervising and stop every owner (the manager is shutting down)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(POLL_SECONDS * 4)
        with self._lock:
            for owner in self._owners.values():
                self._terminate(owner)
