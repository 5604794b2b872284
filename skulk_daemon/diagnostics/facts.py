"""Gathering what the doctor judges: this node's resources, peers, runners and ports.

Everything here reads live objects (the node, its supervisor, its fabric agent) or
the operating system; :mod:`skulk_core.diagnostics.doctor` does the judging.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

import psutil

from skulk_core.diagnostics.bundle import FabricDiagnostics
from skulk_core.diagnostics.doctor import (
    EngineBuild,
    NodeFacts,
    PeerFact,
    PortFact,
    ProgramFact,
    RefusedPeer,
    RunnerFact,
)
from skulk_core.version import SKULK_VERSION
from skulk_daemon.node.node import Node
from skulk_daemon.worker.supervisor import ManagedRunner, Supervisor

STUCK_PHASE_ENV: Final = "SKULK_STUCK_PHASE_SECONDS"
"""Overrides every phase budget below (seconds): how long before doctor calls a runner
stuck. For slow disks (a long load is not a hang) or for tests."""
PHASE_BUDGET_SECONDS: Final[Mapping[str, float]] = {
    "starting": 900.0,  # includes waiting for an RPC pool's donors
    "loading": 900.0,
    "loaded": 120.0,
    "warming_up": 300.0,
    "stopping": 60.0,
    "shutting_down": 60.0,
}
# A peer's telemetry is republished every ~1.5 s: an offset read from a peer heard
# this recently is its clock's, not the reading's age.
_FRESH_PEER_SECONDS: Final = 5.0


def phase_budget(phase: str) -> float | None:
    raw = os.environ.get(STUCK_PHASE_ENV, "").strip()
    budget = PHASE_BUDGET_SECONDS.get(phase)
    if budget is not None and raw:
        try:
            return max(0.0, float(raw))
        except ValueError:
            return budget
    return budget


def runner_facts(runners: list[ManagedRunner]) -> list[RunnerFact]:
    now = time.monotonic()
    return [
        RunnerFact(
            runner_id=r.runner_id,
            model_id=r.model_id,
            phase=r.reported,
            seconds_in_phase=now - r.reported_since,
            budget_seconds=phase_budget(r.reported),
        )
        for r in runners
    ]


def gather(
    node: Node,
    worker: Supervisor | None,
    cluster: FabricDiagnostics | None,
    engine: EngineBuild | None,
    ports: Mapping[str, int],
) -> NodeFacts:
    """One snapshot; ``cluster`` is the fabric agent's diagnostics (None: no fabric)."""
    models_dir = str(node.models_dir)
    disk_free: int | None = None
    disk_total: int | None = None
    try:
        disk = shutil.disk_usage(node.models_dir)
        disk_free, disk_total = disk.free, disk.total
    except OSError:
        pass
    ram = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return NodeFacts(
        node_id=node.node_id,
        skulk_version=SKULK_VERSION,
        engine=engine,
        models_dir=models_dir,
        disk_free=disk_free,
        disk_total=disk_total,
        ram_total=ram.total,
        ram_available=ram.available,
        swap_total=swap.total,
        swap_free=swap.free,
        peers=peer_facts(node, cluster),
        refused=[
            RefusedPeer(address=r.address, reason=r.reason)
            for r in (cluster.refused_peers if cluster is not None else [])
        ],
        runners=runner_facts(worker.runners()) if worker is not None else [],
        ports=port_facts(ports),
        unanswered_peers=_unanswered(node, cluster),
        programs=program_facts(),
    )


ESPEAK_NG: Final = "espeak-ng"


def program_facts() -> list[ProgramFact]:
    """The outside programs Skulk's features run (Piper voices phonemize with espeak-ng)."""
    return [
        ProgramFact(
            name=ESPEAK_NG,
            path=shutil.which(ESPEAK_NG),
            needed_for="text-to-speech with Piper voices (`skulk say`, /v1/audio/speech)",
            install_hint="install it with the system's package manager: "
            "`sudo apt install espeak-ng` (Debian, Ubuntu) or `brew install espeak-ng` (macOS)",
        )
    ]


def peer_facts(node: Node, cluster: FabricDiagnostics | None) -> list[PeerFact]:
    heard = {
        p.node_id: p.heard_seconds_ago
        for p in (cluster.peers if cluster is not None else [])
        if p.heard_seconds_ago is not None
    }
    view = node.view()
    now = datetime.now(UTC)
    facts: list[PeerFact] = []
    for node_id in node.state.topology.nodes:
        if node_id == node.node_id:
            continue
        reading = view.telemetry.get(node_id)
        ago = heard.get(node_id)
        offset = None
        if reading is not None and ago is not None and ago < _FRESH_PEER_SECONDS:
            offset = (reading.observed_at - now).total_seconds()
        facts.append(
            PeerFact(
                node_id=node_id,
                name=reading.identity.friendly_name if reading is not None else node_id[-8:],
                skulk_version=reading.identity.skulk_version if reading is not None else None,
                heard_seconds_ago=ago,
                clock_offset_seconds=offset,
            )
        )
    return facts


def port_facts(ports: Mapping[str, int]) -> list[PortFact]:
    try:
        listening = {
            c.laddr.port
            for c in psutil.Process().net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.laddr
        }
    except psutil.Error:
        return []
    return [
        PortFact(name=name, port=port, listening=port in listening)
        for name, port in sorted(ports.items())
    ]


def _unanswered(node: Node, cluster: FabricDiagnostics | None) -> list[str]:
    """Configured peers (``cluster.peers``) no member answers from. A member that dialled
    us first is known by another address, so only a shortfall of members counts."""
    if cluster is None:
        return []
    members = cluster.peers
    configured = list(node.config.cluster.peers)
    if len(members) >= len(configured):
        return []
    addresses = {p.address for p in members}
    return [peer for peer in configured if peer not in addresses]
