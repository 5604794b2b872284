"""What a store download fetches, decided without I/O.

``POST /store/models/{model_id}/download`` (and the store listener's ``POST
/models/{model_id}/download``) may name the exact artifact: ``gguf_file``,
``extra_gguf_files``, ``source_revision``, ``source_repository``, the signed base card
(``registry_card_id``), its v2 bundle (``artifact_bundle_id``) or, for a companion,
its ``artifact_role`` and owning card (``owner_model_id``, ``owner_registry_card_id``).

:func:`selection_problem` is the 400 check (malformed identifiers and roles);
:func:`resolve` binds a well-formed selection to the catalog the store host verified
and answers either a :class:`Plan` or a :class:`Conflict` (409): a card id the signed
catalog does not publish for the alias, a changed, missing or legacy bundle, a pin
that differs from the card's, or a companion its owner does not declare. A model
absent from the catalog is planned as an ``unverified`` Hugging Face fetch.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Final

import msgspec

from skulk_core.models.cards import ArtifactRole, CompanionArtifact, ModelCard
from skulk_core.models.catalog import CatalogEntry
from skulk_core.models.custom_cards import SOURCE_REVISION_PATTERN
from skulk_core.models.hub_cards import is_safe_repo_path
from skulk_core.registry.bundles import BUNDLE_ID_PATTERN
from skulk_core.registry.format import CARD_ID_PATTERN

MAX_IDENTIFIER_CHARS: Final = 512
MAX_EXTRA_GGUF_FILES: Final = 16
REPOSITORY_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
ROLES: Final = ", ".join(role.value for role in ArtifactRole)


class Verification(StrEnum):
    """What vouches for a store record's card."""

    REGISTRY_VERIFIED = "registry_verified"
    CUSTOM = "custom"
    LOCAL_LEGACY = "local_legacy"
    UNVERIFIED = "unverified"
    """Fetched by name (a search result absent from the catalog): no card vouches."""


class DownloadSelection(msgspec.Struct, frozen=True, kw_only=True):
    """The optional body of a store download (every field optional)."""

    gguf_file: str | None = None
    extra_gguf_files: tuple[str, ...] = ()
    source_revision: str | None = None
    source_repository: str | None = None
    registry_card_id: str | None = None
    artifact_bundle_id: str | None = None
    artifact_role: str | None = None
    owner_model_id: str | None = None
    owner_registry_card_id: str | None = None

    @property
    def role(self) -> ArtifactRole:
        """The role (call after :func:`selection_problem` accepted the selection)."""
        return ArtifactRole(self.artifact_role or ArtifactRole.BASE.value)


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """What the store fetches and the record it keeps of why."""

    model_id: str
    card: ModelCard | None
    """The card to fetch; None: build it from the repository (companion or unverified)."""
    source_repository: str
    source_revision: str | None
    gguf_file: str | None
    extra_gguf_files: tuple[str, ...]
    verification: Verification
    registry_card_id: str | None
    artifact_bundle_id: str | None
    artifact_role: ArtifactRole
    owner_model_id: str | None = None
    owner_registry_card_id: str | None = None


class Conflict(msgspec.Struct, frozen=True, kw_only=True):
    message: str


def _gguf_path_problem(name: str, value: str) -> str | None:
    if not is_safe_repo_path(value) or not value.lower().endswith(".gguf"):
        return f"{name} must be a non-empty repo-relative path to a .gguf file, got {value!r}"
    return None


def _repository_problem(name: str, value: str) -> str | None:
    if len(value) > MAX_IDENTIFIER_CHARS:
        return f"{name} must be at most {MAX_IDENTIFIER_CHARS} characters"
    if REPOSITORY_PATTERN.fullmatch(value) is None or ".." in value:
        return f"{name} must be an owner/repository identifier, got {value!r}"
    return None


