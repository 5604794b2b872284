"""Pure renderers: views in, rich renderables out. No I/O happens here."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from skulk_cli.short_ids import IdShortener
from skulk_cli.views import (
    ClusterState,
    DeleteResponse,
    InstanceBody,
    InstanceDetail,
    ModelList,
    NodeIdentity,
    PlaceResponse,
    Preview,
    PreviewList,
    Shard,
    TaggedRunnerStatus,
    untag,
)

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


def status(identity: NodeIdentity, state: ClusterState, *, wide: bool = False) -> RenderableType:
    """This node, every node's memory and health, the placed instances and their runners.

    Ids are shortened to fit 80 columns (unique prefixes, see :mod:`short_ids`);
    ``wide`` shows them whole."""
    ids = IdShortener([*state.instances, *state.runners], wide=wide)
    this = state.node_identities.get(identity.node_id)
    name = (this.friendly_name if this else None) or identity.hostname or identity.node_id
    header = Text.assemble(("Node ", "bold"), (name, "bold cyan"), f"  {identity.node_id}")
    if identity.hostname or identity.ip_address:
        header.append(f"  ({', '.join(p for p in (identity.hostname, identity.ip_address) if p)})")
    parts: list[RenderableType] = [
        header,
        _cluster_line(state),
        _nodes_table(identity.node_id, state, wide=wide),
    ]
    parts.extend(_health_reasons(state))
    parts.append(_instances_table(state, ids))
    if state.runners:
        parts.append(_runners_table(state, ids))
    return Group(*parts)


def _node_name(state: ClusterState, node_id: str) -> str:
    info = state.node_identities.get(node_id)
    return (info.friendly_name if info else None) or short_id(node_id)


def _cluster_line(state: ClusterState) -> Text:
    members = len(state.topology.nodes)
    if state.master_node_id is None:
        return Text(f"Cluster of {members} node(s); no master elected yet", style="yellow")
    return Text.assemble(
        f"Cluster of {members} node(s); master ",
        (_node_name(state, state.master_node_id), "bold"),
        f" (term {state.election_term})",
    )


def _nodes_table(this_node: str, state: ClusterState, *, wide: bool = False) -> Table:
    nodes = (
        set(state.node_memory)
        | set(state.node_identities)
        | set(state.node_health)
        | set(state.topology.nodes)
    )
    table = Table(title="Nodes", title_justify="left", caption="* this node")
    table.add_column("Node", no_wrap=True)
    table.add_column("ID", no_wrap=not wide, overflow="fold")
    table.add_column("Role", no_wrap=True)
    table.add_column("Memory free / total", no_wrap=True)
    table.add_column("Version")
    table.add_column("Health")
    for node_id in sorted(nodes, key=lambda n: (n != this_node, n)):
        info = state.node_identities.get(node_id)
        memory = state.node_memory.get(node_id)
        health = state.node_health.get(node_id)
        level = health.level if health else "unknown"
        name = (info.friendly_name if info else None) or "-"
        role = "master" if node_id == state.master_node_id else "follower"
        if node_id not in state.topology.nodes:
            role = "not a member"
        table.add_row(
            f"{name} *" if node_id == this_node else name,
            node_id if wide else short_id(node_id),
            role,
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


def _instances_table(state: ClusterState, ids: IdShortener) -> RenderableType:
    if not state.instances:
        return Text("No instances placed.", style="dim")
    table = Table(title="Instances", title_justify="left")
    table.add_column("Instance", no_wrap=True)
    for column in ("Model", "Kind", "Nodes", "Context"):
        table.add_column(column, overflow="fold")
    for instance_id, tagged in sorted(state.instances.items()):
        for kind, body in tagged.items():
            assignments = body.shard_assignments
            table.add_row(
                ids(instance_id),
                assignments.model_id,
                kind.removesuffix("Instance"),
                ", ".join(_node_name(state, n) for n in sorted(assignments.node_to_runner)),
                f"{body.context_token_limit:,}" if body.context_token_limit else "-",
            )
    return table


def _runners_table(state: ClusterState, ids: IdShortener) -> Table:
    placed: dict[str, tuple[str, str]] = {}
    for tagged in state.instances.values():
        for body in tagged.values():
            for node_id, runner_id in body.shard_assignments.node_to_runner.items():
                placed[runner_id] = (node_id, body.shard_assignments.model_id)
    table = Table(title="Runners", title_justify="left")
    table.add_column("Runner", no_wrap=True)
    for column in ("Node", "Model", "Status"):
        table.add_column(column, overflow="fold")
    for runner_id, status_union in sorted(state.runners.items()):
        node_id, model_id = placed.get(runner_id, ("-", "-"))
        for tag, fields in status_union.items():
            table.add_row(
                ids(runner_id),
                _node_name(state, node_id) if node_id != "-" else "-",
                model_id,
                _runner_status(tag, fields),
            )
    return table


def _runner_status(tag: str, body: Mapping[str, object]) -> Text:
    words = "".join(f" {c.lower()}" if c.isupper() else c for c in tag.removeprefix("Runner"))
    label = words.strip() or tag
    text = Text(label, style=_RUNNER_STYLE.get(label, "yellow"))
    progress = body.get("progress")
    if isinstance(progress, int | float) and not isinstance(progress, bool):
        text.append(f" {progress:.0%}")
    error = body.get("errorMessage")
    if isinstance(error, str) and error:
        text.append(f": {error}")
    return text


def _status_of(state: ClusterState, runner_id: str) -> Text:
    found = untag(state.runners.get(runner_id, {}))
    return _runner_status(*found) if found else Text("starting", style="yellow")


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


# --- placement ----------------------------------------------------------------------


def _names(state: ClusterState | None, node_id: str) -> str:
    return (state.node_name(node_id) if state else None) or short_id(node_id)


def _tokens(count: int | None) -> str:
    return f"{count:,}" if count else "-"


def shard_layers(shard: Mapping[str, Shard]) -> str:
    """What one runner holds: ``0-8 (9 of 18)`` for a pipeline stage."""
    found = untag(shard)
    if found is None:
        return "-"
    kind, body = found
    if body.start_layer is None or body.end_layer is None:
        return "memory donor" if kind.startswith("RpcDonor") else "-"
    count = body.end_layer - body.start_layer
    of = f" of {body.n_layers}" if body.n_layers else ""
    if kind.startswith("Tensor"):
        return f"{count}{of}, 1/{body.world_size} each"
    return f"{body.start_layer}-{body.end_layer - 1} ({count}{of})"


def _nodes_by_rank(body: InstanceBody) -> list[tuple[str, str, Mapping[str, Shard]]]:
    """``(node, runner, shard)`` in device-rank order."""
    assignments = body.shard_assignments
    rows = [
        (node_id, runner_id, assignments.runner_to_shard.get(runner_id, {}))
        for node_id, runner_id in assignments.node_to_runner.items()
    ]

    def rank(row: tuple[str, str, Mapping[str, Shard]]) -> tuple[int, str]:
        found = untag(row[2])
        return (found[1].device_rank if found else 0, row[0])

    return sorted(rows, key=rank)


_RESERVED_MARK = " *"


def _kind(preview: Preview) -> Text:
    text = Text(f"{preview.sharding} / {preview.instance_meta}")
    if preview.alternative:
        text.append("\nalternative", style="dim")
    return text


def previews(
    listing: PreviewList, state: ClusterState | None, context_tokens: int | None = None
) -> RenderableType:
    """Every placement the node would make, with layers, memory and context; then refusals.

    With ``context_tokens``, a column says what that window's KV cache costs.
    """
    valid = [p for p in listing.previews if p.valid]
    refused = [p for p in listing.previews if not p.valid]
    if not listing.previews:
        return Text("No placements previewed.", style="dim")
    parts: list[RenderableType] = []
    if valid:
        model = valid[0].model_id
        reserved = any(p.reserves_context_at_load for p in valid)
        table = Table(
            title=f"Placements for {model}" if model else None,
            title_justify="left",
            caption=f"{_RESERVED_MARK.strip()} the engine reserves this window's memory at load"
            if reserved
            else None,
            caption_justify="left",
        )
        table.add_column("Sharding / meta", no_wrap=True)
        table.add_column("Nodes", no_wrap=True)
        table.add_column("Layers", no_wrap=True)
        table.add_column("Memory", justify="right", no_wrap=True)
        table.add_column("Max context", justify="right")
        table.add_column("Default context", justify="right")
        if context_tokens is not None:
            table.add_column(f"KV for {context_tokens:,}", justify="right", no_wrap=True)
        for preview in valid:
            table.add_row(*_preview_cells(preview, state, context_tokens))
        parts.append(table)
    else:
        parts.append(Text("No valid placement.", style="bold red"))
    for preview in refused:
        where = f" on {preview.nodes} nodes" if preview.nodes > 1 else ""
        line = Text.assemble(
            ("not possible ", "red"),
            (f"{preview.sharding} / {preview.instance_meta}{where}: ", "bold"),
        )
        line.append(preview.error or "no placement")
        if preview.error_code:
            line.append(f" ({preview.error_code})", style="dim")
        parts.append(line)
    return Group(*parts)


def _preview_cells(
    preview: Preview, state: ClusterState | None, context_tokens: int | None
) -> list[RenderableType]:
    body = preview.body
    rows = _nodes_by_rank(body) if body else []
    cells: list[RenderableType] = [
        _kind(preview),
        "\n".join(_names(state, node) for node, _, _ in rows),
        "\n".join(shard_layers(shard) for _, _, shard in rows),
        "\n".join(
            humanize_bytes(preview.memory_delta_by_node[node])
            if node in preview.memory_delta_by_node
            else "-"
            for node, _, _ in rows
        ),
        _tokens(preview.max_context_tokens),
        _tokens(preview.default_context_tokens)
        + (_RESERVED_MARK if preview.reserves_context_at_load else ""),
    ]
    if context_tokens is not None:
        cells.append(_kv_cost(preview, context_tokens))
    return cells


def _kv_cost(preview: Preview, context_tokens: int) -> Text:
    if preview.max_context_tokens is not None and context_tokens > preview.max_context_tokens:
        return Text("too large", style="red")
    if preview.kv_bytes_per_token is None:
        return Text("unknown", style="dim")
    return Text(humanize_bytes(preview.kv_bytes_per_token * context_tokens))


def chosen_preview(
    preview: Preview, state: ClusterState | None, context_tokens: int | None = None
) -> RenderableType:
    """The preview `skulk place` expects the node to pick, before it asks."""
    heading = Text.assemble(
        "Placing ",
        (preview.model_id, "bold"),
        f": {preview.sharding} / {preview.instance_meta}",
    )
    table = Table()
    for column in ("Node", "Layers", "Memory"):
        table.add_column(column, no_wrap=True)
    body = preview.body
    for node, _, shard in _nodes_by_rank(body) if body else []:
        delta = preview.memory_delta_by_node.get(node)
        table.add_row(
            _names(state, node), shard_layers(shard), humanize_bytes(delta) if delta else "-"
        )
    window = context_tokens or preview.default_context_tokens
    context = Text.assemble(
        "Context ",
        (_tokens(window), "bold"),
        f" tokens (up to {_tokens(preview.max_context_tokens)})",
    )
    return Group(heading, table, context)


def placement_progress(
    model_id: str, instance_id: str, body: InstanceBody | None, state: ClusterState
) -> Text:
    """One line: where the new instance's runners (and any model download) have got to."""
    if body is None:
        return Text.assemble(f"Waiting for instance {instance_id} of ", (model_id, "bold"), "…")
    text = Text.assemble("Starting ", (model_id, "bold"), ": ")
    rows = _nodes_by_rank(body)
    for index, (node, runner, _) in enumerate(rows):
        if index:
            text.append(", ")
        text.append(f"{_names(state, node)} ")
        text.append_text(_status_of(state, runner))
        download = _download(state, node, model_id)
        if download is not None:
            text.append(f" ({download})", style="dim")
    return text


