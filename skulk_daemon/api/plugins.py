"""The managed-plugin routes: inventory, installations, lifecycle operations, release
source, inspection and installation, and the signed catalog.

Every handler is one typed manager request over the protected connection
(:class:`~skulk_daemon.plugins.access.ManagerAccess`); the manager owns every decision.
Authority, per the spec: the direct owner (loopback dashboard boundary, no proxy
headers, ``X-Skulk-Dashboard: pairing-v1``), or a paired bearer holding
``plugins:read`` (reads) / ``plugins:manage`` (changes), presented to the operator
listener or on the direct transport; source, catalog source and catalog install are
direct-owner only (a presented credential is told to drop it). Pairing never grants a
plugin scope, and ``operations:write`` does not imply one.

Statuses: 404 unknown installation or operation, 409 a fence or refused intent (with
the manager's sentence, the protocol sentence included), 422 malformed body or id,
429 saturated (eight requests in flight, or a busy manager), 503 no setup or no
manager (``manager_build_differs``: a staged manager of another Skulk build), 504 the
manager's deadline. Every response says ``Cache-Control: no-store``.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, NoReturn, TypeVar

import msgspec
from litestar import Controller, Request, delete, get, post
from litestar.datastructures import ResponseHeader

from skulk_core.plugins.errors import (
    BUILD_DIFFERS,
    PluginRefusal,
    ProtocolKind,
    protocol_sentence,
)
from skulk_core.plugins.node_configuration import MAX_PROVIDERS
from skulk_daemon.api.authority import declare
from skulk_daemon.api.errors import NO_STORE_EXCEPTION_HANDLERS
from skulk_daemon.api.openapi import OPENAI, documented, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import NO_STORE_HEADERS, ApiError
from skulk_daemon.operator.guards import (
    authorize_bearer,
    bearer_token,
    check_direct_owner,
    operator_caller,
)
from skulk_daemon.operator.plugin_grants import PLUGINS_MANAGE, PLUGINS_READ
from skulk_daemon.operator.service import OperatorPairingService
from skulk_daemon.plugins.access import ManagerAccess
from skulk_daemon.plugins.configuration import NodeConfigurations
from skulk_host.plugin_manager.protocol import (
    OPERATION_ID_PATTERN,
    PLUGIN_ID_PATTERN,
    CatalogUpdate,
    InstallRequest,
    LifecycleRequest,
    OperationId,
    PluginId,
    SourceUpdate,
)
from skulk_host.plugin_service.runtime import ManagerBuildDiffers

MAX_PLUGIN_BODY_BYTES: Final = 16 * 1024

_PLUGIN_ID: Final = msgspec.json.Decoder(PluginId)
_OPERATION_ID: Final = msgspec.json.Decoder(OperationId)


class RegisterBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    plugin_id: PluginId


class RecoverInstallBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    expected_source_revision: Annotated[int, msgspec.Meta(ge=0)]


class CatalogInstallBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    catalog_sha256: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
    bundle_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    sequence: Annotated[int, msgspec.Meta(ge=1)]
    runtime_platform: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    plugin_id: PluginId | None = None


def fail(status: int, message: str, code: str) -> NoReturn:
    raise ApiError(status, message, code=code, headers=dict(NO_STORE_HEADERS))


T = TypeVar("T")


def decode_body(raw: bytes, kind: type[T]) -> T:
    try:
        return msgspec.json.decode(raw or b"null", type=kind)
    except msgspec.ValidationError as exc:
        fail(422, f"invalid request: {exc}", "invalid_request")
    except msgspec.DecodeError:
        fail(422, "the body is not one JSON object", "invalid_json")


def _plugin_id(raw: str) -> str:
    try:
        return _PLUGIN_ID.decode(msgspec.json.encode(raw))
    except msgspec.ValidationError:
        fail(422, f"a managed plugin id matches {PLUGIN_ID_PATTERN}", "invalid_plugin_id")


def _operation_id(raw: str) -> str:
    try:
        return _OPERATION_ID.decode(msgspec.json.encode(raw))
    except msgspec.ValidationError:
        fail(422, f"an operation id matches {OPERATION_ID_PATTERN}", "invalid_operation_id")


async def _no_body(request: Request[Any, Any, Any]) -> None:
    raw = (await request.body()).strip()
    if raw not in (b"", b"{}"):
        fail(422, "this route takes no body (or {})", "invalid_request")


# -- authority -------------------------------------------------------------------------

HOW_PLUGINS_ARE_MANAGED: Final = (
    "plugins are managed from a browser on this node (http://localhost) or over Tailscale "
    "by its MagicDNS name or Tailscale IP"
)


async def _authorize(
    request: Request[Any, Any, Any],
    authority: OperatorPairingService | None,
    scope_needed: str | None,
) -> str:
    """Direct owner, or a paired bearer holding ``scope_needed``; ``None`` means the
    route is direct-owner only. A presented credential never falls back to direct.
    Returns the authenticated actor: ``device:<id>`` for a paired device, ``owner`` for
    direct owner access (what a proposal action records as its operator)."""
    caller = operator_caller(request.scope)
    token = None if caller is not None else bearer_token(request.scope)
    if scope_needed is None and (caller is not None or token is not None):
        fail(
            403,
            "this change needs direct owner access: in a browser on the node or over "
            'Tailscale choose "Use direct host access"; an API client sends the request '
            "without the credential",
            "direct_owner_only",
        )
    if caller is not None:
        if caller.grant is None or scope_needed not in caller.grant.scopes:
            fail(
                403,
                f"this device's credential lacks the {scope_needed} scope; the owner grants "
                "plugin access separately (pairing never does)",
                "insufficient_scope",
            )
        return f"device:{caller.grant.device_id}"
    if token is not None:
        assert scope_needed is not None
        grant = await authorize_bearer(authority, token, scope_needed)
        return f"device:{grant.device_id}"
    try:
        check_direct_owner(request.scope)
    except ApiError as refused:
        granted = "" if scope_needed is None else ", or by a paired device granted plugin access"
        fail(403, f"{refused.message}; {HOW_PLUGINS_ARE_MANAGED}{granted}", refused.code)
    return "owner"


authorize = _authorize
"""The same rule for the node-configuration routes (``plugin_nodes.py``)."""


# -- the manager's answers ---------------------------------------------------------------


def _refusal_status(reason: str) -> int:
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


async def _ask(plugins: ManagerAccess, request: dict[str, Any]) -> dict[str, Any]:
    """The manager's result object for ``request``, or the HTTP error its refusal maps to."""
    try:
        answer = await plugins.call(request)
    except ManagerBuildDiffers as differs:
        fail(503, differs.message, BUILD_DIFFERS)
    except PluginRefusal as refusal:
        fail(_refusal_status(refusal.reason), refusal.message, f"manager_{refusal.reason}")
    if answer.get("ok"):
        result: dict[str, Any] = answer["result"]
        return result
    error: dict[str, Any] = answer.get("error") or {}
    if error.get("code") == "release_protocol_unsupported":
        kind: ProtocolKind = "runtime" if error.get("kind") == "runtime" else "release"
        sentence = protocol_sentence(kind, int(error["offered"]), tuple(error["accepted"]))
        fail(409, sentence, "release_protocol_unsupported")
    reason = str(error.get("reason") or "refused")
    fail(
        _refusal_status(reason),
        str(error.get("message") or "the plugin manager refused the request"),
        str(error.get("code") or "manager_operation_refused"),
    )


