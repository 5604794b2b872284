"""The one module that owns terminal output.

Human output goes through rich consoles; machine output (``--json``) is written as
plain text so that no wrapping, markup or colour can reach a shell script.
"""

from __future__ import annotations

import json
import sys

from rich.console import Console, RenderableType
from rich.text import Text


def _console(*, stderr: bool = False) -> Console:
    # NOTE: built per use, not at import, so that the streams and environment at
    # the time of printing (a redirected sys.stdout, COLUMNS, NO_COLOR) apply.
    return Console(stderr=stderr, highlight=False)


def show(renderable: RenderableType) -> None:
    """Print a renderable for people."""
    _console().print(renderable)


def emit_json(data: object) -> None:
    """Print machine output: the node's JSON, pretty-printed, nothing else."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def error(message: str, hint: str | None = None) -> None:
    """Report a refusal on stderr. Messages are text, never markup."""
    stderr = _console(stderr=True)
    stderr.print(Text(message, style="bold red"))
    if hint:
        stderr.print(Text(hint))
