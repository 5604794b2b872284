"""How the API process reaches the local manager: through the protected connection
record, read again on every request, so a manager set up (or moved) after the daemon
started is found without a restart.

:meth:`ManagerAccess.call` sends one typed request and returns the manager's answer
(``{"ok": ...}``); what kept it from answering raises a :class:`PluginRefusal` whose
reason says which: ``unreachable`` (no setup, no manager answering, an unsafe record),
``timeout`` (the deadline passed), ``busy`` (eight requests already in flight). The
last inventory seen is kept so installations stay listed while the manager is down.

A ``list`` answer from a staged manager names its Skulk build; one other than this
process's live build (``service_runtime.build_identity``, measured once) is refused as
``manager_build_differs``, and until a later ``list`` shows a matching build every
other request is refused the same way without reaching that manager.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Final

from skulk_core.plugins.errors import PluginRefusal, refuse
from skulk_core.plugins.service_runtime import ManagerBuildDiffers, build_identity
from skulk_daemon.plugins.connection import read_connection
from skulk_daemon.plugins.manager.client import call, check_build, manager_build

MAX_IN_FLIGHT: Final = 8
CALL_TIMEOUT_SECONDS: Final = 30.0


class ManagerAccess:
    def __init__(
        self,
        config_home: Path,
        *,
        timeout: float = CALL_TIMEOUT_SECONDS,
        host_build: str | None = None,
    ) -> None:
        self.config_home = config_home
        self.timeout = timeout
        self._host_build = host_build
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
        if not listing and self.build_refusal is not None:
            raise self.build_refusal
        try:
            answer = call(connection.root, request, timeout=self.timeout)
        except PluginRefusal as refusal:
            if refusal.reason == "timeout":
                raise
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
            except ManagerBuildDiffers as differs:
                self.build_refusal = differs
                raise
            self.build_refusal = None
        return answer

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
