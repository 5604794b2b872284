"""Pure renderers for diagnostics: the doctor's findings, the cluster sweep, the
merged timeline. The node's answers decoded into their wire types in, rich
renderables out."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from skulk_cli.render import humanize_bytes, short_id
from skulk_cli.short_ids import NODE_PREFIX, IdShortener
from skulk_core.diagnostics.answers import UNSET, Capture, ClusterBundles, Timeline
from skulk_core.diagnostics.bundle import NodeBundle
from skulk_core.diagnostics.findings import DoctorFinding, Verdict

_VERDICT_STYLE = {
    Verdict.PASS: "green",
    Verdict.WARN: "yellow",
    Verdict.FAIL: "bold red",
    Verdict.SKIP: "dim",
}


def doctor(bundle: NodeBundle) -> RenderableType:
    """Each finding: verdict, title and detail; what to do under each non-passing one."""
    table = Table(title=f"Doctor: {short_id(bundle.node_id)}", show_lines=False, expand=False)
    table.add_column("verdict")
    table.add_column("check")
    table.add_column("detail", overflow="fold")
    for finding in bundle.doctor:
        detail = Text(finding.detail)
        if finding.verdict in (Verdict.FAIL, Verdict.WARN):
            if finding.consequence:
                detail.append(f"\n{finding.consequence}", style="italic")
            if finding.remediation:
                detail.append(f"\nfix: {finding.remediation}", style="cyan")
        table.add_row(
            Text(finding.verdict.value.upper(), style=_VERDICT_STYLE[finding.verdict]),
            finding.title or finding.check_id,
            detail,
        )
    return table


def failed(bundle: NodeBundle) -> bool:
    return bool(_failing(bundle.doctor))


def _failing(findings: Sequence[DoctorFinding]) -> list[str]:
    return [f.check_id for f in findings if f.verdict is Verdict.FAIL]


def node(bundle: NodeBundle) -> RenderableType:
    """Runtime facts, the runners and the process tree, then the doctor."""
    runtime = bundle.runtime
    facts = Table.grid(padding=(0, 2))
    for label, value in (
        ("node", runtime.node_id),
        ("master", runtime.master_node_id),
        ("version", runtime.skulk_version),
        ("commit", runtime.skulk_commit),
        ("uptime s", runtime.uptime_seconds),
    ):
        facts.add_row(Text(label, style="bold"), str(value))
    runners = Table(title="Runners")
    for column in ("runner", "model", "status", "phase", "for s", "tasks"):
        runners.add_column(column)
    for runner in bundle.supervisor_runners:
        runners.add_row(
            short_id(runner.runner_id),
            runner.model_id,
            str(runner.status_kind),
            runner.phase,
            f"{runner.seconds_in_phase:.0f}",
            str(runner.active_tasks),
        )
    processes = Table(title="Processes")
    for column in ("pid", "role", "rss", "cpu %"):
        processes.add_column(column)
    for process in bundle.processes:
        processes.add_row(
            str(process.pid),
            process.role,
            humanize_bytes(process.rss_bytes),
            str(process.cpu_percent),
        )
    return Group(facts, runners, processes, doctor(bundle))


def capture(taken: Capture, saved_to: str, size: int) -> RenderableType:
    """What a saved capture holds, in a few lines: the file is for a bug report."""
    facts = Table.grid(padding=(0, 2))
    memory = taken.memory
    rows = [
        ("node", short_id(taken.node_id)),
        ("captured at", taken.captured_at),
        (
            "memory",
            f"{humanize_bytes(memory.ram_available)} free of {humanize_bytes(memory.ram_total)}, "
            f"daemon {humanize_bytes(memory.daemon_rss_bytes)}",
        ),
    ]
    if taken.runner is not UNSET:
        runner = taken.runner
        rows.append(("runner", f"{short_id(runner.runner_id)} {runner.model_id} ({runner.phase})"))
    if taken.flight_recorder is not UNSET:
        rows.append(("flight recorder", f"{len(taken.flight_recorder)} entries"))
    if taken.process_samples is not UNSET:
        threads = sum(len(sample.threads) for sample in taken.process_samples)
        rows.append(("samples", f"{len(taken.process_samples)} processes, {threads} threads"))
    for label, value in rows:
        facts.add_row(Text(label, style="bold"), value)
    lines: list[RenderableType] = [facts]
    for failure in taken.partial_failures:
        lines.append(Text(f"could not read {failure.what}: {failure.error}", style="yellow"))
    lines.append(Text(f"Saved to {saved_to} ({humanize_bytes(size)}).", style="green"))
    return Group(*lines)


def cluster(report: ClusterBundles) -> RenderableType:
    table = Table(title=f"Cluster ({report.version_status})")
    for column in ("node", "reachable", "version", "failing checks"):
        table.add_column(column)
    for entry in report.nodes:
        bundle = entry.bundle if isinstance(entry.bundle, NodeBundle) else None
        failing = [] if bundle is None else _failing(bundle.doctor)
        table.add_row(
            short_id(entry.node_id),
            Text("yes", style="green") if entry.ok else Text(str(entry.error), style="red"),
            f"{entry.skulk_version} ({entry.version_status})",
            ", ".join(failing) or ("-" if entry.ok else "?"),
        )
    return table


def _time_of_day(at: str) -> str:
    """``12:00:01.234`` of an ISO timestamp (``2026-01-01T12:00:01.234567+00:00``)."""
    _, sep, clock = at.partition("T")
    return clock[:12] if sep else at


def timeline(merged: Timeline, *, wide: bool = False) -> RenderableType:
    """The runners by rank, then every recorder entry by time. Ids are unique prefixes
    and times are of day (the date is in `--json`), so it fits 80 columns; ``wide``
    shows ids and timestamps whole."""
    runner_ids = IdShortener(
        [r.runner_id for r in merged.runners] + [e.runner_id for e in merged.entries], wide=wide
    )
    node_ids = IdShortener(
        [r.node_id for r in merged.runners] + [e.node_id for e in merged.entries],
        wide=wide,
        minimum=NODE_PREFIX,
    )
    runners = Table(title="Runners by model and rank")
    for column in ("model", "rank", "node", "runner", "phase", "for s"):
        runners.add_column(column, no_wrap=column in ("node", "runner"))
    for runner in merged.runners:
        runners.add_row(
            runner.model_id,
            str(runner.device_rank),
            node_ids(runner.node_id),
            runner_ids(runner.runner_id),
            runner.phase,
            f"{runner.seconds_in_phase:.0f}",
        )
    entries = Table(title="Timeline")
    for column in ("at", "node", "runner", "event", "phase"):
        entries.add_column(column, no_wrap=column in ("at", "node", "runner"))
    for entry in merged.entries:
        entries.add_row(
            entry.at if wide else _time_of_day(entry.at),
            node_ids(entry.node_id),
            runner_ids(entry.runner_id),
            entry.event,
            entry.phase,
        )
    parts: list[RenderableType] = [runners, entries]
    for missing in merged.unreachable_nodes:
        parts.append(Text(f"unreachable: {missing.node_id}: {missing.error}", style="red"))
    return Group(*parts)
