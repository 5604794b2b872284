"""`skulk video ...` and `skulk music ...`: asynchronous media jobs on a node.

`create` submits a job and, with `--wait` or `-o`, follows it with a progress bar on
stderr (the node's own percent and phase) until it settles, then writes the content
through a temp file renamed into place. `status`, `download` and `cancel` act on a job
id; jobs belong to the node that accepted them, so use the same `--api-url`. `--json`
prints the node's job object. A job that ends failed or cancelled exits 1.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import IO, Annotated, Final

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from skulk_cli import console
from skulk_cli.client import SkulkClient
from skulk_cli.client_media import Family
from skulk_cli.completion import complete_model_id
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, node_client
from skulk_cli.node_http import JsonObject
from skulk_cli.render_media import job_table, progress_line
from skulk_host.files import atomic_write

POLL_SECONDS: Final = 0.5
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})

video_app = typer.Typer(help="Video jobs: create, follow, download and cancel renders.")
music_app = typer.Typer(help="Music jobs: create, follow, download and cancel pieces.")

ModelArg = Annotated[
    str,
    typer.Argument(metavar="MODEL", help="A placed model's id.", autocompletion=complete_model_id),
]
PromptArg = Annotated[str, typer.Argument(metavar="PROMPT", help="What to make.")]
JobArg = Annotated[str, typer.Argument(metavar="JOB_ID", help="The job's id.")]
OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output", "-o", help="Write the content here (waits for the job).", dir_okay=False
    ),
]
WaitOpt = Annotated[bool, typer.Option("--wait", help="Follow the job until it settles.")]
SeedOpt = Annotated[int | None, typer.Option("--seed", min=0, help="Make the job reproducible.")]


def _write(target: Path, content: bytes) -> None:
    """The file, whole or not at all, with a shell redirection's permissions."""
    umask = os.umask(0)
    os.umask(umask)
    atomic_write(target, content, mode=0o666 & ~umask)


def _follow(client: SkulkClient, family: Family, job: JsonObject, *, quiet: bool) -> JsonObject:
    """Poll until the job settles, showing its percent and phase on a terminal."""
    stderr = Console(stderr=True, highlight=False)
    job_id = str(job["id"])
    if quiet or not stderr.is_terminal:
        while str(job.get("status")) not in TERMINAL:
            time.sleep(POLL_SECONDS)
            job = client.job(family, job_id)
        return job
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task(progress_line(job), total=100)
        while str(job.get("status")) not in TERMINAL:
            time.sleep(POLL_SECONDS)
            job = client.job(family, job_id)
            progress = job.get("progress")
            bar.update(
                task,
                completed=progress if isinstance(progress, int) else 0,
                description=progress_line(job),
            )
    return job


def _finish(
    cli: CliContext,
    client: SkulkClient,
    family: Family,
    job: JsonObject,
    *,
    output: Path | None,
    as_json: bool,
) -> None:
    if output is not None and job.get("status") == "completed":
        content = client.job_content(family, str(job["id"]))
        _write(output, content)
        if not as_json:
            console.note(
                Text.assemble(
                    ("Wrote ", "bold"), (str(output), "cyan"), f" ({len(content):,} bytes)"
                )
            )
    if as_json:
        console.emit_json(job)
    else:
        console.show(job_table(job))
    if job.get("status") in ("failed", "cancelled"):
        raise typer.Exit(EXIT_REFUSED)


def _create(
    ctx: typer.Context,
    family: Family,
    body: JsonObject,
    files: dict[str, tuple[str, bytes | IO[bytes]]],
    *,
    wait: bool,
    output: Path | None,
    as_json: bool,
) -> None:
    cli = CliContext.of(ctx)
    wanted_json = cli.wants_json(as_json)
    with node_client(cli) as client:
        job = client.create_job(family, body, dict(files))
        if wait or output is not None:
            job = _follow(client, family, job, quiet=wanted_json)
        _finish(cli, client, family, job, output=output, as_json=wanted_json)


def _read(path: Path | None) -> tuple[str, bytes | IO[bytes]] | None:
    return None if path is None else (path.name, path.read_bytes())


