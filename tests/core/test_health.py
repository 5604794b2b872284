"""derive_node_health: every reason, the ok case, and the worst-level rule."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from skulk_core.cluster.health import (
    CONFLICT_LEVELS,
    MODELS_DISK_FULL_BYTES,
    MODELS_DISK_LOW_BYTES,
    MODELS_DISK_LOW_FRACTION,
    derive_node_health,
)
from skulk_core.cluster.telemetry import (
    LIVENESS_LATE_SECONDS,
    HealthLevel,
    HealthReason,
    NodeHealth,
    NodeIdentityInfo,
    NodeMemory,
    NodeResources,
    NodeSystem,
    NodeTelemetry,
    Participation,
)
from skulk_core.ids import ModelId, NodeId, NodeInstallId
from skulk_core.models.cards import Memory
from skulk_core.state.state import DownloadProgress, State, Topology

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
GIB = 1024**3
A, B, C = NodeId("node-a"), NodeId("node-b"), NodeId("node-c")


def reading(
    node: NodeId,
    *,
    age: float = 1.0,
    version: str = "1.0.0",
    commit: str | None = "abc1234",
    transport: str = "zmq",
    zenoh_peers: int | None = None,
    disk_total: int | None = 1000 * GIB,
    disk_free: int | None = 500 * GIB,
    conflicts: tuple[HealthReason, ...] = (),
) -> NodeTelemetry:
    return NodeTelemetry(
        node_id=node,
        identity=NodeIdentityInfo(
            friendly_name=str(node),
            node_install_id=NodeInstallId(f"install-{node}"),
            skulk_version=version,
            skulk_commit=commit,
        ),
        memory=NodeMemory(ram_total=Memory(in_bytes=64 * GIB), ram_available=Memory(in_bytes=GIB)),
        system=NodeSystem(
            os="Linux",
            os_version="6.8",
            machine="x86_64",
            cpu_model="Test CPU",
            cpu_count=8,
            hostname=str(node),
            python_version="3.11.9",
            models_dir_total=None if disk_total is None else Memory(in_bytes=disk_total),
            models_dir_free=None if disk_free is None else Memory(in_bytes=disk_free),
        ),
        resources=NodeResources(
            backends=("llama_cpp",),
            participation=Participation.FULL,
            api_available=True,
            data_transport=transport,
            zenoh_connected_peers=zenoh_peers,
            capability_conflicts=conflicts,
        ),
        observed_at=NOW - timedelta(seconds=age),
    )


def conflict(code: str) -> HealthReason:
    return HealthReason(code=code, message=f"{code} happened", remediation=f"undo {code}")


def health(*readings: NodeTelemetry, state: State | None = None) -> dict[NodeId, NodeHealth]:
    return derive_node_health(state or State(), {r.node_id: r for r in readings}, NOW)


def codes(entry: NodeHealth) -> list[str]:
    return [reason.code for reason in entry.reasons]


def test_healthy_node_is_ok_with_no_reasons() -> None:
    assert health(reading(A)) == {A: NodeHealth(level=HealthLevel.OK, reasons=())}


def test_every_topology_and_telemetry_node_gets_an_entry() -> None:
    state = State(topology=Topology(nodes=(A, B)), last_seen={A: NOW, B: NOW})
    result = health(reading(B), reading(C), state=state)
    assert sorted(result) == [A, B, C]
    assert all(entry.level is HealthLevel.OK for entry in result.values())


def test_every_reason_tells_what_is_wrong_and_how_to_fix_it() -> None:
    state = State(
        topology=Topology(nodes=(A, B, C)),
        downloads={A: (DownloadProgress(model_id=ModelId("m"), status="failed"),)},
    )
    result = health(
        reading(A, disk_free=0, conflicts=(conflict("gpu_serving_disabled"),)),
        reading(B, version="2.0.0", transport="zenoh", zenoh_peers=0),
        reading(C, transport="zenoh", zenoh_peers=1),
        state=state,
    )
    reasons = [reason for entry in result.values() for reason in entry.reasons]
    assert {r.code for r in reasons} >= {
        "version_mismatch",
        "data_transport_mismatch",
        "zenoh_isolated",
        "models_disk_full",
        "download_failed",
        "gpu_serving_disabled",
    }
    assert all(r.message.strip() and r.remediation.strip() for r in reasons)


# -- liveness -------------------------------------------------------------------------


def test_liveness_is_late_just_past_the_bound_and_not_at_it() -> None:
    at_bound = health(reading(A, age=LIVENESS_LATE_SECONDS))[A]
    past = health(reading(A, age=LIVENESS_LATE_SECONDS + 0.001))[A]
    assert at_bound.level is HealthLevel.OK
    assert past.level is HealthLevel.WARN
    assert codes(past) == ["liveness_late"]


def test_a_fresh_last_seen_rescues_stale_telemetry() -> None:
    state = State(last_seen={A: NOW - timedelta(seconds=1)})
    assert health(reading(A, age=600), state=state)[A].level is HealthLevel.OK


def test_fresh_telemetry_rescues_a_stale_last_seen() -> None:
    # lastSeen is the last indexed event, not a heartbeat: a quiet healthy node is fine.
    state = State(last_seen={A: NOW - timedelta(hours=3)})
    assert health(reading(A, age=1), state=state)[A].level is HealthLevel.OK


def test_topology_node_never_heard_from_is_late() -> None:
    result = health(state=State(topology=Topology(nodes=(A,))))
    assert codes(result[A]) == ["liveness_late"]
    assert "no telemetry" in result[A].reasons[0].message


def test_naive_timestamps_are_read_as_utc() -> None:
    naive = (NOW - timedelta(seconds=1)).replace(tzinfo=None)
    state = State(topology=Topology(nodes=(A,)), last_seen={A: naive})
    assert health(state=state)[A].level is HealthLevel.OK


# -- fleet-wide mismatches ------------------------------------------------------------


def test_version_mismatch_warns_on_every_node_including_topology_only_ones() -> None:
    state = State(topology=Topology(nodes=(A, B, C)), last_seen={C: NOW})
    result = health(reading(A, version="1.0.0"), reading(B, version="1.1.0"), state=state)
    for node in (A, B, C):
        assert codes(result[node]) == ["version_mismatch"]
        assert result[node].level is HealthLevel.WARN
    message = result[A].reasons[0].message
    assert "1.0.0" in message
    assert "1.1.0" in message


def test_different_commits_of_one_version_mismatch() -> None:
    result = health(reading(A, commit="aaaaaaa"), reading(B, commit="bbbbbbb"))
    assert codes(result[A]) == ["version_mismatch"]


def test_an_unknown_commit_disagrees_with_nobody() -> None:
    result = health(reading(A, commit=None), reading(B, commit="bbbbbbb"))
    assert result[A].level is HealthLevel.OK
    assert result[B].level is HealthLevel.OK


def test_a_late_node_does_not_count_towards_version_mismatch() -> None:
    result = health(reading(A), reading(B, version="0.9.0", age=LIVENESS_LATE_SECONDS + 5))
    assert result[A].level is HealthLevel.OK
    assert codes(result[B]) == ["liveness_late"]


def test_data_transport_mismatch_is_an_error_everywhere() -> None:
    result = health(reading(A, transport="zmq"), reading(B, transport="zenoh", zenoh_peers=1))
    for node in (A, B):
        assert result[node].level is HealthLevel.ERROR
        assert codes(result[node]) == ["data_transport_mismatch"]


def test_zenoh_node_with_no_peers_while_others_use_zenoh_is_isolated() -> None:
    result = health(
        reading(A, transport="zenoh", zenoh_peers=0),
        reading(B, transport="zenoh", zenoh_peers=1),
    )
    assert codes(result[A]) == ["zenoh_isolated"]
    assert result[A].level is HealthLevel.ERROR
    assert result[B].level is HealthLevel.OK


def test_lone_zenoh_node_or_unknown_peer_count_is_not_isolated() -> None:
    assert health(reading(A, transport="zenoh", zenoh_peers=0))[A].level is HealthLevel.OK
    result = health(
        reading(A, transport="zenoh", zenoh_peers=None),
        reading(B, transport="zenoh", zenoh_peers=1),
    )
    assert result[A].level is HealthLevel.OK


# -- models disk ----------------------------------------------------------------------


def test_disk_under_one_gib_is_full_and_only_full() -> None:
    entry = health(reading(A, disk_free=MODELS_DISK_FULL_BYTES - 1))[A]
    assert entry.level is HealthLevel.ERROR
    assert codes(entry) == ["models_disk_full"]


def test_disk_at_the_full_bound_is_low_not_full() -> None:
    assert codes(health(reading(A, disk_free=MODELS_DISK_FULL_BYTES))[A]) == ["models_disk_low"]


def test_disk_low_by_absolute_free_space() -> None:
    # A 100 GiB volume: 20 GiB free is 20%, so only the absolute bound can fire.
    below = health(reading(A, disk_total=100 * GIB, disk_free=MODELS_DISK_LOW_BYTES - 1))[A]
    at = health(reading(A, disk_total=100 * GIB, disk_free=MODELS_DISK_LOW_BYTES))[A]
    assert codes(below) == ["models_disk_low"]
    assert below.level is HealthLevel.WARN
    assert at.level is HealthLevel.OK


def test_disk_low_by_fraction_on_a_big_volume() -> None:
    total = 4000 * GIB
    bound = int(total * MODELS_DISK_LOW_FRACTION)
    assert codes(health(reading(A, disk_total=total, disk_free=bound - GIB))[A]) == [
        "models_disk_low"
    ]
    assert health(reading(A, disk_total=total, disk_free=bound))[A].level is HealthLevel.OK


def test_unknown_disk_is_not_judged() -> None:
    assert health(reading(A, disk_total=None, disk_free=None))[A].level is HealthLevel.OK


# -- downloads ------------------------------------------------------------------------


def test_failed_download_warns_with_the_model_and_error() -> None:
    state = State(
        downloads={
            A: (
                DownloadProgress(
                    model_id=ModelId("org/broken"), status="failed", error_message="HTTP 404"
                ),
                DownloadProgress(model_id=ModelId("org/fine"), status="completed"),
                DownloadProgress(model_id=ModelId("org/going"), status="in_progress"),
            )
        }
    )
    entry = health(reading(A), state=state)[A]
    assert entry.level is HealthLevel.WARN
    assert codes(entry) == ["download_failed"]
    assert "org/broken" in entry.reasons[0].message
    assert "HTTP 404" in entry.reasons[0].message


def test_download_failure_is_reported_on_its_own_node_only() -> None:
    state = State(downloads={B: (DownloadProgress(model_id=ModelId("m"), status="Failed"),)})
    result = health(reading(A), reading(B), state=state)
    assert result[A].level is HealthLevel.OK
    assert codes(result[B]) == ["download_failed"]


def test_a_runaway_download_error_is_truncated() -> None:
    progress = DownloadProgress(model_id=ModelId("m"), status="failed", error_message="x" * 10_000)
    entry = health(reading(A), state=State(downloads={A: (progress,)}))[A]
    assert len(entry.reasons[0].message) < 500


# -- capability conflicts and the worst-level rule ------------------------------------


def test_capability_conflicts_surface_at_their_level() -> None:
    assert health(reading(A, conflicts=(conflict("gpu_serving_disabled"),)))[A].level is (
        HealthLevel.ERROR
    )
    for code in ("gpu_detection_degraded", "invalid_engine_binary", "backend_override_conflict"):
        entry = health(reading(A, conflicts=(conflict(code),)))[A]
        assert entry.level is HealthLevel.WARN
        assert entry.reasons == (conflict(code),)


def test_an_unknown_conflict_from_a_newer_peer_warns() -> None:
    assert health(reading(A, conflicts=(conflict("brand_new"),)))[A].level is HealthLevel.WARN


def test_worst_reason_sets_the_level_and_errors_come_first() -> None:
    entry = health(
        reading(
            A,
            age=LIVENESS_LATE_SECONDS + 1,
            disk_free=0,
            conflicts=(conflict("gpu_detection_degraded"),),
        )
    )[A]
    assert entry.level is HealthLevel.ERROR
    assert codes(entry) == ["models_disk_full", "gpu_detection_degraded", "liveness_late"]


_SEVERITY = {HealthLevel.OK: 0, HealthLevel.WARN: 1, HealthLevel.ERROR: 2}
_conflict_codes = st.sampled_from([*CONFLICT_LEVELS, "brand_new", "other_thing"])


@given(
    picked=st.lists(_conflict_codes, max_size=6),
    seed=st.randoms(use_true_random=False),
)
def test_level_is_the_worst_and_order_ignores_input_order(
    picked: list[str], seed: random.Random
) -> None:
    conflicts = [conflict(code) for code in picked]
    shuffled = list(conflicts)
    seed.shuffle(shuffled)
    first = health(reading(A, conflicts=tuple(conflicts)))[A]
    second = health(reading(A, conflicts=tuple(shuffled)))[A]
    assert first == second
    expected = max(
        (CONFLICT_LEVELS.get(code, HealthLevel.WARN) for code in picked),
        key=_SEVERITY.__getitem__,
        default=HealthLevel.OK,
    )
    assert first.level is expected
    assert (first.level is HealthLevel.OK) == (first.reasons == ())
