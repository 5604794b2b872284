"""Renderers for the store's jobs (`skulk store storage|reconciliation`): pure
functions from the node's answers to rich renderables."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from skulk_core.store.answers import NodeStorage, ReconciliationStatus

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def size(value: int) -> str:
    """``value`` bytes, in the largest binary unit under 1024 (``2.0 MiB``)."""
    amount = float(value)
    for unit in _UNITS:
        if amount < 1024 or unit == _UNITS[-1]:
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} TiB"  # pragma: no cover - the loop returns at the last unit


def _when(seconds: int | None) -> str:
    if not seconds:
        return "never"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def storage_table(storage: NodeStorage) -> RenderableType:
    """One row per model copy on the node."""
    if not storage.artifacts:
        return Text(f"Node {storage.node_id} keeps no model files.", style="dim")
    table = Table(title=f"Storage on {storage.node_id}")
    table.add_column("Model", overflow="fold")
    table.add_column("Size", justify="right")
    table.add_column("Kind")
    table.add_column("Verified")
    table.add_column("In use")
    table.add_column("Path", overflow="fold")
    for item in sorted(storage.artifacts, key=lambda a: (-a.size_bytes, a.model_id)):
        complete = "" if item.manifest_complete else " (incomplete)"
        table.add_row(
            item.model_id,
            size(item.size_bytes),
            item.location_kind,
            f"{item.verification_state}{complete}",
            "yes" if item.in_use else "no",
            item.path,
        )
    return table


def reconciliation_view(status: ReconciliationStatus) -> RenderableType:
    """The pass's facts, then what it found, pends and refused."""
    facts = Table(title="Store reconciliation", show_header=False)
    facts.add_column("fact")
    facts.add_column("value")
    automatic = "yes" if status.automatic else f"no ({status.disabled_reason or 'off'})"
    facts.add_row("state", status.state)
    facts.add_row("automatic", automatic)
    facts.add_row("inventory only", "yes" if status.inventory_only else "no")
    facts.add_row("nodes scanned", str(status.scanned_nodes))
    facts.add_row("discovered", str(status.discovered))
    facts.add_row("imported", str(status.imported))
    facts.add_row("last verified", _when(status.last_verified_at))
    parts: list[RenderableType] = [facts]
    if status.pending:
        parts.append(Text("pending: " + ", ".join(status.pending)))
    if status.tombstoned:
        parts.append(Text("tombstoned (never re-imported): " + ", ".join(status.tombstoned)))
    if status.failures:
        failures = Table(title="Refused")
        failures.add_column("Model", overflow="fold")
        failures.add_column("Node")
        failures.add_column("Why", overflow="fold")
        for failure in status.failures:
            failures.add_row(failure.model_id, failure.node_id, failure.error)
        parts.append(failures)
    return Group(*parts)
