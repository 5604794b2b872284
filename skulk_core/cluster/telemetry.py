"""Node telemetry: last-write-wins facts each node republishes every ~1-2 s.

Telemetry never enters the event log. ``/state`` renders it beside State.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

import msgspec

from skulk_core.cluster.prefixes import InstancePrefixes
from skulk_core.extensions.capability_nodes import CapabilityNodeSummary
from skulk_core.ids import NodeId, NodeInstallId
from skulk_core.models.cards import Memory
from skulk_core.models.kv_cache import LLAMA_CPP_SEQUENCES, KvCacheBackend

TELEMETRY_INTERVAL_SECONDS = 1.5
# A node is "late" when its freshest liveness signal is older than this.
LIVENESS_LATE_SECONDS = 10.0


class Participation(StrEnum):
    FULL = "full"
    API_ONLY = "api_only"
    WORKER_ONLY = "worker_only"


class NodeIdentityInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    friendly_name: str
    node_install_id: NodeInstallId
    skulk_version: str
    skulk_commit: str | None = None


class NodeMemory(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    ram_total: Memory
    ram_available: Memory
    swap_total: Memory | None = None
    swap_available: Memory | None = None
    runners_rss: Memory | None = None
    """What this node's runner processes hold resident (None: not reported). Memory a
    runner has reserved but not touched yet (llama.cpp's KV cache) is not in it."""


class Accelerator(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A node's GPUs, reported as one: ``count`` devices, VRAM summed across them."""

    vendor: str
    name: str
    count: int = 1
    vram_total: Memory | None = None
    vram_available: Memory | None = None


class NodeSystem(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    os: str
    os_version: str
    machine: str
    cpu_model: str
    cpu_count: int
    hostname: str
    python_version: str
    accelerator: Accelerator | None = None
    models_dir_total: Memory | None = None
    models_dir_free: Memory | None = None


class HealthReason(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    code: str
    message: str
    remediation: str


class NodeResources(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    backends: tuple[str, ...]
    participation: Participation
    api_available: bool
    data_transport: str
    zenoh_connected_peers: int | None = None
    capability_conflicts: tuple[HealthReason, ...] = ()
    api_urls: tuple[str, ...] = ()
    """Where other nodes may reach this node's HTTP API (diagnostics fan-out)."""
    kv_cache: KvCacheBackend = KvCacheBackend.DEFAULT
    """The KV cell type this node's llama.cpp runners use (``inference.kv_cache_backend``
    in effect): placement sizes the KV window of a model this node serves at it."""
    llama_cpp_slots: int = LLAMA_CPP_SEQUENCES
    """The slots of this node's llama.cpp text runners (``inference.parallel_requests``),
    each a whole window of KV cells: placement reserves a window for each."""


class HealthLevel(StrEnum):
    OK = "ok"
    WARN = "warn"
    ERROR = "error"


class NodeHealth(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    level: HealthLevel
    reasons: tuple[HealthReason, ...] = ()


class NodeTelemetry(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One node's reading, republished whole; the newest reading wins."""

    node_id: NodeId
    identity: NodeIdentityInfo
    memory: NodeMemory
    system: NodeSystem
    resources: NodeResources
    observed_at: Annotated[datetime, msgspec.Meta(tz=True)]
    """Always timezone-aware: readings from many nodes are compared by it."""
    capabilities: tuple[str, ...] = ()
    """The capability tags this node advertises (sorted; opaque to Skulk)."""
    capability_nodes: tuple[CapabilityNodeSummary, ...] = ()
    """The capability nodes (plugin children with their own UI) this node hosts."""
    prompt_prefixes: tuple[InstancePrefixes, ...] = ()
    """Prefix hashes of the prompts this node sent to each instance lately (routing
    hints for replicas; see :mod:`skulk_core.cluster.prefixes`)."""
