"""Derive each node's health from State and telemetry: pure, read-only, no I/O.

``GET /state`` renders the result as ``nodeHealth``. Every reason carries a code
a program can switch on, a message saying what is wrong, and a remediation a
person can act on. The caller passes ``now``; nothing here reads a clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from skulk_core.cluster.telemetry import (
    LIVENESS_LATE_SECONDS,
    HealthLevel,
    HealthReason,
    NodeHealth,
    NodeTelemetry,
)
from skulk_core.ids import NodeId
from skulk_core.state.state import State

_GIB = 1024**3
# Below this free space on the models volume, new downloads will fail: error.
MODELS_DISK_FULL_BYTES = 1 * _GIB
# Below either bound: warn. One mid-size GGUF is 5-20 GiB, so 20 GiB free is
# "the next model may not fit". The fraction catches a big volume filling up
# (other tenants, logs, staged copies) before it gets there; filesystems also
# slow down and fragment past ~90% full.
MODELS_DISK_LOW_BYTES = 20 * _GIB
MODELS_DISK_LOW_FRACTION = 0.10
# DownloadProgress.status of a download that ended in failure.
DOWNLOAD_FAILED_STATUS = "failed"
# Download errors land verbatim in a message; keep a runaway one from flooding /state.
MAX_DOWNLOAD_ERROR_CHARS = 300
DATA_TRANSPORT_ZENOH = "zenoh"

VERSION_MISMATCH = "version_mismatch"
DATA_TRANSPORT_MISMATCH = "data_transport_mismatch"
ZENOH_ISOLATED = "zenoh_isolated"
LIVENESS_LATE = "liveness_late"
MODELS_DISK_LOW = "models_disk_low"
MODELS_DISK_FULL = "models_disk_full"
DOWNLOAD_FAILED = "download_failed"

# Capability conflicts arrive from the node's own telemetry; their level is fixed
# here so every node judges them alike. An unknown code (a newer peer) warns.
CONFLICT_LEVELS: Mapping[str, HealthLevel] = {
    "gpu_serving_disabled": HealthLevel.ERROR,
    "gpu_detection_degraded": HealthLevel.WARN,
    "invalid_engine_binary": HealthLevel.WARN,
    "backend_override_conflict": HealthLevel.WARN,
}

_SEVERITY = {HealthLevel.OK: 0, HealthLevel.WARN: 1, HealthLevel.ERROR: 2}

_Leveled = tuple[HealthLevel, HealthReason]


def derive_node_health(
    state: State, telemetry: Mapping[NodeId, NodeTelemetry], now: datetime
) -> dict[NodeId, NodeHealth]:
    """Health for every node in ``state.topology`` or ``telemetry``, keyed by node id.

    A node's level is its worst reason's; with no reasons it is ``ok``. Reasons are
    ordered errors first, then by code, then message, so equal inputs render alike.
    Fleet-wide checks (version, transport) consider only *live* nodes: those whose
    freshest liveness signal is no older than ``LIVENESS_LATE_SECONDS``.
    """
    now = _aware(now)
    nodes = sorted({*state.topology.nodes, *telemetry})
    freshest = {node: _freshest(state, telemetry, node) for node in nodes}
    live = {
        node: reading
        for node, reading in telemetry.items()
        if not _is_late(freshest.get(node), now)
    }
    fleet = [*_version_mismatch(live), *_transport_mismatch(live)]

    health: dict[NodeId, NodeHealth] = {}
    for node in nodes:
        reading = telemetry.get(node)
        reasons: list[_Leveled] = [*fleet]
        reasons += _liveness(freshest[node], now)
        reasons += _downloads(state, node)
        if reading is not None:
            reasons += _disk(reading)
            reasons += _conflicts(reading)
            if node in live:
                reasons += _zenoh_isolated(node, reading, live)
        health[node] = _summarise(reasons)
    return health


def _summarise(reasons: Iterable[_Leveled]) -> NodeHealth:
    ordered = sorted(
        reasons, key=lambda lr: (-_SEVERITY[lr[0]], lr[1].code, lr[1].message, lr[1].remediation)
    )
    if not ordered:
        return NodeHealth(level=HealthLevel.OK, reasons=())
    return NodeHealth(level=ordered[0][0], reasons=tuple(reason for _, reason in ordered))


def _aware(moment: datetime) -> datetime:
    # Naive datetimes are taken as UTC rather than refused: comparing naive with
    # aware raises, and one stray naive stamp must not take down /state.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _freshest(
    state: State, telemetry: Mapping[NodeId, NodeTelemetry], node: NodeId
) -> datetime | None:
    reading = telemetry.get(node)
    signals = [
        _aware(moment)
        for moment in (
            None if reading is None else reading.observed_at,
            state.last_seen.get(node),
        )
        if moment is not None
    ]
    return max(signals, default=None)


def _is_late(freshest: datetime | None, now: datetime) -> bool:
    return freshest is None or (now - freshest).total_seconds() > LIVENESS_LATE_SECONDS


def _liveness(freshest: datetime | None, now: datetime) -> list[_Leveled]:
    if not _is_late(freshest, now):
        return []
    if freshest is None:
        what = "Skulk has received no telemetry or event from this node yet."
    else:
        age = (now - freshest).total_seconds()
        what = (
            f"Skulk last heard from this node {age:.0f} s ago (more than "
            f"{LIVENESS_LATE_SECONDS:g} s)."
        )
    return [
        (
            HealthLevel.WARN,
            HealthReason(
                code=LIVENESS_LATE,
                message=what,
                remediation=(
                    "Check that the node is powered on and its Skulk process is running, and "
                    "that its fabric port is reachable from the other nodes (firewall, VPN, "
                    "sleep); restart Skulk there if it is wedged."
                ),
            ),
        )
    ]


def _build(reading: NodeTelemetry) -> str:
    identity = reading.identity
    if identity.skulk_commit:
        return f"{identity.skulk_version} ({identity.skulk_commit})"
    return identity.skulk_version


def _tally(values: Iterable[str]) -> str:
    counts = Counter(values)
    return ", ".join(
        f"{value} on {count} node{'s' if count != 1 else ''}"
        for value, count in sorted(counts.items())
    )


def _version_mismatch(live: Mapping[NodeId, NodeTelemetry]) -> list[_Leveled]:
    versions = {reading.identity.skulk_version for reading in live.values()}
    # A build that does not know its commit disagrees with nobody about it.
    commits = {r.identity.skulk_commit for r in live.values() if r.identity.skulk_commit}
    if len(versions) <= 1 and len(commits) <= 1:
        return []
    builds = _tally(_build(reading) for reading in live.values())
    return [
        (
            HealthLevel.WARN,
            HealthReason(
                code=VERSION_MISMATCH,
                message=(
                    f"Live nodes run different Skulk builds: {builds}. Events, commands, "
                    "state and inference are not compatible across versions."
                ),
                remediation=(
                    "Finish the deployment: install the same Skulk release on every node and "
                    "restart each one, before starting new inference work."
                ),
            ),
        )
    ]


def _transport_mismatch(live: Mapping[NodeId, NodeTelemetry]) -> list[_Leveled]:
    transports = [reading.resources.data_transport for reading in live.values()]
    if len(set(transports)) <= 1:
        return []
    return [
        (
            HealthLevel.ERROR,
            HealthReason(
                code=DATA_TRANSPORT_MISMATCH,
                message=(
                    f"Live nodes advertise different data transports: {_tally(transports)}. "
                    "Mixed transports are not bridged, so tokens between them are lost."
                ),
                remediation=(
                    "Configure every node with the same data transport and restart them "
                    "all before serving inference."
                ),
            ),
        )
    ]


def _zenoh_isolated(
    node: NodeId, reading: NodeTelemetry, live: Mapping[NodeId, NodeTelemetry]
) -> list[_Leveled]:
    resources = reading.resources
    if resources.data_transport != DATA_TRANSPORT_ZENOH or resources.zenoh_connected_peers != 0:
        return []
    others = [
        other
        for other, r in live.items()
        if other != node and r.resources.data_transport == DATA_TRANSPORT_ZENOH
    ]
    if not others:
        return []
    return [
        (
            HealthLevel.ERROR,
            HealthReason(
                code=ZENOH_ISOLATED,
                message=(
                    f"This node uses Zenoh but reaches 0 Zenoh peers while {len(others)} other "
                    "live node(s) use Zenoh: every remote model or provider stream through it "
                    "will fail."
                ),
                remediation=(
                    "Local multicast does not reach the peers (typical on routed or overlay "
                    "networks): set SKULK_ZENOH_CONNECT to a peer endpoint and "
                    "SKULK_ZENOH_LISTEN to an address the peers can dial, then restart."
                ),
            ),
        )
    ]


def _disk(reading: NodeTelemetry) -> list[_Leveled]:
    free_mem, total_mem = reading.system.models_dir_free, reading.system.models_dir_total
    if free_mem is None:
        return []
    free = free_mem.in_bytes
    total = None if total_mem is None else total_mem.in_bytes
    shown = f"{free / _GIB:.1f} GiB free" + ("" if not total else f" of {total / _GIB:.1f} GiB")
    if free < MODELS_DISK_FULL_BYTES:
        return [
            (
                HealthLevel.ERROR,
                HealthReason(
                    code=MODELS_DISK_FULL,
                    message=f"The models volume is full ({shown}); downloads will fail.",
                    remediation=(
                        "Delete models this node no longer serves (DELETE /models/{model_id}), "
                        "or move the models dir (SKULK_MODELS_DIR) to a larger volume and "
                        "restart."
                    ),
                ),
            )
        ]
    low_fraction = total is not None and total > 0 and free / total < MODELS_DISK_LOW_FRACTION
    if free < MODELS_DISK_LOW_BYTES or low_fraction:
        return [
            (
                HealthLevel.WARN,
                HealthReason(
                    code=MODELS_DISK_LOW,
                    message=(
                        f"The models volume is low on space ({shown}); the next model may not fit."
                    ),
                    remediation=(
                        "Free space before downloading more: delete unused models "
                        "(DELETE /models/{model_id}) or point SKULK_MODELS_DIR at a larger "
                        "volume."
                    ),
                ),
            )
        ]
    return []


def _downloads(state: State, node: NodeId) -> list[_Leveled]:
    reasons: list[_Leveled] = []
    for progress in state.downloads.get(node, ()):
        if progress.status.lower() != DOWNLOAD_FAILED_STATUS:
            continue
        detail = (progress.error_message or "no error was recorded").strip()
        if len(detail) > MAX_DOWNLOAD_ERROR_CHARS:
            detail = detail[: MAX_DOWNLOAD_ERROR_CHARS - 1] + "…"
        reasons.append(
            (
                HealthLevel.WARN,
                HealthReason(
                    code=DOWNLOAD_FAILED,
                    message=f"Downloading {progress.model_id} failed: {detail}",
                    remediation=(
                        "Fix the cause named above (network, disk space, access to the model "
                        "repository or a missing token), then place the model again to retry "
                        "the download."
                    ),
                ),
            )
        )
    return reasons


def _conflicts(reading: NodeTelemetry) -> list[_Leveled]:
    return [
        (CONFLICT_LEVELS.get(conflict.code, HealthLevel.WARN), conflict)
        for conflict in reading.resources.capability_conflicts
    ]
