"""Read-only views of the node's JSON, just the fields the CLI shows.

Unknown fields are ignored and every field has a default, so a newer node with more
to say still renders; a node that answers in a different shape is reported as such.
"""

from __future__ import annotations

from collections.abc import Mapping
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


class Shard(_View, frozen=True, kw_only=True):
    """Any shard kind's fields; an RPC memory donor has no layers."""

    device_rank: int = 0
    world_size: int = 1
    start_layer: int | None = None
    end_layer: int | None = None
    n_layers: int | None = None


class ShardAssignments(_View, frozen=True, kw_only=True):
    model_id: str = ""
    node_to_runner: dict[str, str] = {}
    # Tagged: {"PipelineShardMetadata": {...}}.
    runner_to_shard: dict[str, dict[str, Shard]] = {}


class InstanceBody(_View, frozen=True, kw_only=True):
    instance_id: str = ""
    shard_assignments: ShardAssignments = ShardAssignments()
    context_token_limit: int | None = None


# Tagged unions arrive externally tagged: {"MlxRingInstance": {...}}.
TaggedInstance = dict[str, InstanceBody]
# A runner status is one tag and its fields: {"RunnerFailed": {"errorMessage": ...}}.
TaggedRunnerStatus = dict[str, dict[str, object]]


class InstanceFailure(_View, frozen=True, kw_only=True):
    instance_id: str = ""
    model_id: str = ""
    error_code: str = ""
    error_message: str = ""
    recorded_at: str | None = None


class DownloadProgress(_View, frozen=True, kw_only=True):
    model_id: str = ""
    status: str = ""
    downloaded_bytes: int = 0
    total_bytes: int = 0


class Topology(_View, frozen=True, kw_only=True):
    nodes: tuple[str, ...] = ()


class ClusterState(_View, frozen=True, kw_only=True):
    instances: dict[str, TaggedInstance] = {}
    runners: dict[str, TaggedRunnerStatus] = {}
    instance_failures: tuple[InstanceFailure, ...] = ()
    downloads: dict[str, tuple[DownloadProgress, ...]] = {}
    store_hosts: dict[str, object] = {}
    node_memory: dict[str, NodeMemory] = {}
    node_health: dict[str, NodeHealth] = {}
    node_identities: dict[str, NodeIdentityInfo] = {}
    topology: Topology = Topology()
    master_node_id: str | None = None
    election_term: int = 0

    def node_name(self, node_id: str) -> str | None:
        info = self.node_identities.get(node_id)
        return info.friendly_name if info else None

    def failure_of(self, instance_id: str) -> InstanceFailure | None:
        """The newest recorded failure of ``instance_id``, if it failed."""
        return next((f for f in self.instance_failures if f.instance_id == instance_id), None)


def untag(tagged: Mapping[str, T]) -> tuple[str, T] | None:
    """``{"MlxRingInstance": body}`` -> ``("MlxRingInstance", body)``; None when empty."""
    return next(iter(tagged.items()), None)


class Preview(msgspec.Struct, frozen=True, kw_only=True):
    """One placement shape from ``/instance/previews``: an instance, or why not."""

    model_id: str = ""
    sharding: str = ""
    instance_meta: str = ""
    node_count: int | None = None
    backend: str | None = None
    instance: TaggedInstance | None = None
    error: str | None = None
    error_code: str | None = None
    memory_delta_by_node: dict[str, int] = {}
    max_context_tokens: int | None = None
    default_context_tokens: int | None = None
    reserves_context_at_load: bool = False
    kv_bytes_per_token: int | None = None
    card_digest: str | None = None
    alternative: bool = False

    @property
    def valid(self) -> bool:
        return self.error is None and bool(self.instance)

    @property
    def body(self) -> InstanceBody | None:
        found = untag(self.instance) if self.instance else None
        return found[1] if found else None

    @property
    def nodes(self) -> int:
        """How many nodes the placement spans (0 when the node did not say)."""
        if self.node_count is not None:
            return self.node_count
        return len(self.body.shard_assignments.node_to_runner) if self.body else 0


