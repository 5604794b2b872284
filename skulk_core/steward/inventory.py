"""Standalone inventory questions answered from observations, without generation.

A bounded set of questions ("How many nodes do you currently have?", "Are there any
downloads in flight?") is recognised by pattern and answered from the inventory read at
API time. Anything compound (an ``and``, a per-model or action request) is left to the
model's investigation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Final

from skulk_core.ids import NodeId
from skulk_core.state.state import State
from skulk_core.steward.evidence import download_inventory

_NODE_COUNT: Final = re.compile(
    r"^\s*(?:so\s*,?\s*)?how many (?:nodes|machines|peers|computers)"
    r"(?: (?:do|does) (?:you|we|skulk|the cluster|this cluster)"
    r" (?:currently )?(?:have|has|see|run))?"
    r"(?: (?:in|on) (?:the|this) (?:cluster|fabric))?(?: (?:right )?now| currently)?\s*[?.!]*\s*$",
    re.IGNORECASE,
)
_DOWNLOADS: Final = re.compile(
    r"^\s*(?:are there |is there |do you have |any )?(?:any )?(?:downloads?|transfers?)"
    r"(?: (?:in flight|in progress|running|active|happening))(?: (?:right )?now)?\s*[?.!]*\s*$",
    re.IGNORECASE,
)
_COMPOUND: Final = re.compile(r"\b(and|or|which|why|model|stop|place|restart|cancel)\b", re.I)


def deterministic_answer(
    question: str, state: State, names: Mapping[NodeId, str], read_at: datetime
) -> str | None:
    """The exact answer to a supported standalone inventory question, else ``None``."""
    text = question.strip()
    if _COMPOUND.search(text.replace("in flight", "")):
        return None
    when = read_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    if _NODE_COUNT.match(text):
        count = len(state.topology.nodes)
        listed = ", ".join(names.get(n, "unknown") for n in state.topology.nodes)
        noun = "node" if count == 1 else "nodes"
        return (
            f"I currently have {count} {noun}: {listed}. (Read at {when}; this counts "
            "topology transport peers, not physical hosts or capability nodes.)"
        )
    if _DOWNLOADS.match(text):
        inventory = download_inventory(state, names)
        queued, moving = inventory.queued, inventory.transferring
        terminal = inventory.retained_terminal
        if queued + moving == 0:
            head = "No downloads are in flight."
        else:
            items = "; ".join(f"{d.model} on {d.node} ({d.status})" for d in inventory.active)
            head = (
                f"{queued + moving} download(s) in flight ({queued} queued, "
                f"{moving} transferring): {items}."
            )
        return (
            f"{head} {terminal} finished record(s) are retained. (Read at {when}; "
            "per-transfer timestamps are not observed, so this does not claim bytes are "
            "moving at this instant.)"
        )
    return None
