"""``GET /config`` and ``PUT /config`` with the spec's preservation rules."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, get, put

from skulk_core.config import (
    ConfigError,
    SkulkConfig,
    merge_update,
    parse_config,
    public_view,
    trust_changes,
)
from skulk_daemon.api.authority import caller_of, declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.disclosure import HIDDEN_PATH, config_for, effective_for, is_trusted
from skulk_daemon.api.openapi import OPENAI, documented, errors
from skulk_daemon.authority.policy import Caller, Requirement
from skulk_daemon.errors import ApiError
from skulk_daemon.node.config_store import EffectiveConfig
from skulk_daemon.node.node import Node


class ConfigResponse(msgspec.Struct, frozen=True, kw_only=True):
    config: dict[str, Any]
    path: str
    effective: EffectiveConfig


class WrappedConfig(msgspec.Struct, frozen=True, kw_only=True):
    """``PUT /config`` also takes the configuration wrapped, as ``GET`` shows it."""

    config: SkulkConfig


def _response(node: Node) -> ConfigResponse:
    store = node.config_store
    return ConfigResponse(
        config=public_view(store.config),
        path=str(store.path),
        effective=store.effective(node.models_dir, node.settings.data_dir),
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
        response = _response(node)
        if is_trusted(request):
            return response
        # A public caller learns the settings, not where this host keeps its files.
        return ConfigResponse(
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
    async def update(self, node: Node, request: HttpRequest) -> ConfigResponse:
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
        protected = trust_changes(current, merged)
        if protected and caller_of(request) not in (Caller.LOOPBACK, Caller.OPERATOR):
            raise ApiError(
                403,
                f"changing {', '.join(protected)} is accepted only from this machine "
                "(localhost) or from a paired device through the operator gateway",
                code="loopback_required",
            )
        node.config_store.save(merged)
        return _response(node)
