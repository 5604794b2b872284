"""How the API process reaches the local manager: through the protected connection
record, read again on every request, so a manager set up (or moved) after the daemon
started is found without a restart.

:meth:`ManagerAccess.call` sends one typed request and returns the manager's answer
(``{"ok": ...}``); what kept it from answering raises a :class:`PluginRefusal` whose
reason says which: ``unreachable`` (no setup, no manager answering, an unsafe record),
``timeout`` (the deadline passed), ``busy`` (eight requests already in flight). The
last inventory seen is kept so installations stay listed while the manager is down.

A ``list`` answer from a staged manager names its Skulk build; one other than this
process's live build (``plugin_service.runtime.build_identity``, measured once) is refused as
``manager_build_differs``, and until a later ``list`` shows a matching build every
other request is refused the same way without reaching that manager. Meanwhile the host
refreshes that manager onto a runtime of its own build (``manager_refresh.py``), and the
refusal's sentence says how that stands; a staged manager of this build, once it
answers, has the generations nothing uses removed. Both are off when the host build is
given (a test's stand-in build, which staging this environment would not reproduce),
unless ``refresh`` says otherwise.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Final

from skulk_core.plugins.errors import PluginRefusal, refuse
from skulk_daemon.plugins.manager_refresh import RuntimeRefresh
from skulk_host.plugin_manager.client import call, check_build, manager_build
from skulk_host.plugin_manager.connection import read_connection
from skulk_host.plugin_service.runtime import ManagerBuildDiffers, build_identity

MAX_IN_FLIGHT: Final = 8
CALL_TIMEOUT_SECONDS: Final = 30.0


class ManagerAccess:
    def __init__(
        self,
        config_home: Path,
        *,
        timeout: float = CALL_TIMEOUT_SECONDS,
        host_build: str | None = None,
        refresh: RuntimeRefresh | bool | None = None,
    ) -> None:
        self.config_home = config_home
        self.timeout = timeout
        self._host_build = host_build
        if refresh is None:
            refresh = host_build is None
        if isinstance(refresh, bool):
            refresh = RuntimeRefresh() if refresh else None
        self.refresh: RuntimeRefresh | None = refresh
        self.build_refusal: ManagerBuildDiffers | None = None
        self._in_flight = 0
        self._lock = threading.Lock()
        self.last_inventory: list[dict[str, Any]] = []

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            connection = read_connection(self.config_home)
        except PluginRefusal as refusal:
            raise refuse(
                "unreachable", f"{refusal.message} Run skulk-plugin-service setup on this host."
            ) from None
        listing = request.get("action") == "list"
        differs = self.build_refusal
        if not listing and differs is not None:
            raise self._differs(differs.host_build, differs.manager_build)
        try:
            answer = call(connection.root, request, timeout=self.timeout)
        except PluginRefusal as refusal:
            if refusal.reason == "timeout":
                raise
            if self.refresh is not None and self.refresh.running:
                raise refuse(
                    "unreachable",
                    "The local plugin manager is restarting on a runtime of this host's "
                    "build: try again in a moment.",
                ) from None
            raise refuse(
                "unreachable",
                "The local plugin manager does not answer: start it (skulk-plugin-service "
                "serve, or its system service).",
            ) from None
        if listing:
            # NOTE: measured once, and only when a staged manager names its build.
            if self._host_build is None and manager_build(answer) is not None:
                self._host_build = build_identity()
            try:
                check_build(answer, self._host_build or "")
            except ManagerBuildDiffers as found:
                if self.refresh is not None:
                    self.refresh.differs(connection.root, answer["result"], found.host_build)
                self.build_refusal = found
                raise self._differs(found.host_build, found.manager_build) from None
            self.build_refusal = None
            if self.refresh is not None and manager_build(answer) is not None:
                self.refresh.attached(connection.root, answer["result"])
        return answer

    def _differs(self, host_build: str, manager_build: str) -> ManagerBuildDiffers:
        """The refusal, saying how the refresh of that manager stands."""
        if self.refresh is None:
            return ManagerBuildDiffers(host_build, manager_build)
        return ManagerBuildDiffers(host_build, manager_build, self.refresh.state.next_step)

    async def call(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if self._in_flight >= MAX_IN_FLIGHT:
                raise refuse("busy", "Plugin management is saturated: try again in a moment.")
            self._in_flight += 1
        try:
            answer = await asyncio.to_thread(self._call, request)
        finally:
            with self._lock:
                self._in_flight -= 1
        if request.get("action") == "list" and answer.get("ok"):
            self.last_inventory = list(answer["result"]["installations"])
        return answer
