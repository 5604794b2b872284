"""`skulk image "PROMPT" -o out.png`: images from a placed image model.

The request streams (``stream=true`` with partial images), so a terminal shows a bar
that moves with every preview and finished image; the pictures are written whole or
not at all (temp file, rename), ``out.png``, ``out-2.png``... for ``-n`` above 1, in the
format the file's extension names (png, jpeg/jpg, webp). Without ``--model`` the one
image model the node lists is used. ``--json`` prints what was written, and the seed
that renders the same pictures again.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Annotated, Final

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from skulk_cli import console
from skulk_cli.client import SkulkClient
from skulk_cli.completion import complete_model_id
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, node_client
from skulk_host.files import atomic_write

FORMATS: Final = {"png": "png", "jpg": "jpeg", "jpeg": "jpeg", "webp": "webp"}
SIZES: Final = ("auto", "512x512", "768x768", "1024x768", "768x1024", "1024x1024")
PREVIEWS: Final = 2
"""Partial images asked for per picture: what moves the bar between finished ones."""


def outputs(output: Path, count: int) -> list[Path]:
    """``out.png``, then ``out-2.png``, ``out-3.png``... for more than one image."""
    return [
        output if index == 0 else output.with_name(f"{output.stem}-{index + 1}{output.suffix}")
        for index in range(count)
    ]


def image_model(client: SkulkClient) -> str:
    """The one image model the node lists (refused when there are none or several)."""
    listed = client.models().get("data", [])
    found = [
        str(model["id"])
        for model in (listed if isinstance(listed, list) else [])
        if isinstance(model, dict) and "image" in (model.get("capabilities") or [])
    ]
    if len(found) != 1:
        what = "no image model" if not found else f"{len(found)} image models"
        console.error(
            f"The node lists {what}; name one with --model.",
            "Image models are listed when the node runs with SKULK_ENABLE_IMAGE_MODELS=true.",
        )
        raise typer.Exit(EXIT_REFUSED)
    return found[0]


def image(
    ctx: typer.Context,
    prompt: Annotated[str, typer.Argument(metavar="PROMPT", help="What to draw.")],
    *,
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", help="Where to write the image (.png, .jpg or .webp).", dir_okay=False
        ),
    ] = Path("image.png"),
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m", help="A placed image model.", autocompletion=complete_model_id
        ),
    ] = None,
    count: Annotated[int, typer.Option("--n", "-n", min=1, max=10, help="How many images.")] = 1,
    size: Annotated[str, typer.Option("--size", help=", ".join(SIZES))] = "auto",
    steps: Annotated[
        int | None, typer.Option("--steps", min=1, max=100, help="Sampling steps.")
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", min=0, help="Make the pictures reproducible.")
    ] = None,
    negative: Annotated[
        str | None, typer.Option("--negative", help="What the picture should not show.")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Draw PROMPT with a placed image model and write the picture to a file."""
    cli = CliContext.of(ctx)
    as_json = cli.wants_json(json_output)
    fmt = FORMATS.get(output.suffix.lower().lstrip("."))
    if fmt is None:
        raise typer.BadParameter("must end in .png, .jpg, .jpeg or .webp", param_hint="'-o'")
    advanced: dict[str, object] = {}
    if steps is not None:
        advanced["num_inference_steps"] = steps
    if seed is not None:
        advanced["seed"] = seed
    if negative:
        advanced["negative_prompt"] = negative
    with node_client(cli) as client:
        chosen = model or image_model(client)
        body: dict[str, object] = {
            "model": chosen,
            "prompt": prompt,
            "n": count,
            "size": size,
            "output_format": fmt,
            "stream": True,
            "partial_images": PREVIEWS,
            **({"advanced_params": advanced} if advanced else {}),
        }
        pictures = _render(client, body, count, quiet=as_json)
    written = outputs(output, count)
    umask = os.umask(0)
    os.umask(umask)
    for path, data in zip(written, pictures, strict=True):
        atomic_write(path, data, mode=0o666 & ~umask)
    if as_json:
        console.emit_json({"model": chosen, "files": [str(path) for path in written]})
        return
    for path, data in zip(written, pictures, strict=True):
        console.show(
            Text.assemble(("Wrote ", "bold"), (str(path), "cyan"), f" ({len(data):,} bytes)")
        )


def _render(
    client: SkulkClient, body: dict[str, object], count: int, *, quiet: bool
) -> list[bytes]:
    """Stream the render; the finished pictures in order."""
    finished: dict[int, bytes] = {}
    stderr = Console(stderr=True, highlight=False)
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        disable=quiet or not stderr.is_terminal,
    )
    with bar, client.stream("/v1/images/generations", body, "text/event-stream") as lines:
        task = bar.add_task(f"Drawing with {body['model']}", total=count * (PREVIEWS + 1))
        for line in lines:
            if not line.startswith("data:"):
                continue
            event = json.loads(line[len("data:") :])
            kind = str(event.get("type", ""))
            if kind == "error":
                error = event.get("error") or {}
                console.error(f"The node refused: {error.get('message', 'unknown error')}")
                raise typer.Exit(EXIT_REFUSED)
            if kind.endswith(".partial_image"):
                bar.advance(task)
            elif kind.endswith(".completed"):
                index = int(event.get("image_index", len(finished)))
                finished[index] = base64.b64decode(event["b64_json"])
                done = len(finished) * (PREVIEWS + 1)
                bar.update(task, completed=done)
    if len(finished) != count:
        console.error(lines.interruption or "The node ended the stream before every image.")
        raise typer.Exit(EXIT_REFUSED)
    return [finished[index] for index in sorted(finished)]