def _download(state: ClusterState, node_id: str, model_id: str) -> str | None:
    """The node's own transfer of the model, else the store's (a placement on a node
    the store serves waits for the store's copy, then stages it)."""
    sources = [(node_id, "downloading")]
    sources += [(host, "store downloading") for host in state.store_hosts if host != node_id]
    for source, doing in sources:
        for progress in state.downloads.get(source, ()):
            done, total = progress.downloaded_bytes, progress.total_bytes
            if progress.model_id == model_id and 0 < done < total:
                return f"{doing} {humanize_bytes(done)} / {humanize_bytes(total)}"
    return None


def placed(place: PlaceResponse, body: InstanceBody, state: ClusterState) -> Text:
    """`skulk place` succeeded: the instance id, where it runs, its window."""
    nodes = ", ".join(_names(state, node) for node, _, _ in _nodes_by_rank(body))
    text = Text.assemble(
        ("Ready: ", "bold green"),
        (place.model_id or body.shard_assignments.model_id, "bold"),
        " as instance ",
        (place.instance_id, "bold cyan"),
        f" on {nodes}",
    )
    if body.context_token_limit:
        text.append(f" (context {body.context_token_limit:,} tokens)")
    return text


def place_accepted(place: PlaceResponse) -> Text:
    """`skulk place --no-wait`: what was accepted, and how to follow it."""
    return Text.assemble(
        "Placing ",
        (place.model_id, "bold"),
        " as instance ",
        (place.instance_id, "bold cyan"),
        ". Follow it with `skulk instances show ",
        place.instance_id,
        "`.",
    )


