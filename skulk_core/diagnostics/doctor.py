"""The node doctor: checks over facts the daemon gathered, each with a remedy.

Pure: :func:`run_doctor` turns one :class:`NodeFacts` snapshot into findings, so every
fault is testable by planting it in the facts. Each finding says what was seen
(``detail``), what it costs (``consequence``) and one sentence a person can act on
(``remediation``). The array is capped at :data:`MAX_FINDINGS`, as the spec asks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

# The findings are the wire half, which the bundle and the CLI load without the checks.
from skulk_core.diagnostics.findings import DoctorFinding, Verdict

MAX_FINDINGS: Final = 64
# Below either, the models volume is too full to take another model's bytes.
DISK_LOW_FREE_BYTES: Final = 2 * 1024**3
DISK_LOW_FREE_FRACTION: Final = 0.05
MEMORY_LOW_FRACTION: Final = 0.10
MEMORY_CRITICAL_FRACTION: Final = 0.03
# Wall clocks further apart than this make logs, traces and timelines disagree.
CLOCK_SKEW_SECONDS: Final = 5.0
# A peer silent for longer than this is unreachable (the fabric's liveness bound).
PEER_SILENT_SECONDS: Final = 10.0
_GIB: Final = 1024**3


@dataclass(frozen=True, slots=True)
class EngineBuild:
    """What the llama.cpp bindings say about themselves (probed in a child process)."""

    importable: bool
    error: str = ""
    system_info: str = ""
    supports_rpc: bool = False
    cpu_advertises_amx: bool = False
    kernel_permits_amx: bool | None = None


@dataclass(frozen=True, slots=True)
class PeerFact:
    node_id: str
    name: str
    skulk_version: str | None
    heard_seconds_ago: float | None
    """None: a topology member this node has no live fabric link to."""
    clock_offset_seconds: float | None = None
    """How far the peer's wall clock is ahead of ours (from its telemetry)."""


@dataclass(frozen=True, slots=True)
class RefusedPeer:
    address: str
    reason: str


@dataclass(frozen=True, slots=True)
class RunnerFact:
    runner_id: str
    model_id: str
    phase: str
    seconds_in_phase: float
    budget_seconds: float | None
    """How long the phase may take before it counts as stuck (None: no bound)."""


@dataclass(frozen=True, slots=True)
class PortFact:
    name: str
    port: int
    listening: bool


@dataclass(frozen=True, slots=True)
class NodeFacts:
    node_id: str
    skulk_version: str
    engine: EngineBuild | None = None
    models_dir: str = ""
    disk_free: int | None = None
    disk_total: int | None = None
    ram_total: int | None = None
    ram_available: int | None = None
    swap_total: int | None = None
    swap_free: int | None = None
    peers: Sequence[PeerFact] = ()
    refused: Sequence[RefusedPeer] = ()
    runners: Sequence[RunnerFact] = ()
    ports: Sequence[PortFact] = ()
    unanswered_peers: Sequence[str] = field(default_factory=tuple)
    """Configured or discovered peer addresses that never became members."""
    programs: Sequence[ProgramFact] = ()
    """The outside programs a feature runs, looked up on this node's PATH."""


@dataclass(frozen=True, slots=True)
class ProgramFact:
    """An outside program (``espeak-ng``): where it was found on PATH, if anywhere."""

    name: str
    path: str | None
    needed_for: str
    install_hint: str


def run_doctor(facts: NodeFacts) -> list[DoctorFinding]:
    """Every check's findings, failures first, at most :data:`MAX_FINDINGS`."""
    findings = [finding for check in _CHECKS for finding in check(facts)]
    order = {Verdict.FAIL: 0, Verdict.WARN: 1, Verdict.PASS: 2, Verdict.SKIP: 3}
    findings.sort(key=lambda f: order[f.verdict])
    return findings[:MAX_FINDINGS]


def worst(findings: Sequence[DoctorFinding]) -> Verdict:
    """The verdict a script acts on: fail if any failed, else warn, else pass."""
    verdicts = {f.verdict for f in findings}
    for verdict in (Verdict.FAIL, Verdict.WARN):
        if verdict in verdicts:
            return verdict
    return Verdict.PASS


# --- the checks ---------------------------------------------------------------------

_REBUILD = (
    "rebuild the bindings with the project's own install (`uv sync --reinstall-package "
    "llama-cpp-python`), which sets -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
)


