"""Reading a release directory: one owner-configured HTTPS directory, nothing else.

Every request goes to ``base_url`` + a plain file name the signed metadata (or the
source configuration) names; callers never supply a URL. Redirects are refused (never
followed), compressed or otherwise encoded responses are refused (``Accept-Encoding:
identity`` is sent and the raw bytes are read, so nothing is decompressed), and any
status but 200 is refused. Metadata is read to at most 128 KiB within 20 s; artifacts
to exactly their signed size within one 180 s budget for the whole transfer, streamed
to a temporary file, checked (size and SHA-256) and only then renamed into place.

The TLS trust is an explicit ``ssl.SSLContext`` from the caller; environment proxies
and ``.netrc`` are ignored. The optional bearer token goes only in the
``Authorization`` header to that directory's origin, and never into an error or a log.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import ssl
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import quote, urlsplit

from skulk_core.plugins.documents import MAX_METADATA_BYTES, SignedArtifact
from skulk_core.plugins.errors import PluginRefusal, refuse
from skulk_host.fsutil import fsync_dir

if TYPE_CHECKING:
    import httpx

METADATA_DEADLINE_SECONDS: Final = 20.0
ARTIFACT_DEADLINE_SECONDS: Final = 180.0
"""One budget for every artifact of a release together."""
CHUNK_BYTES: Final = 64 * 1024
FILE_NAME: Final = re.compile(r"^[A-Za-z0-9_.+!-]{1,200}$")


class FeedSource:
    """An HTTPS directory (ending in ``/``) and its optional write-only bearer token."""

    __slots__ = ("_token", "base_url", "label")

    def __init__(
        self, base_url: str, token: str | None = None, *, label: str = "release directory"
    ) -> None:
        self.label = label
        """What messages call it: the release directory, the catalog address."""
        parts = urlsplit(base_url)
        if parts.scheme != "https" or not parts.hostname:
            raise refuse("source_invalid", f"The {label} must be an https:// URL.")
        if not parts.path.endswith("/") or parts.query or parts.fragment:
            raise refuse(
                "source_invalid", f"The {label} must end in / and carry no query or fragment."
            )
        if parts.username is not None or parts.password is not None:
            raise refuse("source_invalid", f"The {label} must not carry credentials in it.")
        self.base_url = base_url
        self._token = token

    @property
    def has_token(self) -> bool:
        return self._token is not None

    def url(self, filename: str) -> str:
        if not FILE_NAME.match(filename) or filename in (".", ".."):
            raise refuse("source_invalid", "A release file is a plain name in its directory.")
        return self.base_url + quote(filename)

    def headers(self) -> dict[str, str]:
        headers = {"Accept-Encoding": "identity", "User-Agent": "skulk-plugin-manager"}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    def __repr__(self) -> str:
        return f"FeedSource({self.base_url!r}, token={'<set>' if self._token else None})"


class FeedClient:
    """Reads metadata and artifacts from one :class:`FeedSource`."""

    def __init__(self, source: FeedSource, tls: ssl.SSLContext) -> None:
        import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

        self.source = source
        # NOTE: trust_env=False: no proxy, no .netrc, no SSL_CERT_FILE from the
        # environment; the caller's context is the only trust.
        self._http = httpx.Client(
            verify=tls, follow_redirects=False, trust_env=False, headers=source.headers()
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> FeedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def metadata(self, filename: str) -> bytes:
        """A signed document from the directory, at most 128 KiB."""
        deadline = time.monotonic() + METADATA_DEADLINE_SECONDS
        body = bytearray()
        for chunk in self._get(filename, deadline, MAX_METADATA_BYTES, "metadata"):
            body += chunk
        return bytes(body)

    def artifact(self, artifact: SignedArtifact, destination: Path, deadline: float) -> None:
        """Download one signed artifact (a wheel or the bundle archive) to ``destination``
        (checked, then renamed)."""
        destination.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=destination.parent, prefix=".partial-")
        digest = hashlib.sha256()
        size = 0
        try:
            with os.fdopen(fd, "wb") as handle:
                for chunk in self._get(artifact.filename, deadline, artifact.bytes, "artifact"):
                    handle.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            if size != artifact.bytes:
                raise refuse(
                    "size_mismatch",
                    f"{artifact.filename} is {size} bytes; the release signs {artifact.bytes}.",
                )
            if digest.hexdigest() != artifact.sha256:
                raise refuse(
                    "digest_mismatch",
                    f"{artifact.filename} does not match its signed SHA-256.",
                )
            os.replace(tmp_name, destination)
            fsync_dir(destination.parent)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
            raise

    def _get(self, filename: str, deadline: float, limit: int, kind: str) -> Iterator[bytes]:
        """The raw body of one GET, refused on a redirect, an encoding, a status or a
        bound; ``deadline`` (monotonic) covers connecting and every chunk."""
        import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

        def remaining() -> float:
            left = deadline - time.monotonic()
            if left <= 0:
                raise refuse("unreachable", f"Reading {filename} ran past its deadline.")
            return left

        url = self.source.url(filename)
        try:
            timeout = httpx.Timeout(min(remaining(), METADATA_DEADLINE_SECONDS))
            with self._http.stream("GET", url, timeout=timeout) as response:
                _check_response(response, filename, self.source.label)
                declared = response.headers.get("Content-Length")
                if declared is not None and declared.isdigit() and int(declared) > limit:
                    raise _too_large(filename, limit, kind)
                seen = 0
                for chunk in response.iter_raw(CHUNK_BYTES):
                    seen += len(chunk)
                    if seen > limit:
                        raise _too_large(filename, limit, kind)
                    remaining()
                    yield chunk
        except httpx.HTTPError:
            # NOTE: an httpx message can carry the URL; only the file name is shown.
            raise refuse(
                "unreachable",
                f"The {self.source.label} cannot be reached from this host (reading {filename}).",
            ) from None


def _too_large(name: str, limit: int, kind: str) -> PluginRefusal:
    if kind == "metadata":
        return refuse("too_large", f"{name} is larger than the {limit}-byte metadata bound.")
    return refuse("size_mismatch", f"{name} is larger than its signed size of {limit} bytes.")


def _check_response(response: httpx.Response, name: str, label: str) -> None:
    if response.is_redirect or 300 <= response.status_code < 400:
        raise refuse(
            "redirected",
            f"The {label} redirected the request for {name}; redirects are refused.",
        )
    if response.status_code != 200:
        raise refuse(
            "http_status",
            f"The {label} answered HTTP {response.status_code} for {name}.",
        )
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise refuse(
            "encoded_response",
            f"The {label} sent {name} with a {encoding} encoding; "
            "only unencoded responses are accepted.",
        )
