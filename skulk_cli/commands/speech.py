"""`skulk say`, `skulk transcribe` and `skulk voices`: speech through a node's API.

`say` writes the audio to a file (through a temp file renamed into place, so an
interrupted write never leaves half a file under the name); its format follows the
file's extension unless `--format` names one. `transcribe` uploads a local audio file
(at most 25 MiB) and prints the transcript in the format asked for (JSON with
`--json`). On a terminal, a long file's upload shows a progress bar on stderr (the
bytes sent are the honest measure a client has; the node's work follows as a status
line); stdout carries only the transcript.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, Annotated, Final

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from skulk_cli import console
from skulk_cli.client import SkulkApiError, SkulkClient
from skulk_cli.completion import complete_model_id
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, node_client
from skulk_host.files import atomic_write

MAX_UPLOAD_BYTES: Final = 25 * 1024 * 1024
SPEECH_FORMATS: Final = ("mp3", "wav", "flac", "ogg", "opus", "pcm")
TRANSCRIPT_FORMATS: Final = ("text", "json", "verbose_json", "srt", "vtt")
LONG_FILE_BYTES: Final = 1024 * 1024
"""Files at least this large show an upload progress bar (on a terminal)."""

ModelArg = Annotated[
    str,
    typer.Argument(
        metavar="MODEL", help="A placed speech model's id.", autocompletion=complete_model_id
    ),
]


DEFAULT_SPEECH_FORMAT: Final = "wav"


def default_output(directory: Path, fmt: str, now: datetime | None = None) -> Path:
    """``say-20260101-120000.wav`` in ``directory``; ``-2``, ``-3``... when taken."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    candidate = directory / f"say-{stamp}.{fmt}"
    number = 2
    while candidate.exists():
        candidate = directory / f"say-{stamp}-{number}.{fmt}"
        number += 1
    return candidate


def _format_for(output: Path, chosen: str | None) -> str:
    if chosen is not None:
        if chosen not in SPEECH_FORMATS:
            raise typer.BadParameter(
                f"must be one of {', '.join(SPEECH_FORMATS)}", param_hint="'--format'"
            )
        return chosen
    suffix = output.suffix.lower().lstrip(".")
    return suffix if suffix in SPEECH_FORMATS else "wav"


