"""`skulk previews` and `skulk place`: where a model would run, and running it there."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.text import Text

from skulk_cli import console, hints, render, views
from skulk_cli.client import JsonObject, SkulkApiError, SkulkClient
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, node_client
from skulk_cli.instance_ids import placed_instances, short
from skulk_core.state.shards import InstanceMeta, Sharding

# How often `skulk place` reads /state while the runners start.
POLL_SECONDS = 0.5
READY_STATUSES = frozenset({"RunnerReady", "RunnerRunning"})
_INFO_PENDING = "placement_info_pending"
_NO_VALID_PLACEMENT = "no_valid_placement"
MODEL_ALREADY_PLACED = "model_already_placed"


ModelArg = Annotated[
    str,
    typer.Argument(
        metavar="MODEL", help="Model id, as `skulk models list` shows it.", show_default=False
    ),
]
ShardingOpt = Annotated[
    Sharding | None,
    typer.Option(
        "--sharding",
        help="Split layers across nodes (Pipeline) or every layer across nodes (Tensor).",
    ),
]
MinNodesOpt = Annotated[
    int | None,
    typer.Option("--min-nodes", metavar="N", min=1, help="Use at least N nodes."),
]
ContextOpt = Annotated[
    int | None,
    typer.Option(
        "--context-tokens",
        metavar="N",
        min=256,
        max=1_048_576,
        help="Context window to hold, in tokens (default: the node's choice).",
    ),
]
ExcludeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--exclude",
        metavar="NODE",
        help="Node id to leave out; repeat for more.",
        show_default=False,
    ),
]


@dataclass(frozen=True)
class Shape:
    """The placement a user asked for; None leaves the choice to the node."""

    sharding: str | None = None
    instance_meta: str | None = None
    min_nodes: int | None = None

    def matches(self, preview: views.Preview) -> bool:
        # NOTE: the node filters too when asked; filtering here as well keeps the
        # answer right from a node that previews every shape regardless.
        least = self.min_nodes
        return (
            (self.sharding is None or preview.sharding == self.sharding)
            and (self.instance_meta is None or preview.instance_meta == self.instance_meta)
            and (least is None or not preview.nodes or preview.nodes >= least)
        )


def previews(
    ctx: typer.Context,
    model: ModelArg,
    *,
    sharding: ShardingOpt = None,
    min_nodes: MinNodesOpt = None,
    context_tokens: ContextOpt = None,
    exclude: ExcludeOpt = None,
    json_output: JsonFlag = False,
) -> None:
    """Show where the cluster can run a model: nodes, layers, memory and context window.

    Shapes that cannot be placed are listed with the node's reason. Nothing is
    placed; `skulk place` does that.
    """
    cli = CliContext.of(ctx)
    shape = Shape(sharding=sharding.value if sharding else None, min_nodes=min_nodes)
    with node_client(cli) as client:
        raw = client.instance_previews(
            model,
            excluded_nodes=exclude or (),
            sharding=shape.sharding,
            min_nodes=min_nodes,
            context_tokens=context_tokens,
        )
        listing = views.parse(raw, views.PreviewList, "/instance/previews")
        kept = [i for i, p in enumerate(listing.previews) if shape.matches(p)]
        if cli.wants_json(json_output):
            entries = raw.get("previews")
            if isinstance(entries, list) and len(entries) == len(listing.previews):
                raw = {**raw, "previews": [entries[i] for i in kept]}
            console.emit_json(raw)
            return
        # For node names only: previews speak in node ids.
        state = views.parse(client.state(), views.ClusterState, "/state")
    shown = views.PreviewList(previews=tuple(listing.previews[i] for i in kept))
    console.show(render.previews(shown, state, context_tokens))


def place(
    ctx: typer.Context,
    model: ModelArg,
    *,
    sharding: ShardingOpt = None,
    instance_meta: Annotated[
        InstanceMeta | None,
        typer.Option(
            "--instance-meta",
            help="How the nodes talk: MlxRing, MlxJaccl, or LlamaRpc (GGUF memory pooling).",
        ),
    ] = None,
    min_nodes: MinNodesOpt = None,
    context_tokens: ContextOpt = None,
    exclude: ExcludeOpt = None,
    no_wait: Annotated[
        bool,
        typer.Option("--no-wait", help="Return once the node accepts; do not wait for ready."),
    ] = False,
    another: Annotated[
        bool,
        typer.Option(
            "--another",
            help="Start another replica of a model that is already placed (its memory again).",
        ),
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """Place a model on the cluster and wait until it is ready to answer.

    Shows the placement the node's preview expects, asks the node to place the
    model, then follows its runners (download, load, warm-up) until every one is
    ready. A failed runner or a placement the cluster gave up on exits 1 with the
    reason. Options not given are left to the node's planner. A model that is
    already placed is refused (exit 1, naming its instance) unless --another asks
    for a second replica.
    """
    cli = CliContext.of(ctx)
    as_json = cli.wants_json(json_output)
    shape = Shape(
        sharding=sharding.value if sharding else None,
        instance_meta=instance_meta.value if instance_meta else None,
        min_nodes=min_nodes,
    )
    excluded = exclude or []
    with node_client(cli) as client:
        raw_previews = client.instance_previews(
            model,
            excluded_nodes=excluded,
            sharding=shape.sharding,
            instance_meta=shape.instance_meta,
            min_nodes=min_nodes,
            context_tokens=context_tokens,
        )
        listing = views.parse(raw_previews, views.PreviewList, "/instance/previews")
        chosen = choose_preview(listing, shape)
        state = views.parse(client.state(), views.ClusterState, "/state")
        if not another:
            _refuse_if_placed(state, model)
        if chosen is not None and not as_json:
            console.show(render.chosen_preview(listing.previews[chosen], state, context_tokens))
        preview = listing.previews[chosen] if chosen is not None else None
        try:
            raw_place = client.place_instance(
                model,
                # The preview reports the shape the node would actually mint (a GGUF
                # model on two GPU nodes is LlamaRpc); asking for that keeps them in step.
                sharding=shape.sharding or (preview.sharding if preview else Sharding.PIPELINE),
                instance_meta=shape.instance_meta
                or (preview.instance_meta if preview else InstanceMeta.MLX_RING),
                min_nodes=min_nodes or 1,
                excluded_nodes=excluded,
                context_tokens=context_tokens,
                allow_duplicate=another,
            )
        except SkulkApiError as exc:
            if exc.code == MODEL_ALREADY_PLACED:  # placed since the check above
                _refuse_if_placed(views.parse(client.state(), views.ClusterState, "/state"), model)
            message, hint = hints.explain(exc)
            console.error(message, hint=hint or _refusal_hint(exc, model))
            raise typer.Exit(EXIT_REFUSED) from None
        accepted = views.parse(raw_place, views.PlaceResponse, "/place_instance")
        raw_chosen = _raw_preview(raw_previews, chosen)
        if no_wait:
            if as_json:
                console.emit_json({"place": raw_place, "preview": raw_chosen})
            else:
                console.show(render.place_accepted(accepted))
            return
        outcome = follow_placement(client, accepted)
        if as_json:
            console.emit_json(
                {
                    "place": raw_place,
                    "preview": raw_chosen,
                    "instance": outcome.raw_instance,
                    "runners": outcome.raw_runners,
                    "failure": outcome.raw_failure,
                }
            )
        if outcome.error is not None:
            console.error(outcome.error, hint=outcome.hint)
            raise typer.Exit(EXIT_REFUSED)
        if not as_json and outcome.body is not None:
            console.show(render.placed(accepted, outcome.body, outcome.state))


def _refuse_if_placed(state: views.ClusterState, model: str) -> None:
    """Exit 1 with the fix when ``model`` already has an instance."""
    placed = placed_instances(state, model)
    if not placed:
        return
    first = placed[0]
    console.error(
        f"{model} is already placed as instance {', '.join(placed)}.",
        hint=f"It serves requests as it is. To place it differently, remove it first with "
        f"`skulk instances rm {short(first)}`; to run a second copy (its memory again), use "
        f"`skulk place {model} --another`.",
    )
    raise typer.Exit(EXIT_REFUSED)


def choose_preview(listing: views.PreviewList, shape: Shape) -> int | None:
    """The index of the preview the node's planner ranks first for this shape."""
    for index, preview in enumerate(listing.previews):
        if preview.valid and not preview.alternative and shape.matches(preview):
            return index
    return None


