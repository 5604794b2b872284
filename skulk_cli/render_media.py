"""Pure renderers for media jobs (video and music): a job's table and its progress line."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from skulk_cli.node_http import JsonObject

_STATUS_STYLE = {
    "queued": "yellow",
    "in_progress": "cyan",
    "completed": "green",
    "failed": "red",
    "cancelled": "magenta",
}


def _text(value: object) -> str:
    return "-" if value is None else str(value)


def job_table(job: JsonObject) -> Table:
    """One job: its status, progress and, once complete, the content's facts."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    status = str(job.get("status"))
    table.add_row("id", _text(job.get("id")))
    table.add_row("model", _text(job.get("model")))
    table.add_row("status", Text(status, style=_STATUS_STYLE.get(status, "")))
    table.add_row("progress", f"{job.get('progress', 0)}%")
    if job.get("stage") is not None:
        table.add_row("stage", _text(job.get("stage")))
    if job.get("mode") is not None:
        table.add_row("mode", _text(job.get("mode")))
    table.add_row("seconds", _text(job.get("seconds")))
    error = job.get("error")
    if isinstance(error, dict):
        table.add_row("error", Text(_text(error.get("message")), style="red"))
    output = job.get("output")
    if isinstance(output, dict):
        for key in (
            "content_type",
            "size_bytes",
            "width",
            "height",
            "frame_count",
            "fps",
            "duration_seconds",
            "sample_rate",
            "channels",
            "video_codec",
            "audio_codec",
            "sha256",
        ):
            if key in output:
                table.add_row(key, _text(output[key]))
    if job.get("expires_at") is not None:
        table.add_row("expires_at", _text(job.get("expires_at")))
    return table


def progress_line(job: JsonObject) -> str:
    """What the progress bar says beside the bar: the status and the render's phase."""
    stage = job.get("stage")
    status = str(job.get("status"))
    return f"{status} ({stage})" if stage and status == "in_progress" else status