def _engine(facts: NodeFacts) -> list[DoctorFinding]:
    engine = facts.engine
    title = "llama.cpp engine build"
    if engine is None:
        return [
            DoctorFinding(
                check_id="engine.build",
                title=title,
                verdict=Verdict.SKIP,
                detail="the engine was not probed",
            )
        ]
    if not engine.importable:
        return [
            DoctorFinding(
                check_id="engine.build",
                title=title,
                verdict=Verdict.FAIL,
                detail=f"the llama.cpp bindings do not load: {engine.error}",
                consequence="no model can be served on this node",
                remediation=(
                    "reinstall the bindings (`uv sync --reinstall-package llama-cpp-python`)"
                ),
                fix_available=True,
            )
        ]
    found: list[DoctorFinding] = []
    amx_in_build = "AMX" in engine.system_info
    amx_title = "AMX instructions the kernel does not enable"
    if amx_in_build and engine.cpu_advertises_amx and engine.kernel_permits_amx is False:
        found.append(
            DoctorFinding(
                check_id="engine.amx",
                title=amx_title,
                verdict=Verdict.FAIL,
                detail=(
                    "the llama.cpp build uses AMX (the CPU advertises it) but this kernel "
                    "or VM refuses AMX tile state"
                ),
                consequence="every runner dies with SIGILL on its first decode",
                remediation=_REBUILD,
                fix_available=True,
            )
        )
    elif amx_in_build and engine.cpu_advertises_amx:
        found.append(
            DoctorFinding(
                check_id="engine.amx",
                title=amx_title,
                verdict=Verdict.WARN,
                detail="the llama.cpp build uses AMX; some VMs advertise AMX without enabling it",
                consequence="if runners die with SIGILL on their first decode, this is why",
                remediation=_REBUILD,
                fix_available=True,
            )
        )
    else:
        found.append(
            DoctorFinding(
                check_id="engine.amx",
                title=amx_title,
                verdict=Verdict.PASS,
                detail="the build does not use AMX"
                if not amx_in_build
                else "the build uses AMX and the CPU does not advertise it",
            )
        )
    found.append(
        DoctorFinding(
            check_id="engine.rpc",
            title="llama.cpp RPC backend",
            verdict=Verdict.PASS if engine.supports_rpc else Verdict.WARN,
            detail="the bindings include ggml-rpc"
            if engine.supports_rpc
            else "the bindings were built without ggml-rpc",
            consequence="" if engine.supports_rpc else "this node cannot join llama.cpp RPC pools",
            remediation=""
            if engine.supports_rpc
            else "rebuild llama-cpp-python with CMAKE_ARGS=-DGGML_RPC=ON",
            fix_available=not engine.supports_rpc,
        )
    )
    return found


def _disk(facts: NodeFacts) -> list[DoctorFinding]:
    title = "free disk on the models volume"
    if facts.disk_free is None or facts.disk_total is None or facts.disk_total <= 0:
        return [
            DoctorFinding(
                check_id="disk.models",
                title=title,
                verdict=Verdict.SKIP,
                detail=f"{facts.models_dir or 'the models dir'} could not be read",
            )
        ]
    fraction = facts.disk_free / facts.disk_total
    detail = (
        f"{facts.disk_free / _GIB:.1f} GiB free of {facts.disk_total / _GIB:.1f} GiB "
        f"({fraction:.0%}) on {facts.models_dir}"
    )
    if facts.disk_free < DISK_LOW_FREE_BYTES or fraction < DISK_LOW_FREE_FRACTION:
        return [
            DoctorFinding(
                check_id="disk.models",
                title=title,
                verdict=Verdict.FAIL,
                detail=detail,
                consequence="new models cannot be downloaded or staged here",
                remediation=(
                    "free space on that volume or move model_store.models_dir to a larger one"
                ),
            )
        ]
    return [DoctorFinding(check_id="disk.models", title=title, verdict=Verdict.PASS, detail=detail)]


