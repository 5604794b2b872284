"""Shell completion of model ids from the node (`skulk chat loc<TAB>`).

Completion runs on every TAB press, so it must be quick and must never print: one
``GET /v1/models`` with a short timeout, and with no node answering (or any other
failure) simply no suggestions.
"""

from __future__ import annotations

import os
from typing import Final

import typer

from skulk_cli.client import DEFAULT_API_URL, SkulkClient

COMPLETION_TIMEOUT_SECONDS: Final = 1.0


def _api_url(ctx: typer.Context) -> str:
    given = ctx.find_root().params.get("api_url")
    if isinstance(given, str) and given:
        return given.rstrip("/")
    return (os.environ.get("SKULK_API_URL") or DEFAULT_API_URL).rstrip("/")


def model_ids(api_url: str) -> list[str]:
    """Every model id the node at ``api_url`` lists; none when it does not answer."""
    try:
        with SkulkClient(api_url, timeout=COMPLETION_TIMEOUT_SECONDS) as client:
            listed = client.models().get("data")
    except Exception:  # a completion must never fail or print: no node, no suggestions
        return []
    models = listed if isinstance(listed, list) else []
    return [str(m["id"]) for m in models if isinstance(m, dict) and isinstance(m.get("id"), str)]


def complete_model_id(ctx: typer.Context, incomplete: str) -> list[str]:
    """Typer ``autocompletion`` for a MODEL argument: the node's ids starting with
    what was typed."""
    return sorted(i for i in model_ids(_api_url(ctx)) if i.startswith(incomplete))