@video_app.command("create")
def video_create(
    ctx: typer.Context,
    model: ModelArg,
    prompt: PromptArg,
    *,
    seconds: Annotated[int | None, typer.Option("--seconds", min=1, help="Clip length.")] = None,
    size: Annotated[str | None, typer.Option("--size", help="WIDTHxHEIGHT.")] = None,
    steps: Annotated[int | None, typer.Option("--steps", min=1, help="Sampling steps.")] = None,
    seed: SeedOpt = None,
    no_audio: Annotated[bool, typer.Option("--no-audio", help="Render without sound.")] = False,
    first_frame: Annotated[
        Path | None,
        typer.Option("--first-frame", exists=True, dir_okay=False, help="Keyframe image."),
    ] = None,
    last_frame: Annotated[
        Path | None,
        typer.Option("--last-frame", exists=True, dir_okay=False, help="Keyframe image."),
    ] = None,
    wait: WaitOpt = False,
    output: OutputOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Render a clip from PROMPT (and keyframes) with a placed video model."""
    body: JsonObject = {"model": model, "prompt": prompt}
    for name, value in (("seconds", seconds), ("size", size), ("steps", steps), ("seed", seed)):
        if value is not None:
            body[name] = value
    if no_audio:
        body["audio"] = False
    files = {
        name: part
        for name, part in (("first_frame", _read(first_frame)), ("last_frame", _read(last_frame)))
        if part is not None
    }
    _create(ctx, "videos", body, files, wait=wait, output=output, as_json=as_json)


@music_app.command("create")
def music_create(
    ctx: typer.Context,
    model: ModelArg,
    prompt: PromptArg,
    *,
    seconds: Annotated[int, typer.Option("--seconds", min=1, max=120, help="Length, 1 to 120.")],
    lyrics: Annotated[
        str | None, typer.Option("--lyrics", help="Lyrics, where the model sings.")
    ] = None,
    seed: SeedOpt = None,
    wait: WaitOpt = False,
    output: OutputOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Compose a piece from PROMPT with a placed text-to-music model."""
    body: JsonObject = {"model": model, "prompt": prompt, "seconds": seconds}
    if lyrics is not None:
        body["lyrics"] = lyrics
    if seed is not None:
        body["seed"] = seed
    _create(ctx, "music", body, {}, wait=wait, output=output, as_json=as_json)


def _status(ctx: typer.Context, family: Family, job_id: str, *, wait: bool, as_json: bool) -> None:
    cli = CliContext.of(ctx)
    wanted_json = cli.wants_json(as_json)
    with node_client(cli) as client:
        job = client.job(family, job_id)
        if wait:
            job = _follow(client, family, job, quiet=wanted_json)
        if wanted_json:
            console.emit_json(job)
        else:
            console.show(job_table(job))


def _download(
    ctx: typer.Context, family: Family, job_id: str, output: Path, variant: str | None
) -> None:
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        content = client.job_content(family, job_id, variant)
    _write(output, content)
    console.show(
        Text.assemble(("Wrote ", "bold"), (str(output), "cyan"), f" ({len(content):,} bytes)")
    )


def _cancel(ctx: typer.Context, family: Family, job_id: str, *, as_json: bool) -> None:
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        job = client.cancel_job(family, job_id)
    if cli.wants_json(as_json):
        console.emit_json(job)
    else:
        console.show(job_table(job))


@video_app.command("status")
def video_status(
    ctx: typer.Context, job_id: JobArg, *, wait: WaitOpt = False, as_json: JsonFlag = False
) -> None:
    """Show a video job (with `--wait`, follow it until it settles)."""
    _status(ctx, "videos", job_id, wait=wait, as_json=as_json)


@music_app.command("status")
def music_status(
    ctx: typer.Context, job_id: JobArg, *, wait: WaitOpt = False, as_json: JsonFlag = False
) -> None:
    """Show a music job (with `--wait`, follow it until it settles)."""
    _status(ctx, "music", job_id, wait=wait, as_json=as_json)


@video_app.command("download")
def video_download(
    ctx: typer.Context,
    job_id: JobArg,
    *,
    output: Annotated[
        Path, typer.Option("--output", "-o", dir_okay=False, help="Where to write it.")
    ],
    thumbnail: Annotated[
        bool, typer.Option("--thumbnail", help="The JPEG thumbnail instead.")
    ] = False,
) -> None:
    """Download a completed video job's MP4 (or its thumbnail)."""
    _download(ctx, "videos", job_id, output, "thumbnail" if thumbnail else None)


@music_app.command("download")
def music_download(
    ctx: typer.Context,
    job_id: JobArg,
    *,
    output: Annotated[
        Path, typer.Option("--output", "-o", dir_okay=False, help="Where to write it.")
    ],
) -> None:
    """Download a completed music job's WAV."""
    _download(ctx, "music", job_id, output, None)


@video_app.command("cancel")
def video_cancel(ctx: typer.Context, job_id: JobArg, *, as_json: JsonFlag = False) -> None:
    """Cancel a queued or running video job (a finished one is shown unchanged)."""
    _cancel(ctx, "videos", job_id, as_json=as_json)


@music_app.command("cancel")
def music_cancel(ctx: typer.Context, job_id: JobArg, *, as_json: JsonFlag = False) -> None:
    """Cancel a queued or running music job (a finished one is shown unchanged)."""
    _cancel(ctx, "music", job_id, as_json=as_json)