def _memory(facts: NodeFacts) -> list[DoctorFinding]:
    title = "memory pressure"
    if not facts.ram_total or facts.ram_available is None:
        return [
            DoctorFinding(
                check_id="memory.pressure",
                title=title,
                verdict=Verdict.SKIP,
                detail="memory could not be read",
            )
        ]
    fraction = facts.ram_available / facts.ram_total
    detail = (
        f"{facts.ram_available / _GIB:.1f} GiB of {facts.ram_total / _GIB:.1f} GiB available "
        f"({fraction:.0%})"
    )
    if facts.swap_total and facts.swap_free is not None:
        detail += f"; swap {(facts.swap_total - facts.swap_free) / _GIB:.1f} GiB used"
    if fraction < MEMORY_LOW_FRACTION:
        verdict = Verdict.FAIL if fraction < MEMORY_CRITICAL_FRACTION else Verdict.WARN
        return [
            DoctorFinding(
                check_id="memory.pressure",
                title=title,
                verdict=verdict,
                detail=detail,
                consequence="placements are refused and running models may swap or be killed",
                remediation=(
                    "delete an instance this node serves, stop other programs, or lower "
                    "node.memory_reserve_gb only if the reserve is larger than needed"
                ),
            )
        ]
    return [
        DoctorFinding(check_id="memory.pressure", title=title, verdict=Verdict.PASS, detail=detail)
    ]


def _peers(facts: NodeFacts) -> list[DoctorFinding]:
    found: list[DoctorFinding] = []
    silent = [
        p
        for p in facts.peers
        if p.heard_seconds_ago is None or p.heard_seconds_ago > PEER_SILENT_SECONDS
    ]
    for peer in silent:
        heard = (
            "has no fabric link to this node"
            if peer.heard_seconds_ago is None
            else f"was last heard {peer.heard_seconds_ago:.0f} s ago"
        )
        found.append(
            DoctorFinding(
                check_id=f"peer.unreachable:{peer.node_id}",
                title="unreachable peer",
                verdict=Verdict.FAIL,
                detail=f"{peer.name} ({peer.node_id}) {heard}",
                consequence="its instances cannot serve and placements that need it fail",
                remediation=(
                    f"check that {peer.name} is running and that its fabric port is reachable "
                    "from here (firewall, cable, sleep)"
                ),
            )
        )
    for address in facts.unanswered_peers:
        found.append(
            DoctorFinding(
                check_id=f"peer.unanswered:{address}",
                title="peer that never answered",
                verdict=Verdict.WARN,
                detail=f"{address} was dialled but never joined as a member",
                consequence="that machine is not part of the cluster",
                remediation=f"start Skulk on {address} or remove it from cluster.peers",
            )
        )
    if not silent and not facts.unanswered_peers:
        found.append(
            DoctorFinding(
                check_id="peer.unreachable",
                title="peers reachable",
                verdict=Verdict.PASS,
                detail=f"{len(facts.peers)} peer(s), all heard within {PEER_SILENT_SECONDS:g} s"
                if facts.peers
                else "no peers: this node is a cluster of one",
            )
        )
    return found


def _key_mismatch(facts: NodeFacts) -> list[DoctorFinding]:
    mismatched = sorted({r.address for r in facts.refused if "key" in r.reason.lower()})
    other = sorted({f"{r.address}: {r.reason}" for r in facts.refused})
    if mismatched:
        return [
            DoctorFinding(
                check_id="fabric.key",
                title="cluster key mismatch",
                verdict=Verdict.FAIL,
                detail="refused for a different cluster key: " + ", ".join(mismatched[:8]),
                consequence="those machines cannot join this cluster",
                remediation=(
                    "give every node the same cluster.key (or SKULK_CLUSTER_KEY) and restart "
                    "the ones that differ"
                ),
            )
        ]
    if other:
        return [
            DoctorFinding(
                check_id="fabric.key",
                title="cluster key mismatch",
                verdict=Verdict.WARN,
                detail="refused connections: " + "; ".join(other[:4]),
                consequence="those connections are not part of the cluster",
                remediation="check what runs at those addresses; only Skulk nodes may connect",
            )
        ]
    return [
        DoctorFinding(
            check_id="fabric.key",
            title="cluster key matches",
            verdict=Verdict.PASS,
            detail="no connection refused",
        )
    ]


