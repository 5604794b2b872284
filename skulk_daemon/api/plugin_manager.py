"""The one forwarder every managed-plugin route answers through.

:class:`ManagerCall` (the ``manager`` dependency) sends one typed request of the manager
protocol (``skulk_daemon/plugins/manager/protocol.py``) over the protected connection
(:class:`~skulk_daemon.plugins.access.ManagerAccess`), decodes the result as the route's
answer Struct, and maps every refusal to its status here, in one place: 404 unknown
installation or operation, 409 a fence or refused intent (with the manager's sentence,
the protocol sentence included), 429 saturated (eight requests in flight, or a busy
manager), 503 no setup or no manager (``manager_build_differs``: a staged manager of
another Skulk build), 504 the manager's deadline. The manager owns every decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NoReturn, TypeVar

import msgspec
from litestar.di import Provide

from skulk_core.plugins.answers import ManagerError
from skulk_core.plugins.errors import (
    BUILD_DIFFERS,
    OPERATION_REFUSED,
    PROTOCOL_UNSUPPORTED,
    PluginRefusal,
    ProtocolKind,
    protocol_sentence,
)
from skulk_daemon.api.plugin_authority import PluginCaller, fail
from skulk_daemon.plugins.access import ManagerAccess, ManagerRefused
from skulk_host.plugin_manager.protocol import (
    OPERATION_ID_PATTERN,
    PLUGIN_ID_PATTERN,
    OperationId,
    PluginId,
    Request,
)
from skulk_host.plugin_service.runtime import ManagerBuildDiffers

T = TypeVar("T")

_PLUGIN_ID: Final = msgspec.json.Decoder(PluginId)
_OPERATION_ID: Final = msgspec.json.Decoder(OperationId)


def plugin_id_of(raw: str) -> str:
    """A path's managed plugin id, or 422."""
    try:
        return _PLUGIN_ID.decode(msgspec.json.encode(raw))
    except msgspec.ValidationError:
        fail(422, f"a managed plugin id matches {PLUGIN_ID_PATTERN}", "invalid_plugin_id")


def operation_id_of(raw: str) -> str:
    """A path's operation id, or 422."""
    try:
        return _OPERATION_ID.decode(msgspec.json.encode(raw))
    except msgspec.ValidationError:
        fail(422, f"an operation id matches {OPERATION_ID_PATTERN}", "invalid_operation_id")


def refusal_status(reason: str) -> int:
    match reason:
        case "not_found":
            return 404
        case "busy":
            return 429
        case "timeout":
            return 504
        case "unreachable":
            return 503
        case _:
            return 409


def refused(error: ManagerError) -> NoReturn:
    """The HTTP error the manager's refusal maps to."""
    if error.code == PROTOCOL_UNSUPPORTED:
        kind: ProtocolKind = "runtime" if error.kind == "runtime" else "release"
        sentence = protocol_sentence(kind, error.offered or 0, tuple(error.accepted or ()))
        fail(409, sentence, PROTOCOL_UNSUPPORTED)
    reason = error.reason or "refused"
    message = error.message or "the plugin manager refused the request"
    fail(refusal_status(reason), message, error.code or OPERATION_REFUSED)


async def forward(access: ManagerAccess, request: Request, answer: type[T]) -> T:
    """The manager's result for ``request`` as ``answer``, or the HTTP error its refusal
    (or what kept it from answering) maps to."""
    try:
        return await access.ask(request, answer)
    except ManagerBuildDiffers as differs:
        fail(503, differs.message, BUILD_DIFFERS)
    except PluginRefusal as refusal:
        fail(refusal_status(refusal.reason), refusal.message, f"manager_{refusal.reason}")
    except ManagerRefused as refusal:
        refused(refusal.error)


@dataclass(frozen=True, slots=True)
class ManagerCall:
    """One admitted plugin request's way to the manager."""

    caller: PluginCaller
    access: ManagerAccess

    async def ask(self, request: Request, answer: type[T]) -> T:
        return await forward(self.access, request, answer)


async def _manager(caller: PluginCaller, plugins: ManagerAccess) -> ManagerCall:
    return ManagerCall(caller=caller, access=plugins)


MANAGER: Final = Provide(_manager)
"""The ``manager`` dependency of the managed-plugin controllers."""
