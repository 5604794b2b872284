"""The time and step budget of one chat-template render, and the error a render raises.

Apart from :mod:`skulk_daemon.chat.template_sandbox` (the Jinja environment that
spends this budget) so that what admits a chat request can name these without loading
Jinja: Jinja loads with the first template compiled, not at the node's start (issue 43).
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

RENDER_SECONDS: Final = 2.0
"""Wall-clock budget for one render; real chat templates take well under a millisecond."""
MAX_LOOP_STEPS: Final = 1_000_000
"""Loop steps one render may take, all loops together (a chat template takes one per
message, tool and content part)."""
MAX_PROMPT_CHARS: Final = 8 * 1024 * 1024
"""A rendered prompt beyond this fits no context window."""
DEADLINE_EVERY: Final = 256
"""How many loop steps (or output parts) pass between two deadline checks."""


class PromptError(ValueError):
    """The conversation cannot be rendered with this model's template."""


@dataclass
class _Budget:
    deadline: float
    steps: int = 0


_budget: contextvars.ContextVar[_Budget] = contextvars.ContextVar("template_budget")


@contextlib.contextmanager
def render_budget() -> Iterator[None]:
    """The time and loop-step budget of one render, for what runs inside."""
    token = _budget.set(_Budget(deadline=time.monotonic() + RENDER_SECONDS))
    try:
        yield
    finally:
        _budget.reset(token)


def check_deadline() -> None:
    budget = _budget.get(None)
    if budget is not None and time.monotonic() > budget.deadline:
        raise PromptError(
            f"the model card's chat template ran longer than {RENDER_SECONDS:g} s; "
            "the card's template must be fixed"
        )


def count_step() -> None:
    """One loop step of the render in progress, against its bounds."""
    budget = _budget.get(None)
    if budget is None:
        return
    budget.steps += 1
    if budget.steps > MAX_LOOP_STEPS:
        raise PromptError(f"the chat template took more than {MAX_LOOP_STEPS} loop steps")
    if budget.steps % DEADLINE_EVERY == 0:
        check_deadline()