class PreviewList(msgspec.Struct, frozen=True, kw_only=True):
    previews: tuple[Preview, ...] = ()


class PlaceResponse(msgspec.Struct, frozen=True, kw_only=True):
    instance_id: str
    command_id: str = ""
    model_id: str = ""
    message: str = ""


class DeleteResponse(msgspec.Struct, frozen=True, kw_only=True):
    instance_id: str = ""
    command_id: str = ""
    message: str = ""


class GenerationStats(msgspec.Struct, frozen=True, kw_only=True):
    """What the runner measured for one generation (``generation_stats``)."""

    prompt_tps: float | None = None
    generation_tps: float | None = None
    prompt_tokens: int | None = None
    generation_tokens: int | None = None
    serving_batches: bool | None = None
    """Whether the engine decoded this request together with others."""
    in_flight_at_admission: int | None = None
    cached_tokens: int | None = None
    time_to_first_token_ms: float | None = None


class NodePower(msgspec.Struct, frozen=True, kw_only=True):
    watts: float | None = None
    sources: tuple[str, ...] = ()


class PowerUsage(msgspec.Struct, frozen=True, kw_only=True):
    """Average system power over a bench request, per node and in total."""

    nodes: dict[str, NodePower] = {}
    total_watts: float | None = None


class BenchChoice(msgspec.Struct, frozen=True, kw_only=True):
    finish_reason: str | None = None


class BenchResult(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /bench/chat/completions``: a chat completion plus what it cost.

    ``power_usage`` is null where the node cannot measure power.
    """

    choices: tuple[BenchChoice, ...] = ()
    generation_stats: GenerationStats = GenerationStats()
    power_usage: PowerUsage | None = None

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason if self.choices else None


class Model(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    catalog_source: str | None = None
    installed: bool = False
    context_length: int | None = None
    storage_size_bytes: int | None = None
    capabilities: tuple[str, ...] = ()


class ModelList(msgspec.Struct, frozen=True, kw_only=True):
    data: tuple[Model, ...] = ()


class EffectiveSetting(msgspec.Struct, frozen=True, kw_only=True):
    """One setting the node runs with and where it came from (flag, env, file, default)."""

    key: str
    value: object = None
    source: str = "default"


class ConfigResponse(msgspec.Struct, frozen=True, kw_only=True):
    config: dict[str, object] = {}
    path: str | None = None
    effective: dict[str, object] = {}

    @property
    def in_effect(self) -> list[EffectiveSetting]:
        """``effective.in_effect``: the node's start-up settings with their sources."""
        try:
            return msgspec.convert(self.effective.get("in_effect", []), list[EffectiveSetting])
        except msgspec.ValidationError:
            return []  # an older node: the effective values alone are shown


class InstanceDetail(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /instance/{id}``: the instance and its runners' statuses."""

    kind: str
    body: InstanceBody
    runners: dict[str, TaggedRunnerStatus] = {}


def parse_instance(raw: JsonObject, what: str) -> InstanceDetail:
    """``{"instance": {"MlxRingInstance": {...}}, "runners": {...}}``.

    A bare tagged instance (as in ``/state``) is accepted too.
    """
    tagged = raw.get("instance", raw)
    runners = parse({"runners": raw.get("runners", {})}, _Runners, what).runners
    if isinstance(tagged, dict) and len(tagged) == 1:
        ((kind, body),) = tagged.items()
        if isinstance(kind, str) and kind.endswith("Instance") and isinstance(body, dict):
            return InstanceDetail(kind=kind, body=parse(body, InstanceBody, what), runners=runners)
    raise UnexpectedResponseError(f"unexpected {what} response from the node: no instance")


class _Runners(msgspec.Struct, frozen=True, kw_only=True):
    runners: dict[str, TaggedRunnerStatus] = {}


def parse(raw: object, view: type[T], what: str) -> T:
    """Convert a response into a view (or a core wire type), or say plainly that the
    node answered oddly."""
    try:
        return msgspec.convert(raw, view)
    except msgspec.ValidationError as exc:
        raise UnexpectedResponseError(f"unexpected {what} response from the node: {exc}") from None
