"""The other ``/v1/diagnostics/*`` answers as wire types: captures, cancels, the
telemetry transport, performance envelopes and the cluster sweeps.

A key that is absent today (a capture without a runner, a member that did not
answer) is ``UNSET``, never ``null``: the JSON a client sees keeps its shape.
"""

from __future__ import annotations

from typing import Final

import msgspec

from skulk_core.diagnostics.bundle import FlightRecord, NodeBundle, RunnerView, Runtime
from skulk_core.diagnostics.envelopes import Envelope

Unset = msgspec.UnsetType
UNSET: Final = msgspec.UNSET


class MemoryFacts(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    ram_total: int
    ram_available: int
    swap_total: int
    swap_used: int
    daemon_rss_bytes: int


class PartialFailure(msgspec.Struct, frozen=True, kw_only=True):
    """Something a capture could not read (a process gone, ``/proc`` closed)."""

    what: str
    error: str


class ProcessEvent(msgspec.Struct, frozen=True, kw_only=True):
    monotonic: float
    event: str


class ThreadSample(msgspec.Struct, frozen=True, kw_only=True):
    tid: str
    name: str
    state: str
    wchan: str


class ProcessSample(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pid: int
    at: float
    cpu_percent: float
    rss_bytes: int
    threads: list[ThreadSample]


class Capture(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``POST /v1/diagnostics/node/capture``: the runner's blocks only when one was
    named, the samples only when asked for."""

    node_id: str
    captured_at: str
    runtime: Runtime
    memory: MemoryFacts
    partial_failures: list[PartialFailure]
    runner: RunnerView | Unset = UNSET
    flight_recorder: list[FlightRecord] | Unset = UNSET
    runner_process_recorder: list[ProcessEvent] | Unset = UNSET
    process_samples: list[ProcessSample] | Unset = UNSET


class CancelAnswer(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    runner_id: str
    task_id: str
    cancel_requested: bool


class TelemetryReport(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``GET /v1/diagnostics/telemetry``: the transport's aggregates, present only when
    this node runs a fabric (``fabric`` true)."""

    node_id: str
    fabric: bool
    beat_seconds: float | Unset = UNSET
    admission_capacity: int | Unset = UNSET
    network_queue_capacity: int | Unset = UNSET
    current_depth: int | Unset = UNSET
    max_depth: int | Unset = UNSET
    offered: int | Unset = UNSET
    coalesced: int | Unset = UNSET
    dropped: int | Unset = UNSET
    publishes: int | Unset = UNSET
    publish_failures: int | Unset = UNSET
    publish_bytes: int | Unset = UNSET
    no_peer_publishes: int | Unset = UNSET
    oldest_pending_age_seconds: float | Unset | None = UNSET
    last_successful_publish_age_seconds: float | Unset | None = UNSET


class NodeEnvelopes(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``GET /v1/diagnostics/performance-envelopes``: this node's curves."""

    node_id: str
    envelopes: list[Envelope]


class MemberEnvelopes(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One member's envelopes, or (``ok`` false) why it did not answer."""

    node_id: str
    ok: bool
    envelopes: list[Envelope] | Unset = UNSET
    error: str | Unset = UNSET


class ClusterEnvelopes(msgspec.Struct, frozen=True, kw_only=True):
    nodes: list[MemberEnvelopes]


class MemberBundle(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One member of ``GET /v1/diagnostics/cluster``: its bundle (and the URL that
    answered, for another node), or (``ok`` false) why none came."""

    node_id: str
    ok: bool
    skulk_version: str | None
    version_status: str
    url: str | Unset = UNSET
    bundle: NodeBundle | Unset = UNSET
    error: str | Unset = UNSET


class ClusterBundles(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    node_id: str
    version_status: str
    nodes: list[MemberBundle]


class Unreachable(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    node_id: str
    error: str


class TimelineRunner(RunnerView, frozen=True, kw_only=True, rename="camel"):
    node_id: str


class TimelineEntry(FlightRecord, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    node_id: str


class Timeline(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``GET /v1/diagnostics/cluster/timeline``: every rank's runners and recorders."""

    node_id: str
    runners: list[TimelineRunner]
    entries: list[TimelineEntry]
    unreachable_nodes: list[Unreachable]


class TimelineSource(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What the timeline reads of a member's bundle; a bundle from an older or newer
    build that lacks a block counts it as empty."""

    supervisor_runners: list[RunnerView] = []
    flight_recorder: list[FlightRecord] = []
