"""The Hugging Face client side: ``huggingface-hub`` with this node's endpoint and token.

Every call is synchronous (``huggingface-hub`` is), so services run them in a thread.
The endpoint is ``HF_ENDPOINT`` read at call time (``huggingface-hub`` reads it once at
import, which a long-lived daemon and its tests must not depend on), else the public
Hub. The token is the configured ``hf_token``, else ``HF_TOKEN``, else none: never the
token file of whoever's home directory the daemon happens to run in. The token goes
only into the ``Authorization`` header; no message, log line or URL made here holds it.

Failures become :class:`HubRefused` with the status the API answers and a message
that says what to do. A gated or private repository's 401/403 names the concrete fix.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Final, TypeVar, cast
from urllib.parse import urlsplit

from skulk_core.models.custom_cards import SOURCE_REVISION_PATTERN
from skulk_core.models.gguf import GgufHeader, read_gguf_header
from skulk_core.models.hub_cards import RepoFile

if TYPE_CHECKING:
    import httpx2
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.file_download import HfFileMetadata

# NOTE: huggingface_hub (most of a second of a daemon's start on a busy machine) is
# imported by the first call that needs it, not when the daemon starts.

DEFAULT_ENDPOINT: Final = "https://huggingface.co"
TIMEOUT_SECONDS: Final = 30.0
MAX_LISTED_FILES: Final = 20_000
MAX_SMALL_FILE_BYTES: Final = 1024 * 1024

_T = TypeVar("_T")


def _hub_library() -> None:
    """Ready huggingface_hub for a call: it sends nothing we did not ask for.

    Left to itself, building a request's headers makes huggingface_hub fetch an
    "agent harness" registry from the endpoint (once a day, with no token) to tag
    its user agent. A node asks the Hub only for the files it names: on an offline
    LAN that fetch would wait out its timeout, and it tells the Hub (or a mirror)
    more about the caller than the download needs."""
    from huggingface_hub import constants  # noqa: PLC0415  (see the NOTE above)

    constants.HF_HUB_DISABLE_TELEMETRY = True


class HubRefused(Exception):
    """What the API answers when the Hub (or our reading of it) says no."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class HubClient:
    """One node's view of the Hub: where it is and which token it presents."""

    configured_token: str | None = None

    @property
    def endpoint(self) -> str:
        return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")

    @property
    def token(self) -> str | None:
        configured = (self.configured_token or "").strip()
        return configured or (os.environ.get("HF_TOKEN") or "").strip() or None

    def _auth(self) -> str | bool:
        # False, not None: None makes huggingface-hub read ~/.cache/huggingface/token.
        return self.token or False

    def api(self) -> HfApi:
        from huggingface_hub import HfApi  # noqa: PLC0415  (see the NOTE above)

        _hub_library()
        return HfApi(endpoint=self.endpoint, token=self._auth())

    def headers(self) -> dict[str, str]:
        from huggingface_hub.utils._headers import build_hf_headers  # noqa: PLC0415

        _hub_library()
        return build_hf_headers(token=self._auth())

    def headers_for(self, url: str) -> dict[str, str]:
        """The headers for a request to ``url``: with the token only when ``url`` is on
        the configured endpoint's origin (scheme, host and port), as ``huggingface-hub``
        does. A file's resolved location is usually a CDN of another origin; the token
        stays with the Hub. (httpx also drops it on a redirect to another origin.)"""
        headers = self.headers()
        if _origin(url) != _origin(self.endpoint):
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        return headers

    def page_url(self, repo_id: str) -> str:
        return f"{self.endpoint}/{repo_id}"

    # -- calls -------------------------------------------------------------------

    def call(self, repo_id: str, action: Callable[[], _T]) -> _T:
        """``action()``, with the Hub's refusals made into :class:`HubRefused`."""
        import httpx2  # noqa: PLC0415  (the Hub's own client, loaded with it)
        from huggingface_hub.errors import (  # noqa: PLC0415  (see the NOTE above)
            EntryNotFoundError,
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        _hub_library()

        try:
            return action()
        except GatedRepoError as exc:
            raise self.access_refused(repo_id, _status(exc)) from None
        except RevisionNotFoundError:
            raise HubRefused(
                404, "revision_not_found", f"{repo_id} has no such revision on {self.endpoint}"
            ) from None
        except RepositoryNotFoundError as exc:
            if _status(exc) in (401, 403):
                raise self.access_refused(repo_id, _status(exc), unknown=True) from None
            raise HubRefused(
                404,
                "repository_not_found",
                f"{repo_id} is not a model repository on {self.endpoint}",
            ) from None
        except EntryNotFoundError:
            raise HubRefused(404, "file_not_found", f"{repo_id} has no such file") from None
        except HfHubHTTPError as exc:
            raise HubRefused(
                502,
                "hub_error",
                f"the Hugging Face Hub at {self.endpoint} answered HTTP {_status(exc)} "
                f"for {repo_id}",
            ) from None
        except httpx2.TransportError as exc:
            raise HubRefused(
                502,
                "hub_unreachable",
                f"cannot reach the Hugging Face Hub at {self.endpoint} ({type(exc).__name__}); "
                "check the network, or HF_ENDPOINT if a mirror is meant",
            ) from None

    def access_refused(self, repo_id: str, status: int, *, unknown: bool = False) -> HubRefused:
        """The 400 that explains a 401/403 with the fix for this node."""
        page = self.page_url(repo_id)
        if self.token is None:
            what = (
                "it is private, gated or does not exist"
                if unknown
                else "it is a gated repository and this node has no Hugging Face token"
            )
            fix = (
                "configure a Hugging Face token on this node (skulk config set hf_token ..., "
                f"or HF_TOKEN in the daemon's environment) and accept the model's terms at {page}"
            )
        elif status == 401:
            what = "the configured Hugging Face token was not accepted"
            fix = "configure a valid token (skulk config set hf_token ...)"
        else:
            what = (
                "the account the configured token belongs to has no access"
                if unknown
                else "the account the configured token belongs to has not accepted its terms"
            )
            fix = (
                f"sign in at {page} as the same account the configured token belongs to and "
                "accept the model's terms (or request access), or configure a token of an "
                "account that has"
            )
        return HubRefused(
            400,
            "hub_access_refused",
            f"Hugging Face refused access to {repo_id} (HTTP {status}): {what}. Fix: {fix}.",
        )

    def resolve_commit(self, repo_id: str, revision: str | None) -> str:
        """The 40-hex commit ``revision`` (``main`` when None) names, resolved once."""
        info = self.call(
            repo_id, lambda: self.api().model_info(repo_id, revision=revision, timeout=30)
        )
        sha = info.sha or ""
        if SOURCE_REVISION_PATTERN.fullmatch(sha) is None:
            raise HubRefused(
                502, "hub_error", f"the Hub reported no full commit hash for {repo_id}"
            )
        if revision is not None and sha != revision:
            raise HubRefused(
                502, "hub_error", f"the Hub resolved {revision} of {repo_id} to another commit"
            )
        return sha

    def list_files(self, repo_id: str, commit: str) -> list[RepoFile]:
        """Every file of ``repo_id`` at ``commit``, with sizes and digests."""

        from huggingface_hub.hf_api import RepoFile as HfRepoFile  # noqa: PLC0415

        def listing() -> list[RepoFile]:
            found: list[RepoFile] = []
            for item in self.api().list_repo_tree(repo_id, revision=commit, recursive=True):
                if not isinstance(item, HfRepoFile):
                    continue
                found.append(
                    RepoFile(
                        path=item.path,
                        size=int(item.size),
                        sha256=item.lfs.sha256 if item.lfs is not None else None,
                        blob_id=item.blob_id,
                    )
                )
                if len(found) > MAX_LISTED_FILES:
                    raise HubRefused(400, "repository_too_large", f"{repo_id} lists too many files")
            return found

        return self.call(repo_id, listing)

    def file_metadata(self, repo_id: str, commit: str, path: str) -> HfFileMetadata:
        from huggingface_hub import hf_hub_url  # noqa: PLC0415  (see the NOTE above)
        from huggingface_hub.file_download import get_hf_file_metadata  # noqa: PLC0415

        url = hf_hub_url(repo_id, path, revision=commit, endpoint=self.endpoint)
        return self.call(
            repo_id,
            lambda: get_hf_file_metadata(url, token=self._auth(), endpoint=self.endpoint),
        )

    @contextlib.contextmanager
    def _range(self, url: str, start: int, end: int) -> Iterator[httpx2.Response]:
        from huggingface_hub import get_session, hf_raise_for_status  # noqa: PLC0415

        headers = {**self.headers_for(url), "Range": f"bytes={start}-{end}"}
        with get_session().stream(
            "GET", url, headers=headers, timeout=TIMEOUT_SECONDS, follow_redirects=True
        ) as response:
            hf_raise_for_status(response)
            yield response

    def read_range(self, url: str, start: int, end: int) -> bytes:
        """Bytes ``start``..``end`` (inclusive) of the file at ``url``."""
        with self._range(url, start, end) as response:
            data = bytearray()
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > end - start + 1:
                    break  # a server that ignored the range: take what was asked
            return bytes(data[: end - start + 1])

    def small_file(self, repo_id: str, commit: str, path: str) -> bytes | None:
        """A small file's bytes (``config.json``, ``README.md``), or None if absent."""
        try:
            meta = self.file_metadata(repo_id, commit, path)
        except HubRefused as refused:
            if refused.code == "file_not_found":
                return None
            raise
        if meta.size is not None and meta.size > MAX_SMALL_FILE_BYTES:
            raise HubRefused(400, "file_too_large", f"{path} of {repo_id} is too large to read")
        if meta.size == 0:
            return b""
        return self.call(
            repo_id, lambda: self.read_range(meta.location, 0, MAX_SMALL_FILE_BYTES - 1)
        )

    def json_file(self, repo_id: str, commit: str, path: str) -> dict[str, Any] | None:
        data = self.small_file(repo_id, commit, path)
        if data is None:
            return None
        try:
            value = json.loads(data)
        except ValueError:
            raise HubRefused(400, "invalid_config", f"{path} of {repo_id} is not JSON") from None
        if not isinstance(value, dict):
            raise HubRefused(400, "invalid_config", f"{path} of {repo_id} is not a JSON object")
        return value

    def gguf_header(self, repo_id: str, commit: str, path: str) -> tuple[GgufHeader, int]:
        """The GGUF header of ``path``, read with ranged requests, and the bytes fetched."""
        from skulk_core.models.gguf import GgufError  # noqa: PLC0415 - beside its use
        from skulk_daemon.hub.ranged import RangedReader  # noqa: PLC0415

        meta = self.file_metadata(repo_id, commit, path)
        if meta.size is None:
            raise HubRefused(502, "hub_error", f"the Hub reported no size for {path}")
        size = meta.size
        reader = RangedReader(
            lambda start, end: self.read_range(meta.location, start, end), size=size
        )
        try:
            header = self.call(repo_id, lambda: read_gguf_header(cast(BinaryIO, reader)))
        except GgufError as exc:
            raise HubRefused(400, "invalid_gguf", f"{path} of {repo_id}: {exc}") from None
        return header, reader.fetched


def _status(exc: HfHubHTTPError) -> int:
    response = exc.response
    return int(response.status_code) if response is not None else 0


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    default = {"https": 443, "http": 80}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), port or default