# --- instances ----------------------------------------------------------------------

_RECENT_FAILURES = 5


def instances(state: ClusterState, *, wide: bool = False) -> RenderableType:
    """Every placed instance with its runners' statuses; then the latest failures.
    Instance ids are unique prefixes (80 columns; any command takes one), whole when
    ``wide``."""
    ids = IdShortener(state.instances, wide=wide)
    parts: list[RenderableType] = []
    if not state.instances:
        parts.append(Text("No instances placed.", style="dim"))
    else:
        table = Table()
        for column in ("Instance", "Model", "Kind", "Runners", "Context"):
            table.add_column(column, overflow="fold")
        for instance_id, tagged in sorted(state.instances.items()):
            found = untag(tagged)
            if found is None:
                continue
            kind, body = found
            runners = Text()
            for index, (node, runner, _) in enumerate(_nodes_by_rank(body)):
                if index:
                    runners.append("\n")
                runners.append(f"{_names(state, node)}: ")
                runners.append_text(_status_of(state, runner))
            table.add_row(
                ids(instance_id),
                body.shard_assignments.model_id,
                kind.removesuffix("Instance"),
                runners,
                _tokens(body.context_token_limit),
            )
        parts.append(table)
    failures = state.instance_failures[:_RECENT_FAILURES]
    if failures:
        parts.append(Text("Recent failures", style="bold"))
    for failure in failures:
        parts.append(
            Text.assemble(
                (f"{failure.instance_id} ", "red"),
                f"{failure.model_id}: {failure.error_message or failure.error_code}",
                (f" ({failure.error_code})" if failure.error_code else "", "dim"),
            )
        )
    return Group(*parts)


