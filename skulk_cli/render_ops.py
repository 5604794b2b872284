"""Renderers for the operational jobs (`skulk diagnostics telemetry|envelopes`,
`skulk connectivity`, `skulk plugins proposals|setup|grants`): pure functions from
the node's answers to rich renderables."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import msgspec
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from skulk_cli.ops_views import PluginGrantsView, TelemetryPreviewView
from skulk_core.cluster.remote_access import RemoteAccess, TailscaleStatus
from skulk_core.diagnostics.answers import ClusterEnvelopes, TelemetryReport
from skulk_core.diagnostics.envelopes import Envelope
from skulk_core.extensions.proposals import ProposalOperation, ProposalPage, ProposalReview
from skulk_core.extensions.setup_actions import NodeSetupActions, SetupOperation


def _facts(title: str, rows: Sequence[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False)
    table.add_column("fact")
    table.add_column("value", overflow="fold")
    for name, value in rows:
        table.add_row(name, value)
    return table


def _shown(value: object) -> str:
    if value is msgspec.UNSET or value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _when(seconds: int | None) -> str:
    if not seconds:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# -- diagnostics -------------------------------------------------------------------------


def telemetry(report: TelemetryReport) -> RenderableType:
    """The transport's counters; a node without a fabric has none to show."""
    if not report.fabric:
        return Text(
            f"Node {report.node_id} runs no fabric, so it publishes no telemetry.", style="dim"
        )
    return _facts(
        f"Telemetry transport of {report.node_id}",
        [
            ("beat", f"{_shown(report.beat_seconds)} s"),
            ("admission capacity", _shown(report.admission_capacity)),
            ("network queue capacity", _shown(report.network_queue_capacity)),
            ("depth (now / max)", f"{_shown(report.current_depth)} / {_shown(report.max_depth)}"),
            ("offered", _shown(report.offered)),
            ("coalesced", _shown(report.coalesced)),
            ("dropped", _shown(report.dropped)),
            ("publishes", _shown(report.publishes)),
            ("publish failures", _shown(report.publish_failures)),
            ("bytes published", _shown(report.publish_bytes)),
            ("publishes with no peer", _shown(report.no_peer_publishes)),
            ("oldest pending", f"{_shown(report.oldest_pending_age_seconds)} s"),
            ("last publish", f"{_shown(report.last_successful_publish_age_seconds)} s ago"),
        ],
    )


def telemetry_preview(preview: TelemetryPreviewView) -> RenderableType:
    """Consent, then each content-free sample that would be sent next."""
    state = "on" if preview.enabled else "off"
    facts = _facts(
        "Field telemetry",
        [
            ("sending", f"{state} (consent {preview.consent})"),
            ("destination", preview.ingest_url or "-"),
            ("queued samples", str(len(preview.pending))),
            ("dropped since start", str(preview.dropped_since_start)),
        ],
    )
    if not preview.pending:
        return Group(facts, Text("Nothing is queued.", style="dim"))
    table = Table(title="Would be sent next (no prompt or reply text is ever included)")
    for column in ("Model", "Hardware", "Engine", "TTFT ms", "Decode tok/s", "Tokens", "Failure"):
        table.add_column(column, overflow="fold")
    for sample in preview.pending:
        table.add_row(
            sample.model_id,
            sample.hardware_class,
            sample.engine,
            _shown(sample.time_to_first_token_ms),
            _shown(sample.decode_tokens_per_second),
            f"{sample.prompt_tokens} + {sample.completion_tokens}",
            sample.failure_class or "",
        )
    return Group(facts, table)


def envelopes(node_id: str, found: Sequence[Envelope]) -> RenderableType:
    """One table per model: each concurrency's decode rates and first-token latency."""
    if not found:
        return Text(
            f"Node {node_id} has served no measured requests yet (no envelopes).", style="dim"
        )
    parts: list[RenderableType] = []
    for envelope in found:
        knee = envelope.knee_concurrency
        title = (
            f"{envelope.model_id} on {node_id} ({envelope.engine}, {envelope.quantization}, "
            f"{envelope.hardware_class}; {envelope.samples} samples; knee "
            f"{knee if knee is not None else '-'})"
        )
        table = Table(title=title)
        for column in ("Concurrency", "Requests", "Mean tok/s", "p50 tok/s", "Aggregate tok/s"):
            table.add_column(column, justify="right")
        table.add_column("p50 TTFT ms", justify="right")
        table.add_column("p90 TTFT ms", justify="right")
        for bucket in envelope.buckets:
            table.add_row(
                str(bucket.concurrency),
                str(bucket.requests),
                f"{bucket.mean_decode_tps:.1f}",
                f"{bucket.p50_decode_tps:.1f}",
                f"{bucket.aggregate_decode_tps:.1f}",
                f"{bucket.p50_ttft_ms:.0f}",
                f"{bucket.p90_ttft_ms:.0f}",
            )
        parts.append(table)
    return Group(*parts)


