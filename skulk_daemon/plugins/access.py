"""How the API process reaches the local manager: through the protected connection
record, read again on every request, so a manager set up (or moved) after the daemon
started is found without a restart.

:meth:`ManagerAccess.ask` sends one typed request (``manager/protocol.py``) and returns
its result decoded as the answer Struct the caller names, or raises
:class:`ManagerRefused` with the manager's typed error body; :meth:`ManagerAccess.call`
returns the raw answer (``{"ok": ...}``) to what reads host-local fields of it (the
owner adapter). What kept the manager from answering raises a :class:`PluginRefusal`
whose reason says which: ``unreachable`` (no setup, no manager answering, an unsafe
record, an answer this host cannot read), ``timeout`` (the deadline passed), ``busy``
(eight requests already in flight). The last inventory seen is kept so installations
stay listed while the manager is down.

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
import contextlib
import threading
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec

from skulk_core.plugins.answers import Installation, ManagerError, ManagerListing
from skulk_core.plugins.errors import PluginRefusal, refuse
from skulk_daemon.plugins.manager_refresh import RuntimeRefresh
from skulk_host.plugin_manager.client import call_raw, check_build, manager_build
from skulk_host.plugin_manager.connection import read_connection
from skulk_host.plugin_manager.protocol import ListRequest, Request
from skulk_host.plugin_service.runtime import ManagerBuildDiffers, build_identity

MAX_IN_FLIGHT: Final = 8
CALL_TIMEOUT_SECONDS: Final = 30.0

T = TypeVar("T")

_ENCODER: Final = msgspec.json.Encoder()


class ManagerRefused(Exception):
    """The manager answered, refusing: its error body, typed."""

    def __init__(self, error: ManagerError) -> None:
        super().__init__(error.message or error.code)
        self.error = error


def _error(raw: object) -> ManagerError:
    try:
        return msgspec.convert(raw or {}, ManagerError)
    except msgspec.ValidationError:
        return ManagerError()


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
        self.last_inventory: list[Installation] = []

    def _call(self, request: Request) -> dict[str, Any]:
        try:
            connection = read_connection(self.config_home)
        except PluginRefusal as refusal:
            raise refuse(
                "unreachable", f"{refusal.message} Run skulk-plugin-service setup on this host."
            ) from None
        listing = isinstance(request, ListRequest)
        differs = self.build_refusal
        if not listing and differs is not None:
            raise self._differs(differs.host_build, differs.manager_build)
        try:
            answer = call_raw(connection.root, _ENCODER.encode(request), timeout=self.timeout)
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

    async def call(self, request: Request) -> dict[str, Any]:
        """The manager's raw answer to ``request`` (``{"ok": ...}``)."""
        with self._lock:
            if self._in_flight >= MAX_IN_FLIGHT:
                raise refuse("busy", "Plugin management is saturated: try again in a moment.")
            self._in_flight += 1
        try:
            answer = await asyncio.to_thread(self._call, request)
        finally:
            with self._lock:
                self._in_flight -= 1
        if isinstance(request, ListRequest) and answer.get("ok"):
            # NOTE: an answer this host cannot read keeps the last inventory it could.
            with contextlib.suppress(msgspec.ValidationError):
                listed = msgspec.convert(answer["result"], ManagerListing)
                self.last_inventory = list(listed.installations)
        return answer

    async def ask(self, request: Request, answer: type[T]) -> T:
        """The manager's result for ``request`` as ``answer``; its refusal raises
        :class:`ManagerRefused`."""
        raw = await self.call(request)
        if not raw.get("ok"):
            raise ManagerRefused(_error(raw.get("error")))
        try:
            return msgspec.convert(raw.get("result"), answer)
        except msgspec.ValidationError as exc:
            raise refuse(
                "unreachable",
                f"The local plugin manager answered what this host cannot read ({exc}): "
                "rerun skulk-plugin-service setup so that both run the same Skulk build.",
            ) from None
