"""The supervisor's flight recorder: what each local runner went through, bounded.

Every phase a runner reports, every task it starts and ends, and every stop and
failure is one entry, stamped with the wall clock (so entries from several nodes
merge into one timeline). The recorder keeps the newest :data:`FLIGHT_ENTRIES`;
it never holds prompts, outputs or command ids.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from skulk_core.diagnostics.bundle import FlightRecord

FLIGHT_ENTRIES: Final = 512


@dataclass(frozen=True, slots=True)
class FlightEntry:
    at: datetime
    runner_id: str
    event: str
    phase: str
    detail: str = ""
    task_id: str | None = None

    def to_wire(self) -> FlightRecord:
        return FlightRecord(
            at=self.at.isoformat(),
            runner_id=self.runner_id,
            event=self.event,
            phase=self.phase,
            detail=self.detail,
            task_id=self.task_id,
        )


class FlightRecorder:
    def __init__(
        self,
        limit: int = FLIGHT_ENTRIES,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._entries: deque[FlightEntry] = deque(maxlen=limit)
        self._clock = clock

    def record(
        self, runner_id: str, event: str, phase: str, detail: str = "", task_id: str | None = None
    ) -> None:
        self._entries.append(
            FlightEntry(self._clock(), runner_id, event, phase, detail[:512], task_id)
        )

    def entries(self, runner_id: str | None = None) -> list[FlightRecord]:
        """Oldest first; only ``runner_id``'s when given."""
        return [
            entry.to_wire()
            for entry in self._entries
            if runner_id is None or entry.runner_id == runner_id
        ]
