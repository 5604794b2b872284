"""Ollama's model views (``/api/tags``, ``/api/show``, ``/api/ps``) from the catalog.

Pure: catalog entries and State in, wire structs out. Everything Ollama reports
that Skulk has no counterpart for carries a compatibility value the spec names
(``size: 0`` in ``ps``, placeholder digests), never a guess dressed as a fact.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from skulk_core.ids import InstanceId
from skulk_core.models.card_digest import card_digest
from skulk_core.models.cards import ModelCard, ModelKind, ModelTask, served_kind
from skulk_core.models.catalog import Catalog, CatalogEntry
from skulk_core.models.listing import resolved_capabilities
from skulk_core.state.state import State
from skulk_daemon.chat.prompt import template_supports_tools

COMPLETED_DOWNLOAD_STATUSES: Final = frozenset({"completed", "complete", "downloaded"})
"""``DownloadProgress.status`` values (any case) of a download that finished."""
DEFAULT_TAG: Final = ":latest"
"""Ollama clients add this tag to a bare name; Skulk ids carry no tags."""
NEVER_EXPIRES: Final = "9999-12-31T23:59:59Z"
"""``expires_at`` of a model that stays loaded until it is deleted: placed explicitly,
or on demand with a negative ``keep_alive``."""

# A parameter-count label in a model name: "gemma-3-270m" → 270M, "Llama-3.2-1B" → 1B.
_SIZE_LABEL = re.compile(r"(?:^|[-_/ .])(\d+(?:\.\d+)?)([mMbB])(?=$|[-_/ .])")


class OllamaDetails(msgspec.Struct, frozen=True, kw_only=True):
    parent_model: str
    format: str
    family: str
    families: tuple[str, ...]
    parameter_size: str
    quantization_level: str


class OllamaModel(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: OllamaDetails


class OllamaTags(msgspec.Struct, frozen=True, kw_only=True):
    models: tuple[OllamaModel, ...]


class OllamaRunningModel(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    model: str
    size: int
    digest: str
    details: OllamaDetails
    expires_at: str
    size_vram: int
    context_length: int | None


class OllamaPs(msgspec.Struct, frozen=True, kw_only=True):
    models: tuple[OllamaRunningModel, ...]


class OllamaShow(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    modelfile: str
    parameters: str
    template: str
    details: OllamaDetails
    model_info: dict[str, Any]
    capabilities: tuple[str, ...]
    modified_at: str
    license: str | None = None


class OllamaVersion(msgspec.Struct, frozen=True, kw_only=True):
    version: str


def find(catalog: Catalog, name: str) -> CatalogEntry | None:
    """The catalog entry ``name`` means, allowing the ``:latest`` clients append."""
    entry = catalog.get(name)
    if entry is None and name.endswith(DEFAULT_TAG):
        entry = catalog.get(name.removesuffix(DEFAULT_TAG))
    return entry


def _rfc3339(unix_seconds: float) -> str:
    at = datetime.fromtimestamp(round(unix_seconds), UTC)
    return at.isoformat().replace("+00:00", "Z")


def parameter_size(card: ModelCard) -> str:
    """The size label in the model's name (``270M``, ``1B``), or ``""`` if it has none."""
    for text in (card.display_name or "", card.model_id):
        match = _SIZE_LABEL.search(text)
        if match is not None:
            return f"{match.group(1)}{match.group(2).upper()}"
    return ""


def details(card: ModelCard) -> OllamaDetails:
    family = card.architecture or ""
    return OllamaDetails(
        parent_model=card.base_model or "",
        format="gguf" if card.gguf_file else "safetensors",
        family=family,
        families=(family,) if family else (),
        parameter_size=parameter_size(card),
        quantization_level=(card.quantization or "").upper(),
    )


def _digest(card: ModelCard) -> str:
    # A placeholder for clients that key on it, not a proof of the bytes (the spec).
    return card_digest(card)


def _completed_downloads(state: State) -> set[str]:
    return {
        progress.model_id
        for reports in state.downloads.values()
        for progress in reports
        if progress.status.lower() in COMPLETED_DOWNLOAD_STATUSES
    }


def tags(catalog: Catalog, state: State) -> OllamaTags:
    """Catalog cards whose bytes are here or whose download the cluster reports complete."""
    downloaded = _completed_downloads(state)
    return OllamaTags(
        models=tuple(
            OllamaModel(
                name=entry.model_id,
                model=entry.model_id,
                modified_at=_rfc3339(entry.installed_at),
                size=entry.card.storage_size.in_bytes,
                digest=_digest(entry.card),
                details=details(entry.card),
            )
            for entry in catalog.entries()
            if entry.installed or entry.model_id in downloaded
        )
    )


