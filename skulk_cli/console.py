"""The one module that owns terminal output.

Human output goes through rich consoles; machine output (``--json``) is written as
plain text so that no wrapping, markup or colour can reach a shell script.
"""

from __future__ import annotations

import json

from rich.console import Console, RenderableType
from rich.text import Text

stdout = Console(highlight=False)
stderr = Console(stderr=True, highlight=False)


def show(renderable: RenderableType) -> None:
    """Print a renderable for people."""
    stdout.print(renderable)


def emit_json(data: object) -> None:
    """Print machine output: the node's JSON, pretty-printed, nothing else."""
    stdout.file.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    stdout.file.flush()


def error(message: str, hint: str | None = None) -> None:
    """Report a refusal on stderr. Messages are text, never markup."""
    stderr.print(Text(message, style="bold red"))
    if hint:
        stderr.print(Text(hint))
