"""Model discovery: ``/v1/models``, requirements, and operator custom cards."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import Controller, delete, get, post
from litestar.params import Parameter

from skulk_core.ids import ModelId, new_command_id
from skulk_core.models.cards import ModelCard
from skulk_core.models.catalog import CatalogEntry
from skulk_core.models.context_window import DEFAULT_CONTEXT_TOKENS, MAX_CONTEXT_TOKENS
from skulk_core.models.custom_cards import CardRejectedError, normalize_custom_card
from skulk_core.models.listing import ModelList, ModelListItem, model_list_item
from skulk_core.models.requirements import (
    MAX_MODEL_ID_CHARS,
    ContextOutOfRangeError,
    ModelRequirements,
    model_requirements,
)
from skulk_core.models.suggest import not_in_catalog
from skulk_core.state.commands import AddCustomCard, RemoveCustomCard
from skulk_core.state.decide import CARD_CONFLICT
from skulk_core.steward.listing import steward_entries
from skulk_core.steward.mode import effective_fabric
from skulk_daemon.api.authority import caller_of, declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.policy import Caller, Requirement
from skulk_daemon.errors import ApiError
from skulk_daemon.node.node import Node
from skulk_daemon.system.media_settings import video_models_listed


class AddCardRequest(msgspec.Struct, frozen=True, kw_only=True):
    model_card: ModelCard


def _expected_owner(
    alias: ModelId, data: AddCardRequest | None, *, service: bool
) -> ModelCard | None:
    """The exact card a removal must find owning ``alias``: the original candidate
    normalized as ``add-card`` stored it. The qualification bearer must send it; an
    operator may, and removes whatever card owns the alias otherwise."""
    if data is None:
        if service:
            raise ApiError(
                400,
                "the qualification credential must send the complete original candidate "
                'as the body: {"model_card": {...}}',
                code="candidate_required",
            )
        return None
    try:
        card = normalize_custom_card(data.model_card, qualification_only=service)
    except CardRejectedError as exc:
        raise ApiError(400, str(exc), code="invalid_model_card") from None
    if card.model_id != alias:
        raise ApiError(
            400,
            f"the candidate names {card.model_id}, not {alias}",
            code="invalid_model_card",
        )
    return card


class CustomCardDeleted(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    deleted: bool = True


def _known(node: Node, model_id: str) -> CatalogEntry:
    catalog = node.catalog()
    entry = catalog.get(model_id)
    if entry is None:
        raise ApiError(404, not_in_catalog(model_id, catalog.by_id), code="model_not_found")
    return entry


class ModelsController(Controller):
    tags = ("Models",)
    opt = declare(Requirement.OPEN)

    @get(
        ["/v1/models", "/models"],
        summary="Every model in this node's catalog",
        responses=errors(OPENAI),
    )
    async def list_models(self, node: Node) -> ModelList:
        listed = video_models_listed()
        items = tuple(
            model_list_item(entry)
            for entry in node.catalog().entries()
            # Video cards are hidden unless SKULK_ENABLE_VIDEO_MODELS=true (spec).
            if listed or entry.card.video is None
        )
        return ModelList(
            data=items
            + steward_entries(
                effective_fabric(node.state, node.config.intelligent_fabric), node.catalog()
            )
        )

    @get(
        "/models/requirements",
        summary="Storage and memory one card needs at a context size",
        responses=errors(OPENAI, 400, 404, 422),
    )
    async def requirements(
        self,
        node: Node,
        model_id: str,
        # NOTE: the range is checked by model_requirements rather than by Parameter
        # bounds, so an out-of-range value gets the same 422 as one above the card's
        # limit (Litestar's own validation would answer 400).
        context_tokens: Annotated[
            int, Parameter(description=f"1 to {MAX_CONTEXT_TOKENS}, per sequence")
        ] = DEFAULT_CONTEXT_TOKENS,
    ) -> ModelRequirements:
        if not 1 <= len(model_id) <= MAX_MODEL_ID_CHARS:
            raise ApiError(
                422,
                f"model_id must be 1 to {MAX_MODEL_ID_CHARS} characters",
                code="invalid_model_id",
            )
        entry = _known(node, model_id)
        try:
            return model_requirements(entry.card, context_tokens)
        except ContextOutOfRangeError as exc:
            raise ApiError(422, str(exc), code="context_tokens_out_of_range") from None

    @post(
        "/models/add-card",
        opt=declare(Requirement.DIRECT_LOOPBACK, service_bearer=True),
        status_code=200,
        summary="Add an exact unsigned custom card",
        responses=errors(OPENAI, 400, 409, 413, 503, 504),
    )
    async def add_card(
        self, node: Node, data: AddCardRequest, request: HttpRequest
    ) -> ModelListItem:
        # The qualification service bearer installs qualification-only cards, and never
        # replaces a card it did not install.
        service = caller_of(request) is Caller.SERVICE_BEARER
        try:
            card = normalize_custom_card(data.model_card, qualification_only=service)
        except CardRejectedError as exc:
            raise ApiError(400, str(exc), code="invalid_model_card") from None
        existing = node.state.custom_model_cards.get(card.model_id)
        if service and existing is not None and not existing.qualification_only:
            raise ApiError(
                403,
                "the qualification credential cannot replace a card it did not install",
                code="service_bearer_scope",
            )
        # submit returns once the resulting event is applied here, so the catalog
        # read below sees the card this request added.
        await node.submit(AddCustomCard(command_id=new_command_id(), card=card))
        entry = node.catalog().get(card.model_id)
        if entry is None or entry.card != card:
            raise ApiError(504, "the card was not visible in the catalog", code="not_converged")
        return model_list_item(entry)

    @delete(
        "/models/custom/{model_id:path}",
        opt=declare(Requirement.TRUSTED_FABRIC, service_bearer=True),
        status_code=200,
        summary="Remove a custom card (the qualification bearer: its exact candidate only)",
        responses=errors(OPENAI, 400, 403, 404, 409, 503, 504),
    )
    async def remove_custom_card(
        self,
        node: Node,
        model_id: str,
        request: HttpRequest,
        data: AddCardRequest | None = None,
    ) -> CustomCardDeleted:
        # A ``:path`` parameter keeps its leading slash; model ids contain slashes.
        alias = ModelId(model_id.removeprefix("/"))
        service = caller_of(request) is Caller.SERVICE_BEARER
        expected = _expected_owner(alias, data, service=service)
        existing = node.state.custom_model_cards.get(alias)
        if existing is None:
            raise ApiError(404, f"no custom card for {alias!r}", code="not_found")
        if expected is not None and existing != expected:
            raise ApiError(
                409,
                f"another card now owns {alias}; the candidate sent was not removed",
                code=CARD_CONFLICT,
            )
        if service and not existing.qualification_only:
            raise ApiError(
                403,
                "the qualification credential can remove only the qualification cards it installed",
                code="service_bearer_scope",
            )
        # NOTE: the master checks the expected card again when it orders the removal,
        # so a card replaced after the check above is refused there (409), not deleted.
        await node.submit(
            RemoveCustomCard(command_id=new_command_id(), model_id=alias, expected_card=expected)
        )
        if alias in node.state.custom_model_cards:
            raise ApiError(504, "the removal was not visible in the catalog", code="not_converged")
        return CustomCardDeleted(model_id=alias)
