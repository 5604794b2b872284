"""Diagnostics across real daemons: a wedged runner shows in the merged timeline and
is flagged by the doctor on every path an operator takes (API and CLI), and a member
that stops answering is an explicit ``ok: false`` entry."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.daemon.pair import linked_pair
from tests.daemon.serving import DEMO, wait_for
from tests.daemon.test_cli_against_daemon import skulk
from tests.daemon.test_cluster import converged, node_id
from tests.daemon_process import DaemonProcess
from tests.runner_processes import runner_processes

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("timing")]

# Every phase budget (loading, warming up...) shortened so the test sees a stuck runner.
STUCK_ENV = {"SKULK_STUCK_PHASE_SECONDS": "2"}


@pytest.fixture
def trio(tmp_path: Path, shared_models_dir: Path) -> Iterator[list[DaemonProcess]]:
    first = DaemonProcess(root=tmp_path / "a", models_dir=shared_models_dir, extra_env=STUCK_ENV)
    nodes = [first] + [
        DaemonProcess(
            root=tmp_path / name,
            models_dir=shared_models_dir,
            peers=[first.fabric_address],
            extra_env=STUCK_ENV,
        )
        for name in ("b", "c")
    ]
    try:
        for node in nodes:
            node.start()
        wait_for(lambda: converged(nodes, 3), "three nodes to converge", timeout=60)
        yield nodes
    finally:
        for node in nodes:
            node.kill()


def _runner_process(daemon: DaemonProcess) -> psutil.Process | None:
    assert daemon.process is not None
    found = runner_processes(daemon.process.pid)
    return found[0] if found else None


def _get(daemon: DaemonProcess, path: str) -> dict[str, Any]:
    response = daemon.get(path)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_wedged_runner_and_a_dead_member_as_an_operator_sees_them(
    trio: list[DaemonProcess],
) -> None:
    front, host, gone = trio
    host_id, gone_id = node_id(host), node_id(gone)
    placed = httpx.post(
        f"{front.url}/place_instance",
        json={
            "model_id": DEMO,
            "context_tokens": 1024,
            "excluded_nodes": [node_id(front), gone_id],
        },
        timeout=60,
    )
    assert placed.status_code == 200, placed.text
    # Freeze B's runner the moment it exists: its interpreter has not even loaded the
    # model yet, so it stays in one phase for as long as it is stopped.
    runner = wait_for(lambda: _runner_process(host), "B's runner process", timeout=60)
    os.kill(runner.pid, signal.SIGSTOP)
    try:
        time.sleep(2.5)  # past the shortened phase budget

        timeline = _get(front, "/v1/diagnostics/cluster/timeline")
        assert timeline["unreachableNodes"] == []
        [wedged] = [r for r in timeline["runners"] if r["modelId"] == DEMO]
        assert wedged["nodeId"] == host_id
        assert wedged["phase"] in ("starting", "loading")
        assert wedged["secondsInPhase"] > 2
        entries = [e for e in timeline["entries"] if e["runnerId"] == wedged["runnerId"]]
        assert entries and {e["nodeId"] for e in entries} == {host_id}
        assert entries[-1]["phase"] == wedged["phase"]
        assert [e["at"] for e in timeline["entries"]] == sorted(
            e["at"] for e in timeline["entries"]
        )

        # B's doctor, read through A, names the runner and the way out.
        bundle = _get(front, f"/v1/diagnostics/cluster/{host_id}")
        assert bundle["runtime"]["nodeId"] == host_id
        stuck = {f["checkId"]: f for f in bundle["doctor"]}[f"runner.stuck:{wedged['runnerId']}"]
        assert stuck["verdict"] == "fail"
        assert f"--runner {wedged['runnerId']}" in stuck["remediation"]
        assert any(p["pid"] == runner.pid for p in bundle["processes"])

        doctor = skulk(front, "doctor", host_id)
        assert doctor.returncode == 1, doctor.stdout + doctor.stderr
        assert "runner stuck in one phase" in doctor.stdout
        healthy = skulk(front, "--json", "doctor")
        assert healthy.returncode == 0, healthy.stdout + healthy.stderr
        assert {f["verdict"] for f in json.loads(healthy.stdout)} <= {"pass", "warn", "skip"}
    finally:
        os.kill(runner.pid, signal.SIGCONT)

    # The telemetry transport's aggregates: beats keep reaching both peers (counts
    # from start-up may include a beat sent before the peers were dialled).
    first = front.get("/v1/diagnostics/telemetry").json()
    time.sleep(1.5)
    telemetry = front.get("/v1/diagnostics/telemetry")
    counters = telemetry.json()
    assert counters["fabric"] is True and counters["publishes"] > first["publishes"]
    assert counters["publishFailures"] == first["publishFailures"]
    assert counters["noPeerPublishes"] == first["noPeerPublishes"]
    assert counters["lastSuccessfulPublishAgeSeconds"] < 5
    assert host_id not in telemetry.text and gone_id not in telemetry.text

    # C stops answering: the sweep still lists it, as unreachable, without waiting long.
    gone.kill()
    started = time.monotonic()
    report = _get(front, "/v1/diagnostics/cluster")
    assert time.monotonic() - started < 10
    entries = {entry["nodeId"]: entry for entry in report["nodes"]}
    # Still a topology member this soon after its death (the master needs seconds of
    # silence to remove it).
    assert entries[gone_id]["ok"] is False
    assert "no reachable API route" in entries[gone_id]["error"]
    assert entries[gone_id]["versionStatus"] in ("current", "unknown")
    assert entries[host_id]["ok"] is True
    assert report["versionStatus"] in ("consistent", "unknown")
    cli = skulk(front, "diagnostics", "cluster")
    assert cli.returncode == 0, cli.stderr


@pytest.fixture
def pair(tmp_path: Path, shared_models_dir: Path) -> Iterator[list[DaemonProcess]]:
    with linked_pair(tmp_path, shared_models_dir, STUCK_ENV) as (first, second):
        yield [first, second]


def test_a_pool_wedged_on_one_rank_shows_every_rank_in_the_timeline(
    pair: list[DaemonProcess],
) -> None:
    first, second = pair
    placed = httpx.post(
        f"{first.url}/place_instance",
        json={"model_id": DEMO, "min_nodes": 2, "context_tokens": 1024},
        timeout=60,
    )
    assert placed.status_code == 200, placed.text
    # Whichever node lends memory, freeze its runner the moment it exists.
    frozen: list[tuple[DaemonProcess, psutil.Process]] = []

    def donor_runner() -> tuple[DaemonProcess, psutil.Process] | None:
        for daemon in pair:
            runner = _runner_process(daemon)
            if runner is not None:
                return daemon, runner
        return None

    daemon, runner = wait_for(donor_runner, "a runner process", timeout=60)
    os.kill(runner.pid, signal.SIGSTOP)
    frozen.append((daemon, runner))
    try:
        time.sleep(2.5)

        def both_ranks() -> list[dict[str, Any]] | None:
            timeline = _get(first, "/v1/diagnostics/cluster/timeline")
            ranks = [r for r in timeline["runners"] if r["modelId"] == DEMO]
            return ranks if len(ranks) == 2 else None

        ranks = wait_for(both_ranks, "both ranks in the timeline", timeout=30)
        # Sorted by model and rank, one per node, neither of them serving.
        assert [r["deviceRank"] for r in ranks] == [0, 1]
        assert {r["nodeId"] for r in ranks} == {node_id(first), node_id(second)}
        assert all(r["phase"] in ("starting", "loading") for r in ranks), ranks
        stuck_node = node_id(daemon)
        bundle = _get(first, f"/v1/diagnostics/cluster/{stuck_node}")
        flagged = [f for f in bundle["doctor"] if f["checkId"].startswith("runner.stuck:")]
        assert flagged and all(f["verdict"] == "fail" for f in flagged)
    finally:
        for _, process in frozen:
            os.kill(process.pid, signal.SIGCONT)
