"""What the CLI says for the node's refusals it knows: the node's words, the CLI's fix.

The node's error text is written for API clients, so the fix it names is an HTTP route
("add it first (POST /models/add)"). Its messages put the fix after the first ``"; "``.
For the error codes below the CLI says the fix as the `skulk` command that does it, and
drops the node's own fix when that names an HTTP route (the statement before it, which
names the model or instance and any did-you-mean, stays). Any other refusal is shown as
the node wrote it.
"""

from __future__ import annotations

import re
from typing import Final

from skulk_cli.client import SkulkApiError

MODELS_LIST: Final = "`skulk models list` shows the models the cluster knows"

_HINTS: Final[dict[str, str]] = {
    "model_not_found": f"{MODELS_LIST}; add one from Hugging Face with "
    "`skulk models add OWNER/NAME`.",
    "model_not_downloaded": "Download its bytes with `skulk models download MODEL`, then place it.",
    "model_in_use": "Remove the instance first with `skulk instances rm ID` (or "
    "`skulk models rm MODEL --force`, which stops it first).",
    "model_already_placed": "Use the instance that is there (`skulk instances list`), remove "
    "it first with `skulk instances rm ID`, or start another replica with "
    "`skulk place MODEL --another`.",
    "instance_not_found": "`skulk instances list` shows the placed instances; a unique "
    "prefix of an id is enough.",
    "invalid_hub_model": "`skulk models quants OWNER/NAME` lists a repository's GGUF files.",
}


_HTTP_ROUTE: Final = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) /")


def statement(message: str) -> str:
    """``message`` without a fix after its first ``"; "`` that names an HTTP route."""
    head, separator, tail = message.partition("; ")
    return head if separator and _HTTP_ROUTE.search(tail) else message


def explain(error: SkulkApiError) -> tuple[str, str | None]:
    """The message and hint to print for ``error``."""
    hint = _HINTS.get(error.code or "")
    if hint is None:
        return error.message, None
    return statement(error.message), hint


def place_hint(error: SkulkApiError, model: str) -> str | None:
    """The hint for a generating command's refusal: a 404 for a model the node knows
    is one that is not placed; one the node suggests another id for is a typo."""
    if error.status != 404:
        return None
    if "did you mean" in error.message:
        return f"Check the model id: {MODELS_LIST}."
    return f"Place the model first: `skulk place {model}`."