def instance(detail: InstanceDetail, state: ClusterState) -> RenderableType:
    """One instance: model, kind, window, and each node's runner, layers and status.

    Runner statuses come from the instance's own answer; ``state`` names the nodes.
    """
    kind, body = detail.kind, detail.body
    header = Text.assemble(
        ("Instance ", "bold"),
        (body.instance_id, "bold cyan"),
        "  ",
        (body.shard_assignments.model_id, "bold"),
    )
    if kind:
        header.append(f"  {kind.removesuffix('Instance')}")
    header.append(f"  context {_tokens(body.context_token_limit)}")
    table = Table()
    for column in ("Node", "Runner", "Layers", "Status"):
        table.add_column(column, overflow="fold")
    for node, runner, shard in _nodes_by_rank(body):
        found = untag(detail.runners.get(runner, {}))
        status = _runner_status(*found) if found else Text("starting", style="yellow")
        table.add_row(_names(state, node), runner, shard_layers(shard), status)
    return Group(header, table)


def instance_deleted(response: DeleteResponse) -> Text:
    return Text.assemble(
        "Removing instance ",
        (response.instance_id, "bold cyan"),
        ". Its runners stop shortly; `skulk instances list` shows when it is gone.",
    )


def runner_failure(tagged: TaggedRunnerStatus) -> str | None:
    """The error of a failed runner, None for any other status."""
    found = untag(tagged)
    if found is None or found[0] != "RunnerFailed":
        return None
    message = found[1].get("errorMessage")
    return message if isinstance(message, str) and message else "the runner failed"
