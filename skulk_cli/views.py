"""Read-only views of the node's JSON, just the fields the CLI shows.

Unknown fields are ignored and every field has a default, so a newer node with more
to say still renders; a node that answers in a different shape is reported as such.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from skulk_cli.client import JsonObject, UnexpectedResponseError

T = TypeVar("T")


class _View(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pass


class NodeIdentity(_View, frozen=True, kw_only=True):
    node_id: str
    hostname: str = ""
    ip_address: str = ""


class Bytes(_View, frozen=True, kw_only=True):
    in_bytes: int = 0


class NodeMemory(_View, frozen=True, kw_only=True):
    ram_total: Bytes = Bytes()
    ram_available: Bytes = Bytes()


class HealthReason(_View, frozen=True, kw_only=True):
    code: str = ""
    message: str = ""
    remediation: str = ""


class NodeHealth(_View, frozen=True, kw_only=True):
    level: str = "ok"
    reasons: tuple[HealthReason, ...] = ()


class NodeIdentityInfo(_View, frozen=True, kw_only=True):
    friendly_name: str | None = None
    node_install_id: str | None = None
    skulk_version: str | None = None
    skulk_commit: str | None = None


class ShardAssignments(_View, frozen=True, kw_only=True):
    model_id: str = ""
    node_to_runner: dict[str, str] = {}


class InstanceBody(_View, frozen=True, kw_only=True):
    instance_id: str = ""
    shard_assignments: ShardAssignments = ShardAssignments()
    context_token_limit: int | None = None


class ClusterState(_View, frozen=True, kw_only=True):
    # Tagged unions arrive externally tagged: {"MlxRingInstance": {...}}.
    instances: dict[str, dict[str, InstanceBody]] = {}
    runners: dict[str, dict[str, dict[str, object]]] = {}
    node_memory: dict[str, NodeMemory] = {}
    node_health: dict[str, NodeHealth] = {}
    node_identities: dict[str, NodeIdentityInfo] = {}


class Model(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    catalog_source: str | None = None
    installed: bool = False
    context_length: int | None = None
    storage_size_bytes: int | None = None
    capabilities: tuple[str, ...] = ()


class ModelList(msgspec.Struct, frozen=True, kw_only=True):
    data: tuple[Model, ...] = ()


class ConfigResponse(msgspec.Struct, frozen=True, kw_only=True):
    config: dict[str, object] = {}
    path: str | None = None
    effective: dict[str, object] = {}


def parse(raw: JsonObject, view: type[T], what: str) -> T:
    """Convert a response into a view, or say plainly that the node answered oddly."""
    try:
        return msgspec.convert(raw, view)
    except msgspec.ValidationError as exc:
        raise UnexpectedResponseError(f"unexpected {what} response from the node: {exc}") from None
