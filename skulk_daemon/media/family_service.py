"""What every media job family's routes do below the HTTP layer, once.

Polling, listing, cancelling and deleting a job is the same for every family over its
own :class:`~skulk_daemon.media.jobs_service.MediaJobs`; a family (music, video) says
only how a job reads as its public object and how a page of them is answered, and
keeps its own create (admission) and content (which file) steps.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic, TypeVar

import msgspec

from skulk_core.media.jobs import Job, ListOrder, Page
from skulk_daemon.media.jobs_service import MediaJobs

ObjectT = TypeVar("ObjectT", bound=msgspec.Struct)
ListT = TypeVar("ListT", bound=msgspec.Struct)


class FamilyService(ABC, Generic[ObjectT, ListT]):
    """One media job family's routes below the HTTP layer."""

    def __init__(self, jobs: MediaJobs) -> None:
        self.jobs = jobs

    @abstractmethod
    def _object(self, job: Job) -> ObjectT:
        """``job`` as the family's public object."""

    @abstractmethod
    def _list(self, data: tuple[ObjectT, ...], page: Page) -> ListT:
        """One page of the family's objects as its list answer."""

    def get(self, job_id: str) -> ObjectT:
        return self._object(self.jobs.get(job_id))

    def list(self, limit: int, after: str | None, order: ListOrder = "desc") -> ListT:
        page = self.jobs.page(limit, after, order)
        return self._list(tuple(self._object(job) for job in page.data), page)

    def cancel(self, job_id: str) -> ObjectT:
        return self._object(self.jobs.cancel(job_id))

    def delete(self, job_id: str) -> None:
        self.jobs.delete(job_id)