def _raw_preview(raw: JsonObject, index: int | None) -> object:
    entries = raw.get("previews")
    if index is None or not isinstance(entries, list):
        return None
    return entries[index]


def _refusal_hint(exc: SkulkApiError, model: str) -> str | None:
    if _INFO_PENDING in (exc.placement_failure, exc.code):
        return "The cluster is still sharing node information; try again in a few seconds."
    if exc.placement_failure == _NO_VALID_PLACEMENT:
        return f"`skulk previews {model}` shows what fits where."
    if exc.status == 404:
        return "`skulk models list` shows the models the cluster knows."
    return None


@dataclass(frozen=True)
class Outcome:
    """How following a placement ended: ready (``error`` None) or failed."""

    state: views.ClusterState
    body: views.InstanceBody | None
    raw_instance: object
    raw_runners: dict[str, object]
    raw_failure: object = None
    error: str | None = None
    hint: str | None = None


def follow_placement(client: SkulkClient, accepted: views.PlaceResponse) -> Outcome:
    """Poll /state until the new instance's runners are all ready, or it fails."""
    instance_id = accepted.instance_id
    seen = False
    waiting = Text(f"Waiting for instance {instance_id}…")
    try:
        with console.progress(waiting) as line:
            while True:
                raw = client.state()
                state = views.parse(raw, views.ClusterState, "/state")
                outcome = _judge(raw, state, instance_id, seen=seen)
                found = views.untag(state.instances.get(instance_id, {}))
                body = found[1] if found else None
                seen = seen or body is not None
                line.update(render.placement_progress(accepted.model_id, instance_id, body, state))
                if outcome is not None:
                    return outcome
                time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        console.error(
            f"Stopped waiting. Instance {instance_id} stays placed.",
            hint=f"Follow it with `skulk instances show {instance_id}`, "
            f"or remove it with `skulk instances rm {instance_id}`.",
        )
        raise typer.Exit(EXIT_REFUSED) from None