def selection_problem(selection: DownloadSelection) -> str | None:
    """Why the selection is malformed (400), or None."""
    problems: list[str | None] = []
    if selection.gguf_file is not None:
        problems.append(_gguf_path_problem("gguf_file", selection.gguf_file))
    if len(selection.extra_gguf_files) > MAX_EXTRA_GGUF_FILES:
        problems.append(f"extra_gguf_files may name at most {MAX_EXTRA_GGUF_FILES} files")
    problems.extend(_gguf_path_problem("extra_gguf_files", f) for f in selection.extra_gguf_files)
    revision = selection.source_revision
    if revision is not None and SOURCE_REVISION_PATTERN.fullmatch(revision) is None:
        problems.append(
            "source_revision must be a full 40-character lowercase hexadecimal commit id"
        )
    if selection.source_repository is not None:
        problems.append(_repository_problem("source_repository", selection.source_repository))
    for name, value in (
        ("registry_card_id", selection.registry_card_id),
        ("owner_registry_card_id", selection.owner_registry_card_id),
    ):
        if value is not None and CARD_ID_PATTERN.fullmatch(value) is None:
            problems.append(f"{name} must be card_ followed by 64 lowercase hex digits")
    bundle = selection.artifact_bundle_id
    if bundle is not None and BUNDLE_ID_PATTERN.fullmatch(bundle) is None:
        problems.append("artifact_bundle_id must be bundle_ followed by 64 lowercase hex digits")
    role = selection.artifact_role
    if role is not None and role not in {r.value for r in ArtifactRole}:
        problems.append(f"artifact_role must be one of {ROLES}, got {role!r}")
    elif (role or ArtifactRole.BASE.value) == ArtifactRole.BASE.value:
        if selection.owner_model_id is not None or selection.owner_registry_card_id is not None:
            problems.append(
                "owner_model_id and owner_registry_card_id name a companion's owner; give a "
                "non-base artifact_role with them"
            )
    elif selection.owner_model_id is None:
        problems.append(f"owner_model_id is required for artifact_role {role!r}")
    else:
        problems.append(_repository_problem("owner_model_id", selection.owner_model_id))
        if selection.registry_card_id is not None:
            problems.append(
                "registry_card_id selects a base card; a companion names its owner's card "
                "as owner_registry_card_id"
            )
    return next((p for p in problems if p is not None), None)


def verification_of(card: ModelCard) -> Verification:
    if card.registry_card_id:
        return Verification.REGISTRY_VERIFIED
    return Verification.CUSTOM if card.is_custom else Verification.LOCAL_LEGACY


def resolve(
    model_id: str,
    selection: DownloadSelection,
    entry: CatalogEntry | None,
    owner: CatalogEntry | None = None,
) -> Plan | Conflict:
    """Bind a well-formed ``selection`` for ``model_id`` to the verified catalog
    (``entry`` is the alias's, ``owner`` the owning base card's for a companion)."""
    if selection.role is not ArtifactRole.BASE:
        return _companion(model_id, selection, owner)
    card: ModelCard | None
    if selection.registry_card_id is not None:
        signed = None if entry is None else entry.registry_card
        if signed is None or signed.registry_card_id != selection.registry_card_id:
            published = None if signed is None else signed.registry_card_id
            return Conflict(
                message=(
                    f"the store host cannot verify {selection.registry_card_id} for "
                    f"{model_id}: its signed catalog publishes "
                    f"{published or 'no card'} for that alias"
                )
            )
        card = signed
    else:
        card = None if entry is None else entry.card
    if card is None:
        return _unverified(model_id, selection)
    if selection.artifact_bundle_id is not None:
        conflict = bundle_conflict(model_id, card, selection.artifact_bundle_id)
        if conflict is not None:
            return conflict
    for name, wanted, pinned in (
        ("gguf_file", selection.gguf_file, card.gguf_file),
        ("source_revision", selection.source_revision, card.source_revision),
        ("source_repository", selection.source_repository, card.source_repository),
    ):
        if wanted is not None and wanted != pinned:
            return Conflict(
                message=(
                    f"{name} {wanted!r} differs from the card's pin {pinned!r} for "
                    f"{model_id}; add the model again with that pin first"
                )
            )
    return Plan(
        model_id=model_id,
        card=card,
        source_repository=card.source_repository or model_id,
        source_revision=card.source_revision,
        gguf_file=card.gguf_file,
        extra_gguf_files=selection.extra_gguf_files,
        verification=verification_of(card),
        registry_card_id=card.registry_card_id,
        artifact_bundle_id=None if card.artifact_bundle is None else card.artifact_bundle.bundle_id,
        artifact_role=ArtifactRole.BASE,
    )


