"""Pure renderers for generations: the chat banner and summary, and the bench table."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import fmean

from rich.table import Table
from rich.text import Text

from skulk_cli.views import BenchResult, GenerationStats
from skulk_cli.wire_formats import Finish

NOT_MEASURABLE = "not measurable on this node"


def chat_banner(model_id: str, *, continues_text: bool = False) -> Text:
    return Text.assemble(
        "Chatting with ",
        (model_id, "bold"),
        " (a base model: it continues the conversation's text)" if continues_text else "",
        ". Ctrl-C stops a reply; /exit or Ctrl-D leaves.",
        style="dim",
    )


def reply_summary(finish: Finish) -> Text:
    """``finish: stop; 12 tokens, 48.1 tokens/s; prompt 7 tokens at 310.5/s``.

    The reason is in OpenAI's words whatever the format, with the format's own in
    parentheses where it differs, so every format can be checked against the others.
    """
    reason = finish.reason
    if finish.native_reason != finish.reason:
        reason += f" ({finish.native_reason})"
    parts = [f"finish: {reason}"]
    if finish.completion_tokens is not None:
        output = f"{finish.completion_tokens} tokens"
        if finish.generation_tps:
            output += f", {finish.generation_tps:.1f} tokens/s"
        parts.append(output)
    if finish.prompt_tokens is not None:
        prompt = f"prompt {finish.prompt_tokens} tokens"
        if finish.prompt_tps:
            prompt += f" at {finish.prompt_tps:.1f}/s"
        parts.append(prompt)
    return Text("; ".join(parts), style="dim")


# --- bench --------------------------------------------------------------------------

_Field = Callable[[GenerationStats], float | int | None]
# (heading, the figure, decimals shown): one column each, in generation order.
_STATS_COLUMNS: tuple[tuple[str, _Field, int], ...] = (
    ("Prompt tokens", lambda s: s.prompt_tokens, 0),
    ("Prompt tok/s", lambda s: s.prompt_tps, 1),
    ("First token ms", lambda s: s.time_to_first_token_ms, 1),
    ("Gen tokens", lambda s: s.generation_tokens, 0),
    ("Gen tok/s", lambda s: s.generation_tps, 1),
    ("Batch", lambda s: s.serving_batches, 0),
    ("In flight", lambda s: s.in_flight_at_admission, 0),
)


def _figure(value: float | None, decimals: int) -> str:
    if value is None:
        return "-"
    if decimals == 0 and float(value).is_integer():
        return f"{int(value):,}"
    if abs(value) >= 1000:
        # A decimal says nothing at this size, and would not fit 80 columns.
        return f"{round(value):,}"
    return f"{value:,.{max(decimals, 1)}f}"


def _mean(values: Sequence[float | int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return fmean(known) if known else None


def _watts(result: BenchResult) -> float | None:
    return result.power_usage.total_watts if result.power_usage else None


def bench(model: str, results: Sequence[BenchResult]) -> Table:
    """One row per run of ``skulk bench``, and their mean when there are several."""
    table = Table(title=f"Bench {model}", title_justify="left")
    table.add_column("Run", no_wrap=True)
    for heading, _, _ in _STATS_COLUMNS:
        table.add_column(heading, justify="right")
    table.add_column("Power W", justify="right")
    for index, result in enumerate(results, start=1):
        stats = result.generation_stats
        watts = _watts(result)
        table.add_row(
            str(index),
            *(_figure(field(stats), decimals) for _, field, decimals in _STATS_COLUMNS),
            _figure(watts, 1) if watts is not None else "n/a",
        )
    if len(results) > 1:
        watts_mean = _mean([_watts(r) for r in results])
        table.add_section()
        table.add_row(
            "mean",
            *(
                _figure(_mean([field(r.generation_stats) for r in results]), decimals)
                for _, field, decimals in _STATS_COLUMNS
            ),
            _figure(watts_mean, 1) if watts_mean is not None else "n/a",
            style="bold",
        )
    notes: list[str] = []
    if any(_watts(r) is None for r in results):
        notes.append(f"Power n/a: {NOT_MEASURABLE}.")
    sources = sorted(
        {
            source
            for r in results
            if r.power_usage
            for node in r.power_usage.nodes.values()
            for source in node.sources
        }
    )
    if sources:
        notes.append(f"Power from {', '.join(sources)}.")
    if notes:
        table.caption = " ".join(notes)
        table.caption_justify = "left"
    return table
