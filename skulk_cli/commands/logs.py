"""`skulk logs`: this machine's node log (``<data dir>/logs/skulk.log``), like ``tail``.

The node writes the file (rotated, owner-only); this command only reads it, so it
works while the node is down too. Which file: ``--data-dir``, else the one the node
at ``--api-url`` says it writes (when it answers within a second), else
``$SKULK_DATA_DIR``, else the default data dir.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Generator
from pathlib import Path
from typing import Annotated, Final

import typer

from skulk_cli import console
from skulk_cli.client import SkulkApiError, SkulkClient, SkulkUnreachable, UnexpectedResponseError
from skulk_cli.context import EXIT_REFUSED, CliContext

LOG_RELATIVE_PATH: Final = Path("logs") / "skulk.log"
DEFAULT_LINES: Final = 50
FOLLOW_POLL_SECONDS: Final = 0.25
# The node is on this machine or not; a second is plenty to ask where it logs.
ASK_NODE_TIMEOUT_SECONDS: Final = 1.0


def default_log_file() -> Path:
    data = os.environ.get("SKULK_DATA_DIR")
    root = Path(data) if data else Path.home() / ".local/share/skulk"
    return root.expanduser() / LOG_RELATIVE_PATH


def node_log_file(api_url: str) -> Path | None:
    """The log file the node at ``api_url`` says it writes, if it answers quickly and
    shows paths (it does to a caller on its own machine)."""
    try:
        with SkulkClient(api_url, timeout=ASK_NODE_TIMEOUT_SECONDS) as client:
            effective = client.config().get("effective")
    except (SkulkUnreachable, SkulkApiError, UnexpectedResponseError):
        return None
    rows = effective.get("in_effect") if isinstance(effective, dict) else None
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, dict) and row.get("key") == "logging.file":
            value = row.get("value")
            return Path(value) if isinstance(value, str) and value else None
    return None


def last_lines(path: Path, count: int) -> list[str]:
    """The last ``count`` lines of ``path``."""
    if count <= 0:
        return []
    with path.open(encoding="utf-8", errors="replace") as stream:
        return list(deque((line.rstrip("\n") for line in stream), maxlen=count))


def follow(
    path: Path, lines: int = 0, poll: float = FOLLOW_POLL_SECONDS
) -> Generator[str, None, None]:
    """The last ``lines`` lines of ``path``, then the lines appended to it, read from
    one open file so that none written in between is lost; a rotation (the file
    replaced or cut short) continues from the new file's start, as ``tail -F`` does."""
    stream = path.open(encoding="utf-8", errors="replace")
    inode = os.fstat(stream.fileno()).st_ino
    pending = ""
    try:
        if lines > 0:
            last = deque(stream, maxlen=lines)
            if last and not last[-1].endswith("\n"):
                pending = last.pop()  # a line the node is still writing: finished below
            yield from (line.rstrip("\n") for line in last)
        else:
            stream.seek(0, os.SEEK_END)
        while True:
            chunk = stream.readline()
            if chunk:
                pending += chunk
                if pending.endswith("\n"):
                    yield pending.rstrip("\n")
                    pending = ""
                continue
            try:
                current = path.stat()
            except FileNotFoundError:
                current = None
            if current is not None and (current.st_ino != inode or current.st_size < stream.tell()):
                stream.close()
                stream = path.open(encoding="utf-8", errors="replace")
                inode = os.fstat(stream.fileno()).st_ino
                continue
            time.sleep(poll)
    finally:
        stream.close()


def logs(
    ctx: typer.Context,
    lines: Annotated[
        int,
        typer.Option("--lines", "-n", metavar="N", min=0, help="How many of the last lines."),
    ] = DEFAULT_LINES,
    follow_flag: Annotated[
        bool,
        typer.Option("--follow", "-f", help="Keep printing lines as the node writes them."),
    ] = False,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir", metavar="DIR", help="The node's data dir (as given to `skulk serve`)."
        ),
    ] = None,
) -> None:
    """Show this machine's node log: the last lines, or follow it with `-f`.

    The node writes `logs/skulk.log` in its data dir at the level `logging.level` sets
    (`skulk config set logging.level debug`, then `skulk restart`); older lines are in
    `skulk.log.1` to `.3`.
    """
    cli = CliContext.of(ctx)
    if data_dir is not None:
        path = data_dir.expanduser() / LOG_RELATIVE_PATH
    else:
        path = node_log_file(cli.api_url) or default_log_file()
    if not path.exists():
        console.error(
            f"No node log at {path}.",
            hint="`skulk logs` reads the log of a node on this machine, which writes it from "
            "its first start (`skulk serve`); name its data dir with --data-dir.",
        )
        raise typer.Exit(EXIT_REFUSED)
    try:
        if not follow_flag:
            for line in last_lines(path, lines):
                print(line)
            return
        for line in follow(path, lines):
            print(line, flush=True)
    except PermissionError:
        console.error(
            f"{path} is not readable by this user.",
            hint="The node keeps its log owner-only: run this as the user the node runs as.",
        )
        raise typer.Exit(EXIT_REFUSED) from None
    except KeyboardInterrupt:
        return