def _node_status(installation: dict[str, Any]) -> str:
    if installation.get("uninstalled"):
        return "uninstalled"
    if installation.get("selected_digest") is None:
        return "not_installed"
    return "enabled" if installation.get("enabled") else "disabled"


def _inventory_entry(installation: dict[str, Any], available: bool) -> dict[str, Any]:
    release = installation.get("release") or {}
    nodes = []
    if installation.get("selected_digest") is not None:
        nodes.append(
            {
                "nodeId": release.get("bundle_id") or installation["plugin_id"],
                "bundleId": release.get("bundle_id"),
                "version": release.get("bundle_version"),
                "status": _node_status(installation),
                # NOTE: an owner that has not described itself over its socket
                # (not running, or not speaking the owner protocol) offers nothing.
                "configurable": False,
                "credentialsConfigurable": False,
            }
        )
    return {"pluginId": installation["plugin_id"], "available": available, "nodes": nodes}


# -- routes ------------------------------------------------------------------------------

READ_ERRORS: Final = errors(OPENAI, 404, 422, 429, 503, 504)
CHANGE_ERRORS: Final = errors(OPENAI, 404, 409, 422, 429, 503, 504)


class PluginsController(Controller):
    path = "/v1/plugins"
    tags = ("Plugins",)
    # NOTE: the guard admits only loopback without proxy headers, or the operator
    # listener; each handler then applies the owner / bearer-scope rule above.
    opt = declare(Requirement.DIRECT_LOOPBACK)
    request_max_body_size = MAX_PLUGIN_BODY_BYTES
    response_headers = tuple(ResponseHeader(name=k, value=v) for k, v in NO_STORE_HEADERS.items())
    exception_handlers = NO_STORE_EXCEPTION_HANDLERS  # type: ignore[assignment]

    @get("/", summary="Installed plugins and their nodes", responses=READ_ERRORS)
    async def inventory(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
        configurations: NodeConfigurations | None,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_READ)
        try:
            answer = await plugins.call({"action": "list"})
            available = bool(answer.get("ok"))
        except PluginRefusal:
            available = False
        installations = answer["result"]["installations"] if available else plugins.last_inventory
        # In-process providers, then each installation: as its owner describes itself
        # over its socket, or (not described yet) as the manager lists it.
        listed = [] if configurations is None else await configurations.inventory()
        for installation in installations:
            described = None
            if configurations is not None:
                described = configurations.managed_entry(str(installation["plugin_id"]))
            listed.append(described or _inventory_entry(installation, available))
        return {"plugins": listed[:MAX_PROVIDERS]}

    @get("/managed", summary="Managed installations", responses=READ_ERRORS)
    async def managed(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_READ)
        listed = await _ask(plugins, {"action": "list"})
        # NOTE: reload_runtime tells a manager from before that request apart; the
        # manager's build and runtime fields stay host-local.
        return {
            "installations": listed["installations"],
            "reload_runtime": listed.get("reload_runtime") is True,
        }

    @post(
        "/managed/installations",
        status_code=200,
        summary="Register an empty managed installation",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=RegisterBody),
    )
    async def register(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_MANAGE)
        body = decode_body(await request.body(), RegisterBody)
        return await _ask(plugins, {"action": "register", "plugin_id": body.plugin_id})

    @get(
        "/managed/installations/{plugin_id:str}", summary="One installation", responses=READ_ERRORS
    )
    async def installation(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
        plugin_id: str,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_READ)
        return await _ask(plugins, {"action": "get", "plugin_id": _plugin_id(plugin_id)})

    @delete(
        "/managed/installations/{plugin_id:str}",
        status_code=200,
        summary="Purge an uninstalled installation",
        responses=CHANGE_ERRORS,
    )
    async def purge(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
        plugin_id: str,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_MANAGE)
        await _no_body(request)
        return await _ask(plugins, {"action": "purge", "plugin_id": _plugin_id(plugin_id)})

    @post(
        "/managed/installations/{plugin_id:str}/operations",
        status_code=200,
        summary="Submit a lifecycle operation (activate, select, disable, uninstall)",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=LifecycleRequest),
    )
    async def submit(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
        plugin_id: str,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_MANAGE)
        checked = _plugin_id(plugin_id)
        body = decode_body(await request.body(), LifecycleRequest)
        return await _ask(
            plugins,
            {"action": "submit", "plugin_id": checked, "request": msgspec.to_builtins(body)},
        )

    @get(
        "/managed/installations/{plugin_id:str}/operations/{operation_id:str}",
        summary="A retained lifecycle operation",
        responses=READ_ERRORS,
    )
    async def operation(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
        plugin_id: str,
        operation_id: str,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_READ)
        return await _ask(
            plugins,
            {
                "action": "operation",
                "plugin_id": _plugin_id(plugin_id),
                "operation_id": _operation_id(operation_id),
            },
        )

    @post(
        "/managed/installations/{plugin_id:str}/operations/{operation_id:str}/recover",
        status_code=200,
        summary="Explicitly resume a retained lifecycle operation",
        responses=CHANGE_ERRORS,
    )
    async def recover(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
        plugin_id: str,
        operation_id: str,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_MANAGE)
        await _no_body(request)
        return await _ask(
            plugins,
            {
                "action": "recover",
                "plugin_id": _plugin_id(plugin_id),
                "operation_id": _operation_id(operation_id),
            },
        )

    @get(
        "/managed/installations/{plugin_id:str}/source",
        summary="Release source readiness",
        responses=READ_ERRORS,
    )
    async def source(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
        plugin_id: str,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_READ)
        return await _ask(plugins, {"action": "source_status", "plugin_id": _plugin_id(plugin_id)})

    @post(
        "/managed/installations/{plugin_id:str}/source",
        status_code=200,
        summary="Configure the release source and publisher trust (direct owner only)",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=SourceUpdate),
    )
    async def configure_source(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
        plugin_id: str,
    ) -> dict[str, Any]:
        await _authorize(request, authority, None)
        checked = _plugin_id(plugin_id)
        body = decode_body(await request.body(), SourceUpdate)
        update = msgspec.to_builtins(body)
        return await _ask(
            plugins, {"action": "configure_source", "plugin_id": checked, "request": update}
        )

    @get(
        "/managed/installations/{plugin_id:str}/release",
        summary="Fetch and verify the release metadata",
        responses=CHANGE_ERRORS,
    )
    async def release(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
        plugin_id: str,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_READ)
        return await _ask(
            plugins, {"action": "inspect_release", "plugin_id": _plugin_id(plugin_id)}
        )

    @post(
        "/managed/installations/{plugin_id:str}/install",
        status_code=200,
        summary="Download and stage the reviewed release",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=InstallRequest),
    )
    async def install(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
        plugin_id: str,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_MANAGE)
        checked = _plugin_id(plugin_id)
        body = decode_body(await request.body(), InstallRequest)
        return await _ask(
            plugins,
            {"action": "install", "plugin_id": checked, "request": msgspec.to_builtins(body)},
        )

    @get(
        "/managed/installations/{plugin_id:str}/install",
        summary="The retained installation operation",
        responses=READ_ERRORS,
    )
    async def install_status(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
        plugin_id: str,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_READ)
        return await _ask(plugins, {"action": "install_status", "plugin_id": _plugin_id(plugin_id)})

    @post(
        "/managed/installations/{plugin_id:str}/install/{operation_id:str}/recover",
        status_code=200,
        summary="Explicitly retry an interrupted download",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=RecoverInstallBody),
    )
    async def recover_install(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
        plugin_id: str,
        operation_id: str,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_MANAGE)
        checked, operation = _plugin_id(plugin_id), _operation_id(operation_id)
        body = decode_body(await request.body(), RecoverInstallBody)
        return await _ask(
            plugins,
            {
                "action": "recover_install",
                "plugin_id": checked,
                "operation_id": operation,
                "expected_source_revision": body.expected_source_revision,
            },
        )

    @get("/managed/catalog", summary="Read and verify the signed catalog", responses=CHANGE_ERRORS)
    async def catalog(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_READ)
        return await _ask(plugins, {"action": "read_catalog"})

    @get("/managed/catalog/source", summary="Catalog source readiness", responses=READ_ERRORS)
    async def catalog_source(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
    ) -> dict[str, Any]:
        await _authorize(request, authority, PLUGINS_READ)
        return await _ask(plugins, {"action": "catalog_status"})

    @post(
        "/managed/catalog/source",
        status_code=200,
        summary="Configure the catalog address and discovery trust (direct owner only)",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=CatalogUpdate),
    )
    async def configure_catalog(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
    ) -> dict[str, Any]:
        await _authorize(request, authority, None)
        body = decode_body(await request.body(), CatalogUpdate)
        return await _ask(
            plugins, {"action": "configure_catalog", "request": msgspec.to_builtins(body)}
        )

    @post(
        "/managed/catalog/install",
        status_code=200,
        summary="Bind an installation to a reviewed catalog listing (direct owner only)",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=CatalogInstallBody),
    )
    async def catalog_install(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        plugins: ManagerAccess,
    ) -> dict[str, Any]:
        await _authorize(request, authority, None)
        body = decode_body(await request.body(), CatalogInstallBody)
        fields = {k: v for k, v in msgspec.to_builtins(body).items() if v is not None}
        return await _ask(plugins, {"action": "install_from_catalog", **fields})
