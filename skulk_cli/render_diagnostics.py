"""Pure renderers for diagnostics: the doctor's findings, the cluster sweep, the
merged timeline. JSON documents in (as the node sent them), rich renderables out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from skulk_cli.render import humanize_bytes, short_id

_VERDICT_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def doctor(bundle: Mapping[str, Any]) -> RenderableType:
    """Each finding: verdict, title and detail; what to do under each non-passing one."""
    node = str(bundle.get("nodeId", "?"))
    table = Table(title=f"Doctor: {short_id(node)}", show_lines=False, expand=False)
    table.add_column("verdict")
    table.add_column("check")
    table.add_column("detail", overflow="fold")
    for finding in _findings(bundle):
        verdict = str(finding.get("verdict", "?"))
        detail = Text(str(finding.get("detail", "")))
        if verdict in ("fail", "warn"):
            if finding.get("consequence"):
                detail.append(f"\n{finding['consequence']}", style="italic")
            if finding.get("remediation"):
                detail.append(f"\nfix: {finding['remediation']}", style="cyan")
        table.add_row(
            Text(verdict.upper(), style=_VERDICT_STYLE.get(verdict, "")),
            str(finding.get("title", finding.get("checkId", ""))),
            detail,
        )
    return table


def failed(bundle: Mapping[str, Any]) -> bool:
    return any(f.get("verdict") == "fail" for f in _findings(bundle))


def _findings(bundle: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    found = bundle.get("doctor")
    return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []


def node(bundle: Mapping[str, Any]) -> RenderableType:
    """Runtime facts, the runners and the process tree, then the doctor."""
    runtime = bundle.get("runtime") or {}
    facts = Table.grid(padding=(0, 2))
    for label, key in (
        ("node", "nodeId"),
        ("master", "masterNodeId"),
        ("version", "skulkVersion"),
        ("commit", "skulkCommit"),
        ("uptime s", "uptimeSeconds"),
    ):
        facts.add_row(Text(label, style="bold"), str(runtime.get(key)))
    runners = Table(title="Runners")
    for column in ("runner", "model", "status", "phase", "for s", "tasks"):
        runners.add_column(column)
    for runner in bundle.get("supervisorRunners") or []:
        runners.add_row(
            short_id(str(runner.get("runnerId"))),
            str(runner.get("modelId")),
            str(runner.get("statusKind")),
            str(runner.get("phase")),
            f"{float(runner.get('secondsInPhase') or 0):.0f}",
            str(runner.get("activeTasks")),
        )
    processes = Table(title="Processes")
    for column in ("pid", "role", "rss", "cpu %"):
        processes.add_column(column)
    for process in bundle.get("processes") or []:
        processes.add_row(
            str(process.get("pid")),
            str(process.get("role")),
            humanize_bytes(int(process.get("rssBytes") or 0)),
            str(process.get("cpuPercent")),
        )
    return Group(facts, runners, processes, doctor(bundle))


def cluster(report: Mapping[str, Any]) -> RenderableType:
    table = Table(title=f"Cluster ({report.get('versionStatus')})")
    for column in ("node", "reachable", "version", "failing checks"):
        table.add_column(column)
    for entry in report.get("nodes") or []:
        ok = bool(entry.get("ok"))
        bundle = entry.get("bundle") or {}
        failing = [f.get("checkId") for f in _findings(bundle) if f.get("verdict") == "fail"]
        table.add_row(
            short_id(str(entry.get("nodeId"))),
            Text("yes", style="green") if ok else Text(str(entry.get("error")), style="red"),
            f"{entry.get('skulkVersion')} ({entry.get('versionStatus')})",
            ", ".join(str(c) for c in failing) or ("-" if ok else "?"),
        )
    return table


def timeline(merged: Mapping[str, Any]) -> RenderableType:
    runners = Table(title="Runners by model and rank")
    for column in ("model", "rank", "node", "runner", "phase", "for s"):
        runners.add_column(column)
    for runner in merged.get("runners") or []:
        runners.add_row(
            str(runner.get("modelId")),
            str(runner.get("deviceRank")),
            short_id(str(runner.get("nodeId"))),
            short_id(str(runner.get("runnerId"))),
            str(runner.get("phase")),
            f"{float(runner.get('secondsInPhase') or 0):.0f}",
        )
    entries = Table(title="Timeline")
    for column in ("at", "node", "runner", "event", "phase"):
        entries.add_column(column)
    for entry in merged.get("entries") or []:
        entries.add_row(
            str(entry.get("at")),
            short_id(str(entry.get("nodeId"))),
            short_id(str(entry.get("runnerId"))),
            str(entry.get("event")),
            str(entry.get("phase")),
        )
    parts: list[RenderableType] = [runners, entries]
    for missing in merged.get("unreachableNodes") or []:
        parts.append(
            Text(f"unreachable: {missing.get('nodeId')}: {missing.get('error')}", style="red")
        )
    return Group(*parts)
