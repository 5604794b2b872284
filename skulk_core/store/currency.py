"""Whether a stored generation is the one the signed registry publishes now, and how
complete this node's picture of every node's cached copies is (``GET /store/registry``).

Pure: the route hands in the catalog's current signed card, the advisories, the
members of the cluster and when each last published telemetry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Final

import msgspec

from skulk_core.cluster.telemetry import LIVENESS_LATE_SECONDS
from skulk_core.ids import NodeId
from skulk_core.models.advisories import Advisory
from skulk_core.models.cards import ModelCard

STALE_READING_SECONDS: Final = LIVENESS_LATE_SECONDS
"""A node's inventory older than this no longer counts as current (the same bound
after which cluster health calls the node late)."""


class Currency(msgspec.Struct, frozen=True, kw_only=True):
    current_registry_identity: str | None
    """The signed card the registry publishes for the alias now, when one exists."""
    installed_not_current: bool
    """No current signed card, or the installed generation is not under it."""
    update_available: bool
    """A current signed card exists and the installed generation is not under it."""
    advisories: list[Advisory]
    """Signed advisories naming the installed or the current card."""


def currency(
    installed_card_id: str | None, current: ModelCard | None, advisories: Sequence[Advisory]
) -> Currency:
    """Where the generation installed under ``installed_card_id`` stands against the
    ``current`` signed card for its alias. An installed generation is under the current
    card only when it was recorded under that very signed id; an older signed card, a
    custom card or a legacy record without a registry identity is not."""
    current_id = None if current is None else current.registry_card_id
    under = current_id is not None and installed_card_id == current_id
    ids = {i for i in (installed_card_id, current_id) if i}
    return Currency(
        current_registry_identity=current_id,
        installed_not_current=not under,
        update_available=current_id is not None and not under,
        advisories=[a for a in advisories if ids.intersection(a.card_ids)],
    )


class Coverage(StrEnum):
    SYNCING = "syncing"
    """A newly live node has not published its first inventory."""
    CURRENT = "current"
    """Every live node has a fresh, complete reading."""
    DEGRADED = "degraded"
    """Known locations are partial: a reading is stale or missing after convergence."""
    UNAVAILABLE = "unavailable"
    """No usable node inventory exists."""


def coverage(
    members: Iterable[NodeId],
    readings: Mapping[NodeId, datetime],
    last_seen: Mapping[NodeId, datetime],
    now: datetime,
) -> Coverage:
    """The cache inventory's coverage from when each member's telemetry was observed
    (``readings``) and when it was last heard of at all (``last_seen``).

    A member with no reading that was heard of recently is still joining (syncing); one
    with a reading older than :data:`STALE_READING_SECONDS`, or with none though it has
    not been heard of recently, leaves the known locations partial (degraded)."""
    observed_any = False
    syncing = False
    degraded = False
    for member in members:
        observed = readings.get(member)
        if observed is not None:
            observed_any = True
            degraded |= (now - observed).total_seconds() > STALE_READING_SECONDS
            continue
        seen = last_seen.get(member)
        if seen is not None and (now - seen).total_seconds() <= STALE_READING_SECONDS:
            syncing = True
        else:
            degraded = True
    if not observed_any:
        return Coverage.UNAVAILABLE
    if degraded:
        return Coverage.DEGRADED
    return Coverage.SYNCING if syncing else Coverage.CURRENT
