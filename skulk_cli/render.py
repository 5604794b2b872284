"""Pure renderers: views in, rich renderables out. No I/O happens here."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from skulk_cli.config_edit import SECRET_KEYS
from skulk_cli.views import ClusterState, ConfigResponse, ModelList, NodeIdentity

_BYTE_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")
_HEALTH_STYLE = {"ok": "green", "warn": "yellow", "error": "red"}
_RUNNER_STYLE = {"ready": "green", "running": "green", "failed": "red"}
# Node ids are 52-character peer ids; tables show them shortened (the full id of
# this node is in the heading, and every id is in --json).
_SHORT_ID_MAX = 20


def humanize_bytes(count: int) -> str:
    """Binary units, one decimal: ``1536`` -> ``1.5 KiB``."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in _BYTE_UNITS:
        value /= 1024
        if value < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def short_id(node_id: str) -> str:
    """A peer id short enough for a table column: ``12D3KooW…LEDWCmor``."""
    return node_id if len(node_id) <= _SHORT_ID_MAX else f"{node_id[:8]}…{node_id[-8:]}"


def format_value(value: object) -> str:
    """A config value as `skulk config set` would take it: strings bare, the rest JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def status(identity: NodeIdentity, state: ClusterState) -> RenderableType:
    """This node, every node's memory and health, the placed instances and their runners."""
    this = state.node_identities.get(identity.node_id)
    name = (this.friendly_name if this else None) or identity.hostname or identity.node_id
    header = Text.assemble(("Node ", "bold"), (name, "bold cyan"), f"  {identity.node_id}")
    if identity.hostname or identity.ip_address:
        header.append(f"  ({', '.join(p for p in (identity.hostname, identity.ip_address) if p)})")
    parts: list[RenderableType] = [header, _nodes_table(identity.node_id, state)]
    parts.extend(_health_reasons(state))
    parts.append(_instances_table(state))
    if state.runners:
        parts.append(_runners_table(state))
    return Group(*parts)


def _node_name(state: ClusterState, node_id: str) -> str:
    info = state.node_identities.get(node_id)
    return (info.friendly_name if info else None) or short_id(node_id)


def _nodes_table(this_node: str, state: ClusterState) -> Table:
    nodes = set(state.node_memory) | set(state.node_identities) | set(state.node_health)
    table = Table(title="Nodes", title_justify="left", caption="* this node")
    table.add_column("Node", no_wrap=True)
    table.add_column("ID", overflow="fold")
    table.add_column("Memory free / total", no_wrap=True)
    table.add_column("Version")
    table.add_column("Health")
    for node_id in sorted(nodes, key=lambda n: (n != this_node, n)):
        info = state.node_identities.get(node_id)
        memory = state.node_memory.get(node_id)
        health = state.node_health.get(node_id)
        level = health.level if health else "unknown"
        name = (info.friendly_name if info else None) or "-"
        table.add_row(
            f"{name} *" if node_id == this_node else name,
            short_id(node_id),
            (
                f"{humanize_bytes(memory.ram_available.in_bytes)}"
                f" / {humanize_bytes(memory.ram_total.in_bytes)}"
                if memory
                else "-"
            ),
            (info.skulk_version if info else None) or "-",
            Text(level, style=_HEALTH_STYLE.get(level, "dim")),
        )
    return table


def _health_reasons(state: ClusterState) -> Iterator[Text]:
    for node_id in sorted(state.node_health):
        health = state.node_health[node_id]
        for reason in health.reasons:
            line = Text.assemble(
                (f"{health.level} ", _HEALTH_STYLE.get(health.level, "dim")),
                f"{_node_name(state, node_id)}: ",
                (reason.message or reason.code, "bold"),
            )
            if reason.remediation:
                line.append(f"\n  fix: {reason.remediation}")
            yield line