def _judge(
    raw: JsonObject, state: views.ClusterState, instance_id: str, *, seen: bool
) -> Outcome | None:
    """The end of the wait, if this state is one; None to keep waiting."""
    raw_instances = raw.get("instances")
    raw_instance = raw_instances.get(instance_id) if isinstance(raw_instances, dict) else None
    found = views.untag(state.instances.get(instance_id, {}))
    if found is None:
        failure = state.failure_of(instance_id)
        if failure is not None:
            raw_failures = raw.get("instanceFailures")
            raw_failure = (
                next(
                    (
                        f
                        for f in raw_failures
                        if isinstance(f, dict) and f.get("instanceId") == instance_id
                    ),
                    None,
                )
                if isinstance(raw_failures, list)
                else None
            )
            return Outcome(
                state,
                None,
                None,
                {},
                raw_failure,
                error=f"Placing {failure.model_id or instance_id} failed: "
                f"{failure.error_message or failure.error_code}",
                hint=f"({failure.error_code})" if failure.error_code else None,
            )
        if seen:
            return Outcome(
                state,
                None,
                None,
                {},
                error=f"Instance {instance_id} was removed before it was ready.",
            )
        return None  # accepted, not yet applied on this node
    _, body = found
    runner_ids = list(body.shard_assignments.node_to_runner.values())
    raw_runners_all = raw.get("runners")
    raw_runners = (
        {r: raw_runners_all.get(r) for r in runner_ids} if isinstance(raw_runners_all, dict) else {}
    )
    for node_id, runner_id in body.shard_assignments.node_to_runner.items():
        error = render.runner_failure(state.runners.get(runner_id, {}))
        if error is not None:
            name = state.node_name(node_id) or node_id
            return Outcome(
                state,
                body,
                raw_instance,
                raw_runners,
                error=f"The runner on {name} failed: {error}",
                hint=f"Remove the instance with `skulk instances rm {instance_id}`.",
            )
    statuses = [views.untag(state.runners.get(r, {})) for r in runner_ids]
    if runner_ids and all(s is not None and s[0] in READY_STATUSES for s in statuses):
        return Outcome(state, body, raw_instance, raw_runners)
    return None