def running(
    catalog: Catalog, state: State, expires_at: Mapping[InstanceId, float | None]
) -> OllamaPs:
    """One item per model with an instance placed, however many instances it has.

    ``expires_at`` is each instance's idle unload time (Unix seconds; ``None`` or
    absent: never). A model stays loaded while any of its instances does, so its
    ``expires_at`` is the latest of them.
    """
    contexts: dict[str, int | None] = {}
    expiry: dict[str, float | None] = {}
    for instance_id, instance in state.instances.items():
        placed = instance.shard_assignments.model_id
        limit = instance.context_token_limit
        contexts[placed] = max(contexts.get(placed) or 0, limit or 0) or None
        at = expires_at.get(instance_id)
        earlier = expiry.get(placed, 0.0)
        expiry[placed] = None if at is None or earlier is None else max(earlier, at)
    models: list[OllamaRunningModel] = []
    for model_id in sorted(contexts):
        entry = catalog.get(model_id)
        card_details = details(entry.card) if entry is not None else _unknown_details()
        models.append(
            OllamaRunningModel(
                name=model_id,
                model=model_id,
                size=0,
                digest=_digest(entry.card) if entry is not None else "",
                details=card_details,
                expires_at=_expiry(expiry.get(model_id)),
                size_vram=0,
                context_length=contexts[model_id],
            )
        )
    return OllamaPs(models=tuple(models))


def _expiry(unix_seconds: float | None) -> str:
    return NEVER_EXPIRES if unix_seconds is None else _rfc3339(unix_seconds)


def _unknown_details() -> OllamaDetails:
    return OllamaDetails(
        parent_model="",
        format="",
        family="",
        families=(),
        parameter_size="",
        quantization_level="",
    )


def capabilities(card: ModelCard) -> tuple[str, ...]:
    """Ollama's capability labels, from what the card declares."""
    caps = resolved_capabilities(card)
    found: list[str] = []
    if ModelTask.TEXT_GENERATION in card.tasks:
        found.append("completion")
        # Skulk serves tools to every text model: through the template when it takes
        # them, through its own tool prompt otherwise. "tools" tells clients the
        # model is meant for it.
        if caps.supports_tools or template_supports_tools(card):
            found.append("tools")
        if caps.supports_thinking:
            found.append("thinking")
    if caps.supports_vision:
        found.append("vision")
    if ModelTask.TEXT_EMBEDDING in card.tasks:
        found.append("embedding")
    return tuple(found)


def _model_info(card: ModelCard) -> dict[str, str | int]:
    arch = card.architecture or "unknown"
    info: dict[str, str | int] = {"general.architecture": arch, "general.name": card.model_id}
    geometry: dict[str, int | None] = {
        "context_length": card.context_length,
        "block_count": card.n_layers,
        "embedding_length": card.hidden_size,
        "attention.head_count": card.num_attention_heads,
        "attention.head_count_kv": card.num_key_value_heads,
        "attention.key_length": card.head_dim,
    }
    info.update({f"{arch}.{key}": value for key, value in geometry.items() if value is not None})
    return info


def _parameters(card: ModelCard) -> str:
    lines = []
    if card.context_length is not None:
        lines.append(f"num_ctx {card.context_length}")
    if card.eos_token:
        lines.append(f'stop "{card.eos_token}"')
    return "\n".join(lines)


PLAIN_TEMPLATE: Final = "{{ .Prompt }}"
"""Ollama's template for a model that takes its prompt as written (a base model)."""


def _template(card: ModelCard) -> str:
    """The template the card is served with, in Ollama's words for a base card."""
    if ModelTask.TEXT_GENERATION in card.tasks and served_kind(card) == ModelKind.BASE:
        return PLAIN_TEMPLATE
    return card.chat_template or ""


def _modelfile(card: ModelCard, parameters: str) -> str:
    lines = [
        "# Compatibility view generated by Skulk; Skulk does not read Modelfiles.",
        f"FROM {card.model_id}",
    ]
    if template := _template(card):
        lines.append(f'TEMPLATE """{template}"""')
    lines.extend(f"PARAMETER {parameter}" for parameter in parameters.splitlines())
    return "\n".join(lines) + "\n"


def show(entry: CatalogEntry) -> OllamaShow:
    card = entry.card
    parameters = _parameters(card)
    license_ = card.license
    return OllamaShow(
        modelfile=_modelfile(card, parameters),
        parameters=parameters,
        template=_template(card),
        details=details(card),
        model_info=_model_info(card),
        capabilities=capabilities(card),
        modified_at=_rfc3339(entry.installed_at),
        license=None if license_ is None else (license_.notice or license_.name),
    )