def _versions(facts: NodeFacts) -> list[DoctorFinding]:
    other = sorted(
        {
            f"{p.name} runs {p.skulk_version}"
            for p in facts.peers
            if p.skulk_version is not None and p.skulk_version != facts.skulk_version
        }
    )
    if other:
        return [
            DoctorFinding(
                check_id="cluster.version",
                title="version mismatch",
                verdict=Verdict.WARN,
                detail=f"this node runs {facts.skulk_version}; " + ", ".join(other),
                consequence="mixed versions may disagree on the wire and on placement",
                remediation="upgrade every node to the same Skulk version",
            )
        ]
    return [
        DoctorFinding(
            check_id="cluster.version",
            title="versions match",
            verdict=Verdict.PASS,
            detail=f"every node runs {facts.skulk_version}",
        )
    ]


def _clocks(facts: NodeFacts) -> list[DoctorFinding]:
    skewed = [
        p
        for p in facts.peers
        if p.clock_offset_seconds is not None and abs(p.clock_offset_seconds) > CLOCK_SKEW_SECONDS
    ]
    if skewed:
        detail = ", ".join(
            f"{p.name} {p.clock_offset_seconds:+.0f} s" for p in skewed if p.clock_offset_seconds
        )
        return [
            DoctorFinding(
                check_id="cluster.clock",
                title="clock skew between nodes",
                verdict=Verdict.WARN,
                detail=f"peer clocks differ from this node's: {detail}",
                consequence="timelines, traces and token lifetimes disagree between nodes",
                remediation="enable NTP (for example systemd-timesyncd or chrony) on every node",
            )
        ]
    return [
        DoctorFinding(
            check_id="cluster.clock",
            title="clocks agree between nodes",
            verdict=Verdict.PASS,
            detail=f"peer clocks within {CLOCK_SKEW_SECONDS:g} s",
        )
    ]


def _ports(facts: NodeFacts) -> list[DoctorFinding]:
    missing = [p for p in facts.ports if not p.listening]
    if missing:
        return [
            DoctorFinding(
                check_id=f"ports.{p.name}",
                title="port not served",
                verdict=Verdict.FAIL,
                detail=f"the {p.name} port {p.port} is not listening in this process",
                consequence=f"clients of the {p.name} port cannot reach this node",
                remediation=(
                    f"find what holds port {p.port} (`ss -ltnp 'sport = :{p.port}'`), stop it, "
                    "and restart Skulk, or choose another port"
                ),
            )
            for p in missing
        ]
    return [
        DoctorFinding(
            check_id="ports",
            title="ports served",
            verdict=Verdict.PASS,
            detail=", ".join(f"{p.name} {p.port}" for p in facts.ports) or "no port to check",
        )
    ]


def _runners(facts: NodeFacts) -> list[DoctorFinding]:
    stuck = [
        r
        for r in facts.runners
        if r.budget_seconds is not None and r.seconds_in_phase > r.budget_seconds
    ]
    if stuck:
        return [
            DoctorFinding(
                check_id=f"runner.stuck:{r.runner_id}",
                title="runner stuck in one phase",
                verdict=Verdict.FAIL,
                detail=(
                    f"runner {r.runner_id} ({r.model_id}) has been {r.phase} for "
                    f"{r.seconds_in_phase:.0f} s (budget {r.budget_seconds:.0f} s)"
                ),
                consequence="its instance serves nothing until it moves on",
                remediation=(
                    "capture its bundle (`skulk diagnostics capture --runner "
                    f"{r.runner_id}`), then delete and re-place the instance"
                ),
            )
            for r in stuck
        ]
    return [
        DoctorFinding(
            check_id="runner.stuck",
            title="no runner stuck",
            verdict=Verdict.PASS,
            detail=f"{len(facts.runners)} runner(s), none past its phase budget",
        )
    ]


def _programs(facts: NodeFacts) -> list[DoctorFinding]:
    return [
        DoctorFinding(
            check_id=f"program:{program.name}",
            title=f"{program.name} installed",
            verdict=Verdict.PASS,
            detail=f"found at {program.path}",
        )
        if program.path
        else DoctorFinding(
            check_id=f"program:{program.name}",
            title=f"{program.name} not installed",
            verdict=Verdict.WARN,
            detail=f"no {program.name} program on this node's PATH",
            consequence=f"{program.needed_for} cannot work on this node",
            remediation=program.install_hint,
            fix_available=True,
        )
        for program in facts.programs
    ]


_CHECKS: Final[tuple[Callable[[NodeFacts], list[DoctorFinding]], ...]] = (
    _engine,
    _disk,
    _memory,
    _peers,
    _key_mismatch,
    _versions,
    _clocks,
    _ports,
    _runners,
    _programs,
)