def _instances_table(state: ClusterState) -> RenderableType:
    if not state.instances:
        return Text("No instances placed.", style="dim")
    table = Table(title="Instances", title_justify="left")
    for column in ("Instance", "Model", "Kind", "Nodes", "Context"):
        table.add_column(column, overflow="fold")
    for instance_id, tagged in sorted(state.instances.items()):
        for kind, body in tagged.items():
            assignments = body.shard_assignments
            table.add_row(
                instance_id,
                assignments.model_id,
                kind.removesuffix("Instance"),
                ", ".join(_node_name(state, n) for n in sorted(assignments.node_to_runner)),
                f"{body.context_token_limit:,}" if body.context_token_limit else "-",
            )
    return table


def _runners_table(state: ClusterState) -> Table:
    placed: dict[str, tuple[str, str]] = {}
    for tagged in state.instances.values():
        for body in tagged.values():
            for node_id, runner_id in body.shard_assignments.node_to_runner.items():
                placed[runner_id] = (node_id, body.shard_assignments.model_id)
    table = Table(title="Runners", title_justify="left")
    for column in ("Runner", "Node", "Model", "Status"):
        table.add_column(column, overflow="fold")
    for runner_id, status_union in sorted(state.runners.items()):
        node_id, model_id = placed.get(runner_id, ("-", "-"))
        for tag, fields in status_union.items():
            table.add_row(
                runner_id,
                _node_name(state, node_id) if node_id != "-" else "-",
                model_id,
                _runner_status(tag, fields),
            )
    return table


def _runner_status(tag: str, body: Mapping[str, object]) -> Text:
    words = "".join(f" {c.lower()}" if c.isupper() else c for c in tag.removeprefix("Runner"))
    label = words.strip() or tag
    text = Text(label, style=_RUNNER_STYLE.get(label, "yellow"))
    error = body.get("errorMessage")
    if isinstance(error, str) and error:
        text.append(f": {error}")
    return text


def models(listing: ModelList) -> RenderableType:
    """The catalog: installed models first, then by id."""
    if not listing.data:
        return Text("No models in the catalog.", style="dim")
    table = Table()
    table.add_column(
        "Model", overflow="fold", min_width=min(40, max(len(m.id) for m in listing.data))
    )
    table.add_column("Source")
    table.add_column("State")
    table.add_column("Context", justify="right")
    table.add_column("Size", justify="right")
    for model in sorted(listing.data, key=lambda m: (not m.installed, m.id)):
        table.add_row(
            model.id,
            model.catalog_source or "-",
            Text("installed", style="green") if model.installed else Text("not downloaded", "dim"),
            f"{model.context_length:,}" if model.context_length else "-",
            humanize_bytes(model.storage_size_bytes) if model.storage_size_bytes else "-",
        )
    return table


def config(response: ConfigResponse) -> RenderableType:
    """The config file as the dotted keys `skulk config set` takes, then effective values."""
    settings = Table(
        "Key", "Value", title=f"Config: {response.path or 'skulk.yaml'}", title_justify="left"
    )
    for key, value in flatten(response.config):
        settings.add_row(key, format_value(value))
    if not response.effective:
        return settings
    effective = Table("Key", "Value", title="In effect on this node", title_justify="left")
    for key, value in flatten(response.effective):
        effective.add_row(key, format_value(value))
    return Group(settings, effective)


def flatten(document: Mapping[str, object], prefix: str = "") -> Iterator[tuple[str, object]]:
    """Nested sections as ``(dotted.key, value)`` pairs, in document order."""
    for key, value in document.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flatten(value, f"{path}.")
        else:
            yield path, value


def config_change(key: str, old: object, new: object, *, existed: bool) -> Text:
    """What `skulk config set` changed; secrets are named, never shown."""
    if key in SECRET_KEYS:
        return Text.assemble("Set ", (key, "bold"), " (value hidden).")
    text = Text.assemble("Set ", (key, "bold"), " to ", (format_value(new), "bold green"))
    if existed:
        text.append(f" (was {format_value(old)})")
    return text
