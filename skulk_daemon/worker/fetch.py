"""Bytes a placed model still needs on this node: the store's copy, else its source.

The spec: "Normal placement also stages missing shards." Placement stays pure and
accepts a model whose bytes no node holds yet; the worker that must run it brings
them here on its launch path, before the runner starts:

1. The cluster's store has the model: stage it (:mod:`skulk_daemon.store.staging`).
2. A store is configured but does not have it, and the card pins a Hugging Face
   repository and commit: the store host fetches its canonical copy (its own download
   transaction, progress in ``/state`` ``downloads`` under the store node), then this
   node stages it. A store that cannot be reached falls back to step 3.
3. Otherwise this node downloads the pinned revision itself (the same job as
   ``POST /download/start``, verified the same way, progress in ``/state``).

A download that fails, is cancelled or is refused raises :class:`FetchFailed`; the
launch path turns it into ``download_failed:<node>`` with the reason, which the
cluster records in ``instanceFailures`` (and the repair loop may place the model on
another node).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

import msgspec

from skulk_core.models.cards import ModelCard
from skulk_core.models.hub_cards import HubCardError
from skulk_core.store.answers import StoreDownload
from skulk_daemon.hub.client import HubRefused
from skulk_daemon.hub.download import CANCELLED, COMPLETED, FAILED, DownloadRefused, Downloads
from skulk_daemon.node.node import Node
from skulk_daemon.store.locate import store_urls
from skulk_daemon.store.staging import Staging

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

# How often a waiting launch looks at the transfer (and whether it was stopped).
POLL_SECONDS: Final = 0.5
# One request to the store's transport; the transfer itself is not bounded here.
STORE_REQUEST_SECONDS: Final = 10.0
# The store's answers once its download ended (``complete``, or why it did not).
_STORE_COMPLETE: Final = "complete"
_STORE_ENDED: Final = frozenset({_STORE_COMPLETE, FAILED, CANCELLED, "error"})

_STATUS: Final = msgspec.json.Decoder(StoreDownload)


class Fetched(enum.Enum):
    INSTALLED = "installed"
    """The bytes are on this node, verified, and the model is in its catalog."""
    ABSENT = "absent"
    """Nothing here can bring them: no store copy and no pinned source."""
    STOPPED = "stopped"
    """The runner was stopped while waiting; the transfer itself carries on."""


class FetchFailed(Exception):
    """The bytes could not be brought here; the message says why."""


class _StoreUnreachable(Exception):
    pass


def _pinned(card: ModelCard) -> bool:
    """Whether the card names the exact source to fetch (repository and commit); a
    card that does not (a demo's, an import's) has no bytes to fetch anywhere."""
    return card.source_repository is not None and card.source_revision is not None


class ModelFetch:
    """Brings a placed model's bytes to this node (see the module docstring)."""

    def __init__(self, node: Node, staging: Staging) -> None:
        self._node = node
        self._staging = staging
        # Attached by the daemon (the hub service owns this node's download jobs);
        # without it, only the store's copies are staged.
        self.downloads: Downloads | None = None

    async def fetch(self, card: ModelCard, stopping: Callable[[], bool]) -> Fetched:
        """Bring ``card``'s bytes here. Raises :class:`FetchFailed` (and the staging's
        own ``StagingFailed``) when a transfer that should have worked did not."""
        if self._node.state.store_hosts:
            if await self._staging.stage(card):
                return Fetched.INSTALLED
            if _pinned(card):
                try:
                    ended = await self._store_download(card, stopping)
                except _StoreUnreachable as exc:
                    log.info(
                        "the store is unreachable (%s); downloading %s here", exc, card.model_id
                    )
                else:
                    if ended is Fetched.STOPPED:
                        return ended
                    if await self._staging.stage(card):
                        return Fetched.INSTALLED
                    raise FetchFailed(
                        f"the store reported {card.model_id} complete but serves no manifest"
                    )
        if not _pinned(card) or self.downloads is None:
            return Fetched.ABSENT
        return await self._download_here(self.downloads, card, stopping)

    async def _download_here(
        self, downloads: Downloads, card: ModelCard, stopping: Callable[[], bool]
    ) -> Fetched:
        model_id = card.model_id
        try:
            started = await downloads.start(card)
        except DownloadRefused as exc:
            raise FetchFailed(f"downloading {model_id} was refused: {exc.message}") from None
        except HubRefused as exc:
            raise FetchFailed(
                f"the download of {model_id} was refused by the Hub: {exc.message}"
            ) from None
        except HubCardError as exc:
            raise FetchFailed(f"{model_id} cannot be downloaded: {exc}") from None
        except OSError as exc:
            raise FetchFailed(f"downloading {model_id} failed: {exc}") from None
        if started.status != COMPLETED:
            log.info("placement of %s downloads its bytes to this node", model_id)
        progress = started
        while progress.status not in (COMPLETED, FAILED, CANCELLED):
            if stopping():
                return Fetched.STOPPED
            latest = await downloads.wait(model_id, POLL_SECONDS)
            if latest is None:  # the job was removed (its bytes deleted) meanwhile
                raise FetchFailed(f"the download of {model_id} was removed before it ended")
            progress = latest
        if progress.status != COMPLETED:
            why = progress.error_message or progress.status
            raise FetchFailed(f"the download of {model_id} did not complete: {why}")
        return Fetched.INSTALLED

    async def _store_download(self, card: ModelCard, stopping: Callable[[], bool]) -> Fetched:
        """Have the store host fetch its canonical copy of ``card``; INSTALLED once the
        store holds it complete (this node then stages it), STOPPED if stopped first."""
        import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

        path = f"/models/{quote(card.model_id, safe='')}/download"
        async with httpx.AsyncClient(timeout=STORE_REQUEST_SECONDS) as client:
            base, answer = await self._first_answer(client, "POST", path)
            log.info("placement of %s asked the store at %s to download it", card.model_id, base)
            while answer.status not in _STORE_ENDED:
                if stopping():
                    return Fetched.STOPPED
                await asyncio.sleep(POLL_SECONDS)
                _, answer = await self._first_answer(client, "GET", f"{path}/status", base)
        if answer.status != _STORE_COMPLETE:
            why = answer.error or answer.status
            raise FetchFailed(f"the store's download of {card.model_id} did not complete: {why}")
        return Fetched.INSTALLED

    async def _first_answer(
        self, client: httpx.AsyncClient, method: str, path: str, base: str | None = None
    ) -> tuple[str, StoreDownload]:
        """The first store address that answers, and its decoded answer."""
        import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

        failures: list[str] = []
        for url in [base] if base is not None else store_urls(self._node):
            try:
                reply = await client.request(method, f"{url}{path}")
            except httpx.HTTPError as exc:
                failures.append(f"{url}: {type(exc).__name__}")
                continue
            if reply.status_code != 200:
                raise FetchFailed(
                    f"the store refused the download ({reply.status_code}): {reply.text[:300]}"
                )
            try:
                return url, _STATUS.decode(reply.content)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise FetchFailed(f"the store's download answer is malformed: {exc}") from None
        raise _StoreUnreachable("; ".join(failures) or "no address")
