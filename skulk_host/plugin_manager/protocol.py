"""The local manager's wire: one JSON request per connection, one JSON response.

Requests are a tagged union on ``action``: ``list``, ``register``, ``get``, ``submit``,
``operation``, ``recover``, ``purge``; the release actions ``configure_source``, ``source_status``,
``inspect_release``, ``install``, ``install_status``, ``recover_install``; the catalog
actions ``configure_catalog``, ``catalog_status``, ``read_catalog``,
``install_from_catalog``; and ``reload_runtime`` (``server.py``). ``list`` also names the
manager's runtime: ``reload_runtime: true``, ``runtime`` (``staged`` or
``live_environment``), ``runtime_generation`` and ``build_sha256`` (the staged copy's
Skulk build; ``null`` from a live environment). Unknown fields are refused. A response
is ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {"code": ..., "message":
..., "reason": ...}}`` where ``code`` is ``manager_operation_refused`` except for
``release_protocol_unsupported``, which carries exactly ``kind``, ``offered`` and
``accepted`` (integers) and no message, and ``manager_build_differs``, which carries the
message and the two builds (``host_build_sha256``, ``manager_build_sha256``).
Bounds: a request is at most 16 KiB, a response at most 256 KiB, eight clients at once,
and one thirty-second deadline per request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeAlias

import msgspec

from skulk_core.plugins.answers import (
    CatalogInstalled,
    CatalogReview,
    Installation,
    ManagerListing,
    PublishedSelection,
    Purged,
    ReleaseReview,
    SourceStatus,
)
from skulk_core.plugins.errors import PluginRefusal, ReleaseProtocolUnsupported
from skulk_host.plugin_service.runtime import Generation, ManagerBuildDiffers

SOCKET_NAME: Final = "control.sock"
"""The manager's control socket, in its root."""


def socket_path(root: Path) -> Path:
    """Where the manager rooted at ``root`` listens (and its clients connect)."""
    return root / SOCKET_NAME


MAX_REQUEST_BYTES: Final = 16 * 1024
MAX_RESPONSE_BYTES: Final = 256 * 1024
MAX_CLIENTS: Final = 8
REQUEST_DEADLINE_SECONDS: Final = 30.0
MAX_INSTALLATIONS: Final = 16
MAX_RECOVERY_ATTEMPTS: Final = 8
MAX_OPERATIONS: Final = 128
"""Retained operations per installation; exhaustion needs local maintenance."""
PLUGIN_ID_PATTERN: Final = r"^managed\.[a-z0-9][a-z0-9_-]{0,62}$"
OPERATION_ID_PATTERN: Final = r"^[0-9a-f]{32}$"

PluginId = Annotated[str, msgspec.Meta(pattern=PLUGIN_ID_PATTERN)]
OperationId = Annotated[str, msgspec.Meta(pattern=OPERATION_ID_PATTERN)]
Digest = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
LifecycleAction = Literal["activate", "select", "disable", "uninstall"]
OperationState = Literal[
    "accepted", "applying", "complete", "failed", "recovery_required", "superseded"
]
TERMINAL_STATES: Final = frozenset({"complete", "failed", "superseded"})


class LifecycleRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``submit``'s nested request: one fenced change of an installation's selection."""

    operation_id: OperationId
    action: LifecycleAction
    expected_revision: Annotated[int, msgspec.Meta(ge=0)]
    runtime_digest: Digest | None = None
    rollback: bool = False
    accept_permissions: bool = False

    def __post_init__(self) -> None:
        selects = self.action in ("activate", "select")
        if selects and self.runtime_digest is None:
            raise ValueError(f"{self.action} needs runtime_digest")
        if not selects and (
            self.runtime_digest is not None or self.rollback or self.accept_permissions
        ):
            raise ValueError(
                f"{self.action} takes no runtime_digest, rollback or accept_permissions"
            )


class _Request(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="action"
):
    pass


class ListRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="list",
):
    pass


class RegisterRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="register",
):
    plugin_id: PluginId


class GetRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="get",
):
    plugin_id: PluginId


class SubmitRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="submit",
):
    plugin_id: PluginId
    request: LifecycleRequest


class OperationRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="operation",
):
    plugin_id: PluginId
    operation_id: OperationId


class RecoverRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="recover",
):
    plugin_id: PluginId
    operation_id: OperationId


class PurgeRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="purge",
):
    """Remove one uninstalled (or never selected) installation with all it retained."""

    plugin_id: PluginId


class _FeedUpdate(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a source or catalog update shares: the fence, the feed's address, its trust
    and its write-only token; omitted fields keep their values."""

    expected_revision: Annotated[int, msgspec.Meta(ge=0)]
    base_url: Annotated[str, msgspec.Meta(max_length=2048)] | None = None
    trust: dict[str, Any] | None = None
    token: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None
    clear_token: bool = False

    def __post_init__(self) -> None:
        if self.token is not None and self.clear_token:
            raise ValueError("token and clear_token exclude each other")

    def __repr__(self) -> str:
        # NOTE: the write-only token never reaches a log line or a traceback.
        return (
            f"{type(self).__name__}(expected_revision={self.expected_revision},"
            f" base_url={self.base_url!r})"
        )


class SourceUpdate(_FeedUpdate, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``configure_source``'s nested request."""

    metadata_filename: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None


class InstallRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    operation_id: OperationId
    runtime_digest: Digest
    expected_source_revision: Annotated[int, msgspec.Meta(ge=0)]


class ConfigureSourceRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="configure_source",
):
    plugin_id: PluginId
    request: SourceUpdate


class SourceStatusRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="source_status",
):
    plugin_id: PluginId


class InspectReleaseRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="inspect_release",
):
    plugin_id: PluginId


class InstallReleaseRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="install",
):
    plugin_id: PluginId
    request: InstallRequest


class InstallStatusRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="install_status",
):
    plugin_id: PluginId


class RecoverInstallRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="recover_install",
):
    plugin_id: PluginId
    operation_id: OperationId
    expected_source_revision: Annotated[int, msgspec.Meta(ge=0)]


class CatalogUpdate(_FeedUpdate, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``configure_catalog``'s nested request (the catalog fence and discovery trust)."""

    document_filename: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None


class ConfigureCatalogRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="configure_catalog",
):
    request: CatalogUpdate


class CatalogStatusRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="catalog_status",
):
    pass


class ReadCatalogRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="read_catalog",
):
    pass


class InstallFromCatalogRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="install_from_catalog",
):
    """Bind an installation's source to a reviewed listing (nothing is downloaded beyond
    the release record, staged or activated)."""

    catalog_sha256: Digest
    bundle_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    sequence: Annotated[int, msgspec.Meta(ge=1)]
    runtime_platform: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    plugin_id: PluginId | None = None


class ReloadRuntimeRequest(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="action",
    tag="reload_runtime",
):
    """Select another staged manager generation (sealed as ``manifest_sha256``) and stop,
    so the OS service restarts the manager on it (answered by ``server.py``)."""

    generation: Generation
    manifest_sha256: Digest


CatalogRequest = (
    ConfigureCatalogRequest | CatalogStatusRequest | ReadCatalogRequest | InstallFromCatalogRequest
)

ReleaseRequest = (
    ConfigureSourceRequest
    | SourceStatusRequest
    | InspectReleaseRequest
    | InstallReleaseRequest
    | InstallStatusRequest
    | RecoverInstallRequest
)
Request = (
    ListRequest
    | RegisterRequest
    | GetRequest
    | SubmitRequest
    | OperationRequest
    | RecoverRequest
    | PurgeRequest
    | ReleaseRequest
    | CatalogRequest
    | ReloadRuntimeRequest
)

InstallState = Literal["accepted", "downloading", "staging", "staged", "recovery_required"]


class InstallOperation(msgspec.Struct, frozen=True, kw_only=True):
    operation_id: str
    plugin_id: str
    request: InstallRequest
    review: ReleaseReview
    state: InstallState
    downloaded_bytes: int = 0
    error_code: str | None = None
    attempt: int = 0
    attempt_source_revision: int | None = None
    accepted_at: int
    updated_at: int


_DECODER: Final = msgspec.json.Decoder(Request)
_ENCODER: Final = msgspec.json.Encoder()


Selection: TypeAlias = PublishedSelection
"""The published desired state (``runtime-selection.json``), as the inventory answers it."""


class InstallStatus(msgspec.Struct, frozen=True, kw_only=True):
    """``install_status``'s result: the installation's latest install operation."""

    operation: InstallOperation | None


class LifecycleOperation(msgspec.Struct, frozen=True, kw_only=True):
    operation_id: str
    plugin_id: str
    request: LifecycleRequest
    state: OperationState
    error_code: str | None = None
    preview: Selection | None = None
    """The selection this operation publishes when it completes."""
    withdraws_operation_id: str | None = None
    accepted_at: int
    updated_at: int


class HostListing(ManagerListing, frozen=True, kw_only=True):
    """``list``'s result on the socket: the installations and this manager's runtime
    (host-local; the routes read :class:`ManagerListing`'s part)."""

    runtime: Literal["staged", "live_environment"]
    runtime_generation: str | None
    build_sha256: str | None


class RuntimeReloaded(msgspec.Struct, frozen=True, kw_only=True):
    """``reload_runtime``'s result: the generation selected; the manager restarts."""

    generation: str
    selected: bool
    restarting: bool


Answer: TypeAlias = (
    HostListing
    | Installation
    | Purged
    | LifecycleOperation
    | SourceStatus
    | ReleaseReview
    | InstallOperation
    | InstallStatus
    | CatalogReview
    | CatalogInstalled
    | RuntimeReloaded
)
"""Every result the manager answers (inside ``{"ok": true, "result": ...}``)."""


def decode_request(raw: bytes) -> Request:
    """A request, or a :class:`PluginRefusal` naming what is wrong with it."""
    if len(raw) > MAX_REQUEST_BYTES:
        raise PluginRefusal("too_large", f"A manager request is at most {MAX_REQUEST_BYTES} bytes.")
    try:
        return _DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        raise PluginRefusal("malformed", f"The request is not valid: {exc}.") from None
    except msgspec.DecodeError:
        raise PluginRefusal("malformed", "The request is not one JSON object.") from None


def ok(result: Answer) -> bytes:
    return _bounded(_ENCODER.encode({"ok": True, "result": result}))


def error(refusal: PluginRefusal) -> bytes:
    # NOTE: ``reason`` (the typed refusal) lets the host map a refusal to its HTTP
    # status (unknown installation, fence, malformed, busy) without parsing sentences.
    body: dict[str, Any] = {
        "code": refusal.code,
        "message": refusal.message,
        "reason": refusal.reason,
    }
    if isinstance(refusal, ReleaseProtocolUnsupported):
        # NOTE: exactly the code, kind, offered and accepted: the installer and the
        # routes render the sentence from these (errors.protocol_sentence).
        body = refusal.wire()
    elif isinstance(refusal, ManagerBuildDiffers):
        body = refusal.wire()
    return _ENCODER.encode({"ok": False, "error": body})


def _bounded(encoded: bytes) -> bytes:
    if len(encoded) > MAX_RESPONSE_BYTES:
        return error(
            PluginRefusal("too_large", f"The response would exceed {MAX_RESPONSE_BYTES} bytes.")
        )
    return encoded
