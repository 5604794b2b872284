"""`skulk bench`: how fast a placed model generates on the node, run by run."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from skulk_cli import console, render_generation, views, wire_formats
from skulk_cli.client import JsonObject, SkulkApiError
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, PlacedModelArg, node_client
from skulk_cli.hints import place_hint

# A completion-style opening: base models (the demo model) continue it sensibly,
# and instruction-tuned ones answer it too.
DEFAULT_PROMPT = "Once upon a time, in a village at the edge of a great forest,"
# Small enough that the default run ends in seconds on a small CPU; a steadier
# figure takes more tokens and runs (the docstring says how).
DEFAULT_MAX_TOKENS = 32
DEFAULT_RUNS = 1


def bench(
    ctx: typer.Context,
    model: PlacedModelArg,
    *,
    prompt: Annotated[
        str, typer.Option("--prompt", metavar="TEXT", help="The user message each run sends.")
    ] = DEFAULT_PROMPT,
    max_tokens: Annotated[
        int,
        typer.Option("--max-tokens", metavar="N", min=1, help="Generate at most N tokens a run."),
    ] = DEFAULT_MAX_TOKENS,
    runs: Annotated[
        int,
        typer.Option("--runs", metavar="N", min=1, help="Run N times, one after another."),
    ] = DEFAULT_RUNS,
    json_output: JsonFlag = False,
) -> None:
    """Measure how fast a placed model generates on the node.

    Sends the prompt to the node's `/bench/chat/completions` (greedy, temperature 0)
    and shows what the node measured: prompt and generated tokens and their rates,
    time to first token, serving batches, requests in flight at admission, and the
    average system power where the node can measure it. With `--runs` above 1 the
    runs go one after another and a mean row follows. `--json` prints the node's
    responses as a JSON list, one per run.

    The defaults (one run of 32 tokens) finish in seconds on a small CPU; for a
    steadier figure run longer, e.g. `--runs 5 --max-tokens 256`.
    """
    cli = CliContext.of(ctx)
    body: JsonObject = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    responses: list[JsonObject] = []
    stopped = False
    with node_client(cli) as client:
        try:
            with console.progress(_doing(model, 1, runs)) as line:
                for run in range(1, runs + 1):
                    line.update(_doing(model, run, runs))
                    responses.append(client.bench_chat(body))
                    if wire_formats.error_message(responses[-1]) is not None:
                        break
        except SkulkApiError as exc:
            hint = place_hint(exc, model)
            console.error(exc.message, hint=hint)
            raise typer.Exit(EXIT_REFUSED) from None
        except KeyboardInterrupt:
            # Leaving the request drops the connection, which cancels it on the node.
            stopped = True
    failure = wire_formats.error_message(responses[-1]) if responses else None
    if cli.wants_json(json_output):
        console.emit_json(responses)
    else:
        done = responses[:-1] if failure is not None else responses
        results = [views.parse(r, views.BenchResult, "/bench/chat/completions") for r in done]
        if results:
            console.show(render_generation.bench(model, results))
    if failure is not None:
        console.error(failure)
        raise typer.Exit(EXIT_REFUSED)
    if stopped:
        console.error(f"Stopped after {len(responses)} of {runs} runs.")
        raise typer.Exit(EXIT_REFUSED)


def _doing(model: str, run: int, runs: int) -> Text:
    return Text(f"Benchmarking {model}" + (f": run {run} of {runs}…" if runs > 1 else "…"))
