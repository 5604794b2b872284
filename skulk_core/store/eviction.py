"""Which staged copies a node evicts, decided without I/O.

A node keeps copies staged from the store under its models dir. Before a transfer,
the copies that would push the staged total past ``model_store.staging_budget_gb``
(and the bytes that would not fit on the models volume with its reserve) are
evicted least recently used first; a copy a running instance uses, and the incoming
model itself, are never candidates. When evicting every candidate still would not
make room, staging is refused with the arithmetic (:func:`plan_staging`).

When an instance shuts down, and once at start, the idle copies are tidied
(:func:`plan_tidy`): the newest are kept while they fit the grace budget
(``model_store.staging.staging_keep_recent_gb``), the older ones evicted.
"""

from __future__ import annotations

import msgspec

GIB = 1024**3


class StagedCopy(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    size_bytes: int
    last_used: float
    """Unix seconds of the copy's last use (its last-use marker, else its install)."""
    in_use: bool


class EvictionPlan(msgspec.Struct, frozen=True, kw_only=True):
    evict: tuple[str, ...]
    """Model ids, least recently used first."""
    freed_bytes: int


class EvictionRefused(msgspec.Struct, frozen=True, kw_only=True):
    message: str


def plan_staging(
    copies: list[StagedCopy],
    *,
    incoming: str,
    incoming_bytes: int,
    missing_bytes: int,
    budget_bytes: int | None,
    free_bytes: int,
    reserve_bytes: int,
) -> EvictionPlan | EvictionRefused:
    """What to evict so that ``incoming`` (``incoming_bytes`` in all, ``missing_bytes``
    still to transfer) fits the budget and the disk; or why it cannot."""
    others = [c for c in copies if c.model_id != incoming]
    if budget_bytes is not None and incoming_bytes > budget_bytes:
        return EvictionRefused(
            message=(
                f"{incoming} needs {incoming_bytes} bytes, more than the whole staging budget "
                f"of {budget_bytes} bytes (model_store.staging_budget_gb); raise the budget to "
                "stage it here"
            )
        )
    staged = sum(c.size_bytes for c in others)
    over_budget = 0 if budget_bytes is None else staged + incoming_bytes - budget_bytes
    short_disk = missing_bytes + reserve_bytes - free_bytes
    needed = max(over_budget, short_disk, 0)
    if needed == 0:
        return EvictionPlan(evict=(), freed_bytes=0)
    candidates = sorted(
        (c for c in others if not c.in_use), key=lambda c: (c.last_used, c.model_id)
    )
    evicted: list[str] = []
    freed = 0
    for copy in candidates:
        if freed >= needed:
            break
        evicted.append(copy.model_id)
        freed += copy.size_bytes
    if freed >= needed:
        return EvictionPlan(evict=tuple(evicted), freed_bytes=freed)
    busy = sum(c.size_bytes for c in others if c.in_use)
    if short_disk > freed:
        return EvictionRefused(
            message=(
                f"not enough disk to stage {incoming}: {missing_bytes} more bytes plus a "
                f"{reserve_bytes}-byte reserve are needed and the models volume has "
                f"{free_bytes} free, with {freed} bytes of idle staged copies to evict; free "
                "space (or delete unused models) and place it again"
            )
        )
    return EvictionRefused(
        message=(
            f"{incoming} ({incoming_bytes} bytes) does not fit the staging budget of "
            f"{budget_bytes} bytes (model_store.staging_budget_gb): {staged} bytes are "
            f"staged, {busy} of them used by running instances and not evictable; stop an "
            "instance or raise the budget and place it again"
        )
    )


def plan_tidy(
    copies: list[StagedCopy],
    *,
    keep_bytes: int,
    now: float,
    spare_recent_s: float = 0.0,
) -> tuple[str, ...]:
    """The idle copies to evict, oldest first: idle copies are kept newest first
    while together they fit ``keep_bytes``, and every older one goes, unless it was
    used within ``spare_recent_s`` of ``now``. A copy an instance uses is neither
    evicted nor counted against the budget."""
    idle = sorted((c for c in copies if not c.in_use), key=lambda c: (-c.last_used, c.model_id))
    kept, full = 0, False
    beyond: list[str] = []
    for copy in idle:
        full = full or kept + copy.size_bytes > keep_bytes
        if not full:
            kept += copy.size_bytes
        elif now - copy.last_used >= spare_recent_s:
            beyond.append(copy.model_id)
    return tuple(reversed(beyond))