def _write_atomically(target: Path, content: bytes) -> None:
    """The audio file, whole or not at all, with the permissions a shell redirection
    would give it (0666 less the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    atomic_write(target, content, mode=0o666 & ~umask)


def say(
    ctx: typer.Context,
    model: ModelArg,
    text: Annotated[str, typer.Argument(metavar="TEXT", help="What to say.")],
    *,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Where to write the audio (default: a new say-DATE-TIME file here).",
            dir_okay=False,
        ),
    ] = None,
    voice: Annotated[
        str | None, typer.Option("--voice", help="A voice `skulk voices` lists.")
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option("--format", help="mp3, wav, flac, ogg, opus or pcm (default: from -o)."),
    ] = None,
    speed: Annotated[float | None, typer.Option("--speed", help="Speaking speed, > 0.")] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", min=0, help="Make the audio reproducible.")
    ] = None,
) -> None:
    """Synthesize TEXT with a placed text-to-speech model and write it to a file.

    Without `-o` the audio goes to a new `say-DATE-TIME.wav` (or `--format`'s
    extension) in the current directory, never over an existing file; the command
    prints where.
    """
    cli = CliContext.of(ctx)
    if output is None:
        output = default_output(Path.cwd(), fmt or DEFAULT_SPEECH_FORMAT)
    response_format = _format_for(output, fmt)
    body: dict[str, object] = {"model": model, "input": text, "response_format": response_format}
    if voice is not None:
        body["voice"] = voice
    if speed is not None:
        body["speed"] = speed
    if seed is not None:
        body["seed"] = seed
    with node_client(cli) as client, console.progress(Text(f"Synthesizing with {model}…")):
        audio, media_type = client.speech(body)
    _write_atomically(output, audio)
    console.show(
        Text.assemble(
            ("Wrote ", "bold"), (str(output), "cyan"), f" ({len(audio):,} bytes, {media_type})"
        )
    )


class _Counted(io.BufferedReader):
    """The audio file as the HTTP client reads it to send, reporting how far it got."""

    def __init__(self, path: Path, moved: Callable[[int], None]) -> None:
        super().__init__(io.FileIO(path, "rb"))
        self._moved = moved

    def read(self, size: int | None = -1, /) -> bytes:
        chunk = super().read(size)
        self._moved(self.tell())
        return chunk

    def seek(self, offset: int, whence: int = os.SEEK_SET, /) -> int:
        position = super().seek(offset, whence)
        self._moved(position)
        return position


@contextmanager
def _upload(file: Path, size: int, what: Text, model: str, *, quiet: bool) -> Iterator[IO[bytes]]:
    """The file to send. A long one on a terminal shows a bar of the bytes sent, then
    that the node transcribes; anything else shows the one status line (none with
    ``quiet``)."""
    stderr = Console(stderr=True, highlight=False)
    if quiet or size < LONG_FILE_BYTES or not stderr.is_terminal:
        with open(file, "rb") as handle:
            if quiet:
                yield handle
                return
            with console.progress(what):
                yield handle
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task(f"Uploading {file.name}", total=size)
        working = f"Transcribing with {model}…"

        def moved(position: int) -> None:
            done = min(position, size)
            bar.update(task, completed=done, description=working if done >= size else None)

        with _Counted(file, moved) as handle:
            yield handle


def transcribe(
    ctx: typer.Context,
    model: ModelArg,
    file: Annotated[
        Path,
        typer.Argument(
            metavar="FILE", help="A local audio file.", exists=True, dir_okay=False, readable=True
        ),
    ],
    *,
    fmt: Annotated[
        str, typer.Option("--format", help="text, json, verbose_json, srt or vtt.")
    ] = "text",
    language: Annotated[
        str | None, typer.Option("--language", help="The spoken language, if known.")
    ] = None,
    translate: Annotated[
        bool, typer.Option("--translate", help="Translate to English instead.")
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """Transcribe a local audio FILE with a placed speech-to-text model."""
    cli = CliContext.of(ctx)
    as_json = cli.wants_json(json_output)
    if as_json and fmt == "text":
        fmt = "json"
    if fmt not in TRANSCRIPT_FORMATS:
        raise typer.BadParameter(
            f"must be one of {', '.join(TRANSCRIPT_FORMATS)}", param_hint="'--format'"
        )
    size = file.stat().st_size
    if size > MAX_UPLOAD_BYTES:
        console.error(f"{file} holds {size:,} bytes; a node accepts at most 25 MiB of audio.")
        raise typer.Exit(EXIT_REFUSED)
    fields = {"model": model, "response_format": fmt}
    if language is not None:
        fields["language"] = language
    path = "/v1/audio/translations" if translate else "/v1/audio/transcriptions"
    what = Text(f"Transcribing {file.name} ({size / 1024**2:.1f} MiB) with {model}…")
    with (
        node_client(cli) as client,
        _upload(file, size, what, model, quiet=as_json) as audio,
    ):
        body, _ = client.transcribe(path, fields, file.name, audio)
    typer.echo(body.rstrip("\n"))


def _tts_models(client: SkulkClient) -> list[str]:
    listed = client.models().get("data")
    models = listed if isinstance(listed, list) else []
    return [
        str(m["id"])
        for m in models
        if isinstance(m, dict) and "TextToSpeech" in (m.get("tasks") or [])
    ]


def no_voices(known: list[str], answered: int) -> Text:
    """Why `skulk voices` lists nothing, and what to do about it."""
    if answered:
        return Text("The placed text-to-speech models declare no voices.")
    if not known:
        return Text.assemble(
            "This node knows no text-to-speech model. ",
            "`skulk models list` shows the catalog; add one with `skulk models add`.",
        )
    return Text.assemble(
        "No text-to-speech model is placed. Place one, then ask again: ",
        (f"skulk place {known[0]}", "bold"),
    )


def voices(
    ctx: typer.Context,
    model: Annotated[
        str | None,
        typer.Argument(metavar="[MODEL]", help="A placed TTS model (default: every one)."),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """List the voices placed text-to-speech models declare."""
    cli = CliContext.of(ctx)
    found: list[dict[str, object]] = []
    known: list[str] = []
    answered = 0
    with node_client(cli) as client:
        known = [model] if model else _tts_models(client)
        for name in known:
            try:
                listed = client.voices(name).get("data")
            except SkulkApiError:
                if model:
                    raise
                continue  # not placed, or it declares no voice listing
            answered += 1
            found.extend(
                v for v in (listed if isinstance(listed, list) else []) if isinstance(v, dict)
            )
    if cli.wants_json(json_output):
        console.emit_json({"object": "list", "data": found})
        return
    if not found:
        console.show(no_voices(known, answered))
        return
    table = Table("Voice", "Name", "Kind", "Languages")
    # The model id is what `skulk say MODEL` takes: whole, never cut at 80 columns.
    table.add_column("Model", no_wrap=True, min_width=max(len(str(v.get("model"))) for v in found))
    for voice in found:
        languages = voice.get("preferred_languages")
        table.add_row(
            str(voice.get("id")),
            str(voice.get("name")),
            str(voice.get("kind")),
            ", ".join(map(str, languages)) if isinstance(languages, list) else "",
            str(voice.get("model")),
        )
    console.show(table)