def bundle_conflict(model_id: str, card: ModelCard | None, bundle_id: str) -> Conflict | None:
    """Why ``card`` does not resolve exactly ``bundle_id`` (a missing, legacy or changed
    bundle), or None."""
    if card is None:
        return Conflict(message=f"{model_id} has no card, so no bundle {bundle_id} to fetch")
    bundle = card.artifact_bundle
    if bundle is None:
        return Conflict(
            message=f"{model_id}'s card is a legacy (v1) card without an artifact bundle; "
            f"it cannot resolve {bundle_id}"
        )
    if bundle.bundle_id != bundle_id:
        return Conflict(
            message=f"{model_id}'s bundle changed: its card resolves {bundle.bundle_id}, not "
            f"{bundle_id}; nothing different is downloaded"
        )
    return None


def _unverified(model_id: str, selection: DownloadSelection) -> Plan | Conflict:
    if selection.artifact_bundle_id is not None:
        conflict = bundle_conflict(model_id, None, selection.artifact_bundle_id)
        assert conflict is not None
        return conflict
    repository = selection.source_repository or model_id
    problem = _repository_problem("the model id", repository)
    if problem is not None:
        return Conflict(message=f"{model_id} is not in the catalog and {problem}")
    return Plan(
        model_id=model_id,
        card=None,
        source_repository=repository,
        source_revision=selection.source_revision,
        gguf_file=selection.gguf_file,
        extra_gguf_files=selection.extra_gguf_files,
        verification=Verification.UNVERIFIED,
        registry_card_id=None,
        artifact_bundle_id=None,
        artifact_role=ArtifactRole.BASE,
    )


def _companion(
    model_id: str, selection: DownloadSelection, owner: CatalogEntry | None
) -> Plan | Conflict:
    owner_id = str(selection.owner_model_id)
    if owner is None:
        return Conflict(message=f"the owning card {owner_id} is not in the catalog")
    wanted_id = selection.owner_registry_card_id
    if wanted_id is not None:
        owner_card = owner.registry_card
        if owner_card is None or owner_card.registry_card_id != wanted_id:
            published = None if owner_card is None else owner_card.registry_card_id
            return Conflict(
                message=(
                    f"the store host cannot verify owner card {wanted_id} for {owner_id}: its "
                    f"signed catalog publishes {published or 'no card'} for that alias"
                )
            )
    else:
        owner_card = owner.card
        if owner_card.registry_card_id:
            return Conflict(
                message=(
                    f"{owner_id} is a signed card ({owner_card.registry_card_id}); name it as "
                    "owner_registry_card_id"
                )
            )
    declared = _declared(model_id, selection, owner_card.companions)
    if declared is None:
        return Conflict(
            message=(
                f"{owner_id}'s card declares no {selection.role.value} companion matching "
                f"{model_id} (repository, revision, file and role must match its declaration)"
            )
        )
    return Plan(
        model_id=model_id,
        card=None,
        source_repository=declared.source_repository,
        source_revision=declared.source_revision,
        gguf_file=declared.gguf_file,
        extra_gguf_files=selection.extra_gguf_files,
        verification=verification_of(owner_card),
        registry_card_id=None,
        artifact_bundle_id=None,
        artifact_role=selection.role,
        owner_model_id=owner_id,
        owner_registry_card_id=owner_card.registry_card_id,
    )


def _declared(
    model_id: str, selection: DownloadSelection, companions: tuple[CompanionArtifact, ...]
) -> CompanionArtifact | None:
    repository = selection.source_repository or model_id
    for item in companions:
        if (
            item.role is selection.role
            and item.source_repository == repository
            and selection.source_revision in (None, item.source_revision)
            and selection.gguf_file in (None, item.gguf_file)
            and item.model_id in (None, model_id)
        ):
            return item
    return None
