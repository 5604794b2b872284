"""What every command shares: the global options and the error-reporting boundary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlsplit

import typer

from skulk_cli import console, hints
from skulk_cli.client import (
    DEFAULT_API_URL,
    SkulkApiError,
    SkulkClient,
    SkulkUnreachable,
    UnexpectedResponseError,
)
from skulk_cli.completion import complete_model_id

if TYPE_CHECKING:
    from skulk_cli.operator_credentials import CredentialStore

EXIT_REFUSED = 1

# Accepted after the command too (`skulk status --json`), as well as globally.
JsonFlag = Annotated[
    bool,
    typer.Option("--json", help="Print the node's raw JSON response instead of tables."),
]

WideFlag = Annotated[
    bool,
    typer.Option("--wide", "-w", help="Show ids whole instead of as unique prefixes."),
]

# The model a generating command (`skulk chat`, `skulk bench`) sends to.
PlacedModelArg = Annotated[
    str,
    typer.Argument(
        metavar="MODEL",
        help="A placed model's id (`skulk instances list` shows them).",
        show_default=False,
        autocompletion=complete_model_id,
    ),
]


@dataclass(frozen=True)
class CliContext:
    """The global options, stored on the click context by the root callback."""

    api_url: str
    json_output: bool = False
    # `skulk --operator ...`: talk to the paired gateway's operator listener instead.
    operator: bool = False

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
    """A client for the node at ``--api-url``; refusals become a message and exit 1.

    With ``--operator`` it is the paired gateway's operator listener instead (see
    :func:`operator_node_client`).
    """
    if cli.operator:
        with operator_node_client() as client:
            yield client
        return
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
        if exc.busy:
            console.error(
                f"The node at {cli.api_url} took the request but did not answer in time.",
                hint="It is busy (a model loading, or a loaded machine): try again in a "
                "moment; `skulk logs` shows what it is doing.",
            )
        else:
            console.error(
                f"No Skulk node answering at {cli.api_url} ({exc.reason}).",
                hint="Start one with `skulk serve`, or point --api-url (or SKULK_API_URL) "
                "at a running node.",
            )
        raise typer.Exit(EXIT_REFUSED) from None
    except SkulkApiError as exc:
        console.error(*hints.explain(exc))
        raise typer.Exit(EXIT_REFUSED) from None
    except UnexpectedResponseError as exc:
        console.error(str(exc))
        raise typer.Exit(EXIT_REFUSED) from None


@contextmanager
def operator_node_client(store: CredentialStore | None = None) -> Iterator[SkulkClient]:
    """A client for the paired gateway: pinned TLS, a bearer that rotates itself.

    NOTE: every failure of the pairing itself (none stored, refused rotation, a 401
    for a revoked device) ends the command with "pair again"; nothing here ever
    falls back to direct access at ``--api-url``.
    """
    # Imported here: httpx and the pairing code are not needed by direct commands.
    from skulk_cli.operator_client import operator_client  # noqa: PLC0415
    from skulk_cli.operator_credentials import (  # noqa: PLC0415
        PAIR_AGAIN_HINT,
        CredentialStore,
        CredentialsUnusable,
        NotPaired,
    )

    store = store or CredentialStore.default()
    url = "the paired gateway"
    try:
        client = operator_client(store)
        url = client.base_url
        with client:
            yield client
    except NotPaired:
        console.error(
            "This CLI is not paired with a gateway.",
            hint="Run `skulk operator pair` on the gateway host, then "
            "`skulk operator connect PAYLOAD` here.",
        )
        raise typer.Exit(EXIT_REFUSED) from None
    except CredentialsUnusable as exc:
        console.error(f"The stored pairing cannot be used: {exc}.", hint=PAIR_AGAIN_HINT)
        raise typer.Exit(EXIT_REFUSED) from None
    except SkulkUnreachable as exc:
        if _certificate_refused(exc):
            console.error(
                f"The server at {url} did not prove it holds the paired gateway's pinned "
                f"key ({exc.reason}); nothing was sent to it.",
                hint=PAIR_AGAIN_HINT,
            )
        else:
            console.error(
                f"No operator listener answering at {url} ({exc.reason}).",
                hint="Check that the gateway's node is running and reachable from here.",
            )
        raise typer.Exit(EXIT_REFUSED) from None
    except SkulkApiError as exc:
        if exc.status == 401:
            console.error(
                f"The gateway no longer accepts this device's credentials ({exc.message}).",
                hint=PAIR_AGAIN_HINT,
            )
        elif exc.status == 403:
            console.error(
                f"This paired device is not allowed to do that ({exc.message}).",
                hint="Pairing grants cluster, model, chat, operations and device scopes; "
                "the gateway's owner grants anything else.",
            )
        else:
            console.error(*hints.explain(exc))
        raise typer.Exit(EXIT_REFUSED) from None
    except UnexpectedResponseError as exc:
        console.error(str(exc))
        raise typer.Exit(EXIT_REFUSED) from None


def _certificate_refused(exc: BaseException) -> bool:
    """Whether a connection failed because the server's certificate was not the pinned one."""
    import ssl  # noqa: PLC0415 - loaded with httpx by then; direct commands never get here

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
