"""The doctor flags a planted fault of each kind, with a remedy a person can act on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from skulk_core.diagnostics.doctor import (
    MAX_FINDINGS,
    EngineBuild,
    NodeFacts,
    PeerFact,
    PortFact,
    ProgramFact,
    RefusedPeer,
    RunnerFact,
    run_doctor,
    worst,
)
from skulk_core.diagnostics.findings import Verdict

GIB = 1024**3
HEALTHY = NodeFacts(
    node_id="node-a",
    skulk_version="1.2.0",
    engine=EngineBuild(importable=True, system_info="CPU : AVX2 = 1 |", supports_rpc=True),
    models_dir="/models",
    disk_free=200 * GIB,
    disk_total=500 * GIB,
    ram_total=32 * GIB,
    ram_available=20 * GIB,
    swap_total=0,
    swap_free=0,
    peers=(PeerFact("node-b", "box-b", "1.2.0", 0.4, clock_offset_seconds=0.3),),
    runners=(RunnerFact("r1", "m", "ready", 500.0, None),),
    ports=(PortFact("api", 52415, True), PortFact("fabric", 52416, True)),
)


def _failing(facts: NodeFacts) -> dict[str, Verdict]:
    return {
        f.check_id: f.verdict
        for f in run_doctor(facts)
        if f.verdict in (Verdict.FAIL, Verdict.WARN)
    }


def test_a_healthy_node_passes_every_check() -> None:
    findings = run_doctor(HEALTHY)
    assert worst(findings) is Verdict.PASS, findings
    assert {f.check_id for f in findings} >= {
        "engine.amx",
        "engine.rpc",
        "disk.models",
        "memory.pressure",
        "peer.unreachable",
        "fabric.key",
        "cluster.version",
        "cluster.clock",
        "ports",
        "runner.stuck",
    }


@pytest.mark.parametrize(
    ("planted", "check_id", "verdict", "remedy"),
    [
        (
            {
                "engine": EngineBuild(
                    importable=True,
                    system_info="CPU : AMX_INT8 = 1 |",
                    supports_rpc=True,
                    cpu_advertises_amx=True,
                    kernel_permits_amx=False,
                )
            },
            "engine.amx",
            Verdict.FAIL,
            "-mno-amx-tile",
        ),
        (
            {"engine": EngineBuild(importable=False, error="OSError: libllama.so")},
            "engine.build",
            Verdict.FAIL,
            "reinstall",
        ),
        (
            {"engine": EngineBuild(importable=True, supports_rpc=False)},
            "engine.rpc",
            Verdict.WARN,
            "GGML_RPC=ON",
        ),
        ({"disk_free": 1 * GIB}, "disk.models", Verdict.FAIL, "model_store.models_dir"),
        ({"ram_available": GIB // 2}, "memory.pressure", Verdict.FAIL, "delete an instance"),
        (
            {"peers": (PeerFact("node-b", "box-b", "1.2.0", 42.0),)},
            "peer.unreachable:node-b",
            Verdict.FAIL,
            "box-b is running",
        ),
        (
            {"peers": (PeerFact("node-b", "box-b", "1.2.0", None),)},
            "peer.unreachable:node-b",
            Verdict.FAIL,
            "fabric port",
        ),
        (
            {"unanswered_peers": ("10.0.0.9:52416",)},
            "peer.unanswered:10.0.0.9:52416",
            Verdict.WARN,
            "cluster.peers",
        ),
        (
            {
                "refused": (
                    RefusedPeer(
                        "10.0.0.7", "CURVE handshake failed: the peer does not hold the cluster key"
                    ),
                )
            },
            "fabric.key",
            Verdict.FAIL,
            "same cluster.key",
        ),
        (
            {"peers": (PeerFact("node-b", "box-b", "1.1.0", 0.5),)},
            "cluster.version",
            Verdict.WARN,
            "same Skulk version",
        ),
        (
            {"peers": (PeerFact("node-b", "box-b", "1.2.0", 0.5, clock_offset_seconds=-93.0),)},
            "cluster.clock",
            Verdict.WARN,
            "NTP",
        ),
        ({"ports": (PortFact("fabric", 52416, False),)}, "ports.fabric", Verdict.FAIL, "ss -ltnp"),
        (
            {"runners": (RunnerFact("r9", "m", "warming_up", 301.0, 300.0),)},
            "runner.stuck:r9",
            Verdict.FAIL,
            "skulk diagnostics capture --runner r9",
        ),
    ],
)
def test_each_planted_fault_is_flagged_with_its_remedy(
    planted: dict[str, object], check_id: str, verdict: Verdict, remedy: str
) -> None:
    findings = run_doctor(replace(HEALTHY, **planted))  # type: ignore[arg-type]
    found = {f.check_id: f for f in findings}
    assert found[check_id].verdict is verdict, findings
    assert remedy in found[check_id].remediation
    assert found[check_id].detail and found[check_id].consequence
    # Failures come first, and nothing else failed.
    assert findings[0].check_id == check_id
    assert _failing(replace(HEALTHY, **planted)) == {check_id: verdict}  # type: ignore[arg-type]
    assert worst(findings) is verdict


def test_a_runner_within_its_budget_is_not_stuck() -> None:
    facts = replace(HEALTHY, runners=(RunnerFact("r1", "m", "loading", 299.0, 300.0),))
    assert _failing(facts) == {}


def test_the_findings_are_capped() -> None:
    peers = tuple(PeerFact(f"n{i}", f"box{i}", "1.2.0", None) for i in range(100))
    findings = run_doctor(replace(HEALTHY, peers=peers))
    assert len(findings) == MAX_FINDINGS
    assert all(f.verdict is Verdict.FAIL for f in findings)


def test_pass_lines_read_as_passes() -> None:
    passed = {f.check_id: f.title for f in run_doctor(HEALTHY) if f.verdict is Verdict.PASS}
    assert passed["peer.unreachable"] == "peers reachable"
    assert passed["cluster.version"] == "versions match"
    assert passed["runner.stuck"] == "no runner stuck"
    alone = {f.check_id: f for f in run_doctor(replace(HEALTHY, peers=()))}
    assert alone["peer.unreachable"].detail == "no peers: this node is a cluster of one"


def test_a_missing_espeak_ng_is_a_warning_with_the_install_command() -> None:
    espeak = ProgramFact(
        name="espeak-ng",
        path=None,
        needed_for="text-to-speech with Piper voices",
        install_hint="sudo apt install espeak-ng",
    )
    [missing] = [f for f in run_doctor(replace(HEALTHY, programs=(espeak,))) if "espeak" in f.title]
    assert (missing.verdict, missing.title) == (Verdict.WARN, "espeak-ng not installed")
    assert "Piper voices" in missing.consequence and "apt install espeak-ng" in missing.remediation

    found = replace(espeak, path="/usr/bin/espeak-ng")
    [present] = [f for f in run_doctor(replace(HEALTHY, programs=(found,))) if "espeak" in f.title]
    assert present.verdict is Verdict.PASS and "/usr/bin/espeak-ng" in present.detail
