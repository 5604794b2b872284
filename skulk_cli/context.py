"""What every command shares: the global options and the error-reporting boundary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlsplit

import typer

from skulk_cli import console
from skulk_cli.client import (
    DEFAULT_API_URL,
    SkulkApiError,
    SkulkClient,
    SkulkUnreachable,
    UnexpectedResponseError,
)

EXIT_REFUSED = 1

# Accepted after the command too (`skulk status --json`), as well as globally.
JsonFlag = Annotated[
    bool,
    typer.Option("--json", help="Print the node's raw JSON response instead of tables."),
]


@dataclass(frozen=True)
class CliContext:
    """The global options, stored on the click context by the root callback."""

    api_url: str
    json_output: bool = False

    @classmethod
    def of(cls, ctx: typer.Context) -> CliContext:
        root = ctx.find_root().obj
        if isinstance(root, CliContext):
            return root
        raise RuntimeError("the skulk root callback did not run")  # a programming error

    def wants_json(self, local_flag: bool) -> bool:
        return self.json_output or local_flag


@contextmanager
def node_client(cli: CliContext) -> Iterator[SkulkClient]:
    """A client for the node at ``--api-url``; refusals become a message and exit 1."""
    # Checked here rather than as the option is parsed, so that a stray
    # SKULK_API_URL cannot stop `skulk serve`, which never uses it.
    parts = urlsplit(cli.api_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise typer.BadParameter(
            f"'{cli.api_url}' is not an http(s) URL like {DEFAULT_API_URL}",
            param_hint="'--api-url' / SKULK_API_URL",
        )
    try:
        with SkulkClient(cli.api_url) as client:
            yield client
    except SkulkUnreachable as exc:
        console.error(
            f"No Skulk node answering at {cli.api_url} ({exc.reason}).",
            hint="Start one with `skulk serve`, or point --api-url (or SKULK_API_URL) "
            "at a running node.",
        )
        raise typer.Exit(EXIT_REFUSED) from None
    except SkulkApiError as exc:
        console.error(exc.message)
        raise typer.Exit(EXIT_REFUSED) from None
    except UnexpectedResponseError as exc:
        console.error(str(exc))
        raise typer.Exit(EXIT_REFUSED) from None
