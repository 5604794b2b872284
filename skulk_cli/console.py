"""The one module that owns terminal output.

Human output goes through rich consoles; machine output (``--json``) is written as
plain text so that no wrapping, markup or colour can reach a shell script, and
without loading rich at all: a script polling `skulk status --json` pays for none.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.status import Status
    from rich.text import Text


def _console(*, stderr: bool = False) -> Console:
    # NOTE: built per use, not at import, so that the streams and environment at
    # the time of printing (a redirected sys.stdout, COLUMNS, NO_COLOR) apply.
    from rich.console import Console  # noqa: PLC0415 (see the module doc)

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
    from rich.text import Text  # noqa: PLC0415 (see the module doc)

    stderr = _console(stderr=True)
    stderr.print(Text(message, style="bold red"))
    if hint:
        stderr.print(Text(hint))


def note(renderable: RenderableType) -> None:
    """Print commentary on stderr (progress, statistics), so stdout stays the answer."""
    _console(stderr=True).print(renderable)


class Progress:
    """A one-line status for long work, on stderr.

    On a terminal it is a spinner redrawn in place; otherwise (a log file, CI) each
    distinct line is printed once, so the record still shows what happened.
    """

    def __init__(self, console: Console, status: Status | None) -> None:
        self._console = console
        self._status = status
        self._last: str | None = None

    def update(self, text: Text) -> None:
        if self._status is not None:
            self._status.update(text)
        elif text.plain != self._last:
            self._console.print(text)
        self._last = text.plain


@contextmanager
def progress(text: Text) -> Iterator[Progress]:
    """Show ``text`` with a spinner until the block ends; update it as work moves on."""
    stderr = _console(stderr=True)
    if not stderr.is_terminal:
        line = Progress(stderr, None)
        line.update(text)
        yield line
        return
    with stderr.status(text) as status:
        yield Progress(stderr, status)


class TextStream:
    """Generated text written to stdout as it arrives: no wrapping, no buffering."""

    def __init__(self) -> None:
        self._console = _console()
        self.at_line_start = True

    def write(self, text: str, style: str = "") -> None:
        if not text:
            return
        from rich.text import Text  # noqa: PLC0415 (loaded with the console by now)

        # soft_wrap: the terminal wraps; rich would otherwise insert line breaks.
        self._console.print(Text(text, style=style), end="", soft_wrap=True)
        self.at_line_start = text.endswith("\n")

    def end_line(self) -> None:
        """Finish the reply's last line, if it did not end with one."""
        if not self.at_line_start:
            self._console.print()
            self.at_line_start = True


def enable_line_editing() -> None:
    """Arrow keys and history for `ask`, where the terminal and platform allow."""
    if sys.stdin.isatty():
        # Absent on Windows; the prompt then works without editing.
        with suppress(ImportError):
            import readline  # noqa: F401, PLC0415 - importing it is what enables editing


def ask(prompt: Text) -> str:
    """Read one line from the user. EOFError at end of input, KeyboardInterrupt on Ctrl-C."""
    return _console().input(prompt)
