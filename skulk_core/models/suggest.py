"""Did-you-mean for model ids: the closest known ids to one that is not known.

Used by the API's 404 texts and by the CLI, so a typo gets the same suggestions on
both. Matching is case-insensitive and also against the part after the owner (people
type ``gemma-3-270m`` for ``local/gemma-3-270m-q4_k_m``), with :mod:`difflib`'s ratio.
"""

from __future__ import annotations

from collections.abc import Iterable
from difflib import SequenceMatcher
from typing import Final

# difflib's own default cutoff for get_close_matches: close enough to be a typo.
SIMILARITY_CUTOFF: Final = 0.6
MAX_SUGGESTIONS: Final = 3
# A fragment this long that appears in an id's name is a match however short it is
# against the whole name ("gemma" in "gemma-3-270m-q4_k_m").
MIN_FRAGMENT_CHARS: Final = 4
_FRAGMENT_SCORE: Final = 0.8


def _score(wanted: str, candidate: str) -> float:
    low = candidate.lower()
    name = low.rsplit("/", 1)[-1]
    ratio = max(
        SequenceMatcher(None, wanted, low).ratio(), SequenceMatcher(None, wanted, name).ratio()
    )
    if len(wanted) >= MIN_FRAGMENT_CHARS and wanted in low:
        ratio = max(ratio, _FRAGMENT_SCORE)
    return ratio


def did_you_mean(wanted: str, known: Iterable[str], limit: int = MAX_SUGGESTIONS) -> list[str]:
    """Up to ``limit`` known ids closest to ``wanted``, best first (none: ``[]``)."""
    target = wanted.strip().lower()
    if not target:
        return []
    scored = [
        (score, candidate)
        for candidate in set(known)
        if (score := _score(target, candidate)) >= SIMILARITY_CUTOFF
    ]
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [candidate for _, candidate in scored[:limit]]


def suggestion(wanted: str, known: Iterable[str]) -> str:
    """`` (did you mean 'a' or 'b'?)`` for the closest ids, or ``""`` when none is close."""
    close = did_you_mean(wanted, known)
    if not close:
        return ""
    quoted = [repr(candidate) for candidate in close]
    listed = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f" (did you mean {listed}?)"


def not_in_catalog(model_id: str, known: Iterable[str]) -> str:
    """``model 'x' is not in the catalog``, with the closest known ids when any is close."""
    return f"model {model_id!r} is not in the catalog{suggestion(model_id, known)}"