def cluster_envelopes(report: ClusterEnvelopes) -> RenderableType:
    parts: list[RenderableType] = []
    for member in report.nodes:
        if not member.ok:
            error = member.error if isinstance(member.error, str) else "no answer"
            parts.append(Text(f"{member.node_id}: unreachable ({error})", style="red"))
            continue
        found = member.envelopes if isinstance(member.envelopes, list) else []
        parts.append(envelopes(member.node_id, found))
    return Group(*parts)


# -- connectivity ------------------------------------------------------------------------


def connectivity(
    access: RemoteAccess | None, tailscale: TailscaleStatus, node_id: str | None
) -> RenderableType:
    rows: list[tuple[str, str]] = []
    if access is not None:
        rows += [
            ("LAN URL", access.local.url or "- (no LAN address)"),
            ("tailnet URL", access.tailscale.url or "-"),
            ("preferred URL", access.preferred_url or "-"),
            ("operator URL", access.operator_url or "-"),
        ]
    running = "running" if tailscale.running else "not running"
    rows.append(("Tailscale", running))
    if tailscale.running:
        rows += [
            ("tailnet address", _shown(tailscale.self_ip)),
            ("MagicDNS name", _shown(tailscale.dns_name)),
            ("tailnet", _shown(tailscale.tailnet)),
            ("version", _shown(tailscale.version)),
        ]
    where = f"node {node_id}" if node_id is not None else "this node"
    return _facts(f"Connectivity of {where}", rows)


# -- plugins -----------------------------------------------------------------------------


def proposals(page: ProposalPage) -> RenderableType:
    if not page.proposals:
        return Text("No retained proposals.", style="dim")
    table = Table(title="Proposals")
    table.add_column("Proposal", overflow="fold")
    table.add_column("Digest", overflow="fold")
    table.add_column("State")
    table.add_column("Expires")
    table.add_column("Summary", overflow="fold")
    for item in page.proposals:
        table.add_row(
            item.reference.proposal_id,
            item.reference.proposal_digest,
            item.state,
            _when(item.expires_at),
            item.summary,
        )
    if page.next_offset is None:
        return table
    return Group(table, Text(f"More: --offset {page.next_offset}", style="dim"))


def proposal_review(review: ProposalReview) -> RenderableType:
    """The provider's facts as text, then the fence an approval must name."""
    summary = review.proposal
    rows = [(f.label, f.value) for f in review.fields]
    rows += [
        ("state", summary.state),
        ("expires", _when(summary.expires_at)),
        ("observed", _when(review.observed_at)),
        ("review revision", review.approval_revision or "- (approval unavailable)"),
    ]
    return Group(
        Text(summary.summary, style="bold"),
        _facts(f"Proposal {summary.reference.proposal_id}", rows),
    )


def proposal_operation(operation: ProposalOperation) -> RenderableType:
    rows = [
        ("operation", operation.operation_id),
        ("proposal", operation.reference.proposal_id),
        ("phase", operation.phase),
        ("updated", _when(operation.updated_at)),
        ("code", operation.code or "-"),
        ("corrective action", operation.corrective_action or "-"),
    ]
    if operation.reconciliation is not None:
        stale = " (stale)" if operation.reconciliation.stale else ""
        rows.append(("cleanup", f"{operation.reconciliation.state}{stale}"))
    return _facts("Proposal action", rows)


def setup_actions(listing: NodeSetupActions) -> RenderableType:
    parts: list[RenderableType] = []
    if listing.actions:
        table = Table(title=f"Setup actions of {listing.node_id}")
        table.add_column("Action")
        table.add_column("Title", overflow="fold")
        table.add_column("Needs approval")
        table.add_column("Description", overflow="fold")
        for action in listing.actions:
            table.add_row(
                action.action_id,
                action.title,
                "yes" if action.requires_approval else "no",
                action.description,
            )
        parts.append(table)
    else:
        parts.append(Text(f"Node {listing.node_id} offers no setup actions.", style="dim"))
    if listing.operations:
        parts.append(setup_operations(listing.operations))
    return Group(*parts)


def setup_operations(operations: Sequence[SetupOperation]) -> Table:
    table = Table(title="Setup operations")
    table.add_column("Operation", overflow="fold")
    table.add_column("Action")
    table.add_column("Phase")
    table.add_column("Code")
    table.add_column("Corrective action", overflow="fold")
    for operation in operations:
        table.add_row(
            operation.operation_id,
            operation.action_id,
            operation.phase,
            operation.code or "",
            operation.corrective_action or "",
        )
    return table


def grants(listing: PluginGrantsView) -> RenderableType:
    if not listing.devices:
        return Text("No paired devices.", style="dim")
    table = Table(title="Plugin grants of paired devices")
    table.add_column("Device", overflow="fold")
    table.add_column("Name", overflow="fold")
    table.add_column("Scopes")
    table.add_column("Revision", justify="right")
    table.add_column("Active")
    for device in listing.devices:
        table.add_row(
            device.device_id,
            device.device_name,
            ", ".join(device.scopes) or "-",
            str(device.revision),
            "yes" if device.active else "no",
        )
    return table
