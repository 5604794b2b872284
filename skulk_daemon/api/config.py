"""``GET /config`` and ``PUT /config`` with the spec's preservation rules."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, get, put

from skulk_core.config import (
    RESTART_KEYS,
    TRUST_KEYS,
    ConfigError,
    SkulkConfig,
    merge_update,
    parse_config,
    public_view,
    secrets_set,
    trust_changes,
)
from skulk_daemon.api.authority import caller_of, declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.disclosure import HIDDEN_PATH, config_for, effective_for, is_trusted
from skulk_daemon.api.openapi import OPENAI, documented, errors
from skulk_daemon.authority.policy import Caller, Requirement
from skulk_daemon.errors import ApiError
from skulk_daemon.fabric.cluster import ClusterAgent
from skulk_daemon.fabric.cluster_settings import propagate
from skulk_daemon.node.config_store import EffectiveConfig, kv_cache_for
from skulk_daemon.node.node import Node

TRUST_CALLERS = frozenset({Caller.LOOPBACK, Caller.OPERATOR})
"""Who may change :data:`~skulk_core.config.TRUST_KEYS`."""
TRUST_REASON = (
    "these settings change whom this node trusts or where its secrets go, so they are "
    "accepted only from this machine (localhost) or from a paired device through the "
    "operator gateway"
)


class ConfigEditing(msgspec.Struct, frozen=True, kw_only=True):
    """What an editor needs to know about the settings, for this caller."""

    trust_keys: list[str]
    """Dotted keys ``PUT /config`` changes only for a trusted-enough caller."""
    trust_editable: bool
    """Whether this caller may change them."""
    trust_reason: str | None
    """Why not, when it may not (the same rule the 403 states)."""
    secrets: dict[str, bool]
    """Write-only keys and whether each is set; values are never shown."""
    restart_keys: list[str]
    """Keys read when the process starts: a change takes effect after a restart."""


class ConfigResponse(msgspec.Struct, frozen=True, kw_only=True):
    config: dict[str, Any]
    path: str
    effective: EffectiveConfig
    editing: ConfigEditing


def editing_for(caller: Caller, config: SkulkConfig, *, has_hf_token: bool) -> ConfigEditing:
    editable = caller in TRUST_CALLERS
    secrets = secrets_set(config)
    secrets["hf_token"] = has_hf_token  # the file's or HF_TOKEN's
    return ConfigEditing(
        trust_keys=list(TRUST_KEYS),
        trust_editable=editable,
        trust_reason=None if editable else f"Read-only here: {TRUST_REASON}.",
        secrets=secrets,
        restart_keys=list(RESTART_KEYS),
    )


class WrappedConfig(msgspec.Struct, frozen=True, kw_only=True):
    """``PUT /config`` also takes the configuration wrapped, as ``GET`` shows it."""

    config: SkulkConfig


def _response(node: Node, caller: Caller) -> ConfigResponse:
    store = node.config_store
    effective = store.effective(node.models_dir, node.settings.data_dir)
    return ConfigResponse(
        config=public_view(store.config),
        path=str(store.path),
        effective=effective,
        editing=editing_for(caller, store.config, has_hf_token=effective.has_hf_token),
    )


class ConfigController(Controller):
    tags = ("Config",)
    opt = declare(Requirement.OPEN)

    @get(
        "/config",
        summary="The node's configuration (secrets stripped) and effective values",
        responses=errors(OPENAI),
    )
    async def show(self, node: Node, request: HttpRequest) -> ConfigResponse:
        response = _response(node, caller_of(request))
        if is_trusted(request):
            return response
        # A public caller learns the settings, not where this host keeps its files.
        return msgspec.structs.replace(
            response,
            config=config_for(request, response.config),
            path=HIDDEN_PATH,
            effective=effective_for(request, response.effective),
        )

    @put(
        "/config",
        opt=declare(Requirement.TRUSTED_FABRIC),
        summary="Replace the configuration (see the preservation rules)",
        responses=errors(OPENAI, 400, 409, 413, 422),
        operation_class=documented(body=(SkulkConfig, WrappedConfig)),
    )
    async def update(
        self, node: Node, cluster: ClusterAgent | None, request: HttpRequest
    ) -> ConfigResponse:
        try:
            document = msgspec.json.decode(await request.body())
        except msgspec.DecodeError as exc:
            raise ApiError(400, f"the body is not JSON: {exc}", code="invalid_json") from None
        if isinstance(document, dict) and set(document) == {"config"}:
            document = document["config"]
        if not isinstance(document, dict):
            raise ApiError(422, "the configuration must be a JSON object", code="invalid_config")
        try:
            incoming = parse_config(document)
        except ConfigError as exc:
            raise ApiError(422, str(exc), code="invalid_config") from None
        # NOTE: read, merge and save without an await in between, so two concurrent
        # PUTs cannot both merge against the same old config and lose a preserved key.
        current = node.config_store.config
        if "model_trust" in document and incoming.model_trust != current.model_trust:
            raise ApiError(
                409,
                "model_trust cannot be replaced through PUT /config: repository code is "
                "authorized by signed publication or explicit model addition",
                code="model_trust_immutable",
            )
        merged = merge_update(current, incoming, set(document))
        try:
            kv_cache_for(merged)
        except ConfigError as exc:
            raise ApiError(422, str(exc), code="invalid_config") from None
        protected = trust_changes(current, merged)
        caller = caller_of(request)
        if protected and caller not in TRUST_CALLERS:
            raise ApiError(
                403,
                f"changing {', '.join(protected)} is accepted only from this machine "
                "(localhost) or from a paired device through the operator gateway",
                code="loopback_required",
            )
        node.config_store.save(merged)
        # The cluster-wide keys then reach every node through State (and the token
        # through the fabric); a cluster with no master answers 503 after this save.
        await propagate(node, cluster, current, merged, set(document))
        return _response(node, caller)
