"""A Hugging-Face-compatible hub on loopback, speaking what ``huggingface-hub`` calls.

Endpoints (as ``huggingface_hub`` 2.x builds them; see ``hf_api.py`` and
``file_download.py``):

- ``GET /api/models`` (``list_models``): ``search``, ``author``, ``pipeline_tag``,
  ``sort`` (``downloads`` or ``trendingScore``), ``limit``, ``expand``/``full``.
- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}`` (``model_info``):
  ``sha`` (the 40-hex commit) and ``siblings``, sizes with ``blobs=true``.
- ``GET /api/models/{repo}/tree/{rev}[/{path}]`` (``list_repo_tree``): files with
  ``oid``, ``size`` and ``lfs`` (``oid`` is the SHA-256) for large files.
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}`` (``get_hf_file_metadata``,
  ``http_get``): ``X-Repo-Commit``, ``ETag``, ``X-Linked-Size``/``X-Linked-Etag`` for
  LFS files, and ``Range: bytes=a-b`` answered 206.

Errors carry the Hub's ``X-Error-Code`` headers, which ``hf_raise_for_status`` maps to
its exception types: an unknown repository is 401 ``RepoNotFound`` without a token
and 404 with one (the Hub does not tell a private repository from a missing one to an
anonymous caller); a gated repository's files are 401 ``GatedRepo`` without a token
and 403 ``GatedRepo`` with a token that has not accepted the terms. Model info of a
gated repository stays public, as on the Hub.

Files are bytes or paths (the demo GGUF is served from where it lies, never copied).
``served[path]`` counts the body bytes sent per file, so a test can prove that a
header read fetched only the header.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

LFS_THRESHOLD = 10 * 1024
_CHUNK = 64 * 1024
_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class HubFile:
    source: bytes | Path

    def size(self) -> int:
        return len(self.source) if isinstance(self.source, bytes) else self.source.stat().st_size

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` inclusive."""
        if isinstance(self.source, bytes):
            return self.source[start : end + 1]
        with self.source.open("rb") as handle:
            handle.seek(start)
            return handle.read(end - start + 1)

    def digests(self) -> tuple[str, str]:
        """(SHA-256, git blob SHA-1)."""
        sha = hashlib.sha256()
        if isinstance(self.source, bytes):
            sha.update(self.source)
            return sha.hexdigest(), git_blob_sha1(self.source)
        git = hashlib.sha1(b"blob %d\0" % self.size())
        with self.source.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                sha.update(chunk)
                git.update(chunk)
        return sha.hexdigest(), git.hexdigest()

    @property
    def lfs(self) -> bool:
        return self.size() > LFS_THRESHOLD


@dataclass
class HubRepo:
    repo_id: str
    files: dict[str, HubFile]
    commit: str = ""
    gated: bool = False
    pipeline_tag: str | None = "text-generation"
    library_name: str | None = None
    downloads: int = 0
    trending_score: int = 0
    tags: tuple[str, ...] = ()
    card_data: dict[str, Any] = field(default_factory=dict)
    gguf: dict[str, Any] | None = None
    safetensors: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not self.commit:
            self.commit = hashlib.sha1(self.repo_id.encode()).hexdigest()
        self._digests: dict[str, tuple[str, str]] = {}

    def digests(self, path: str) -> tuple[str, str]:
        if path not in self._digests:
            self._digests[path] = self.files[path].digests()
        return self._digests[path]

    def etag(self, path: str) -> str:
        sha256, sha1 = self.digests(path)
        return sha256 if self.files[path].lfs else sha1


@dataclass
class FakeHub:
    """Start with ``with FakeHub(repos) as hub:``; ``hub.url`` is its ``HF_ENDPOINT``."""

    repos: list[HubRepo]
    authorized_tokens: frozenset[str] = frozenset()
    """Tokens that have accepted every gated repository's terms."""
    known_tokens: frozenset[str] = frozenset()
    """Tokens the hub knows (``authorized_tokens`` are known too)."""
    drop_after: dict[str, int] = field(default_factory=dict)
    """Once per path: hang up after sending this many body bytes (a hub dying mid-file)."""
    bytes_per_second: float | None = None
    """Throttle for file bodies, so a download can be watched and cancelled."""
    served: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    requests: list[str] = field(default_factory=list)
    ranges: list[tuple[str, int]] = field(default_factory=list)
    """(path, first byte) of every ranged GET of a file."""
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def repo(self, repo_id: str) -> HubRepo | None:
        return next((r for r in self.repos if r.repo_id == repo_id), None)

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing ----------------------------------------------------------------

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth.removeprefix("Bearer ").strip() or None if auth.startswith("Bearer ") else None

    def _send(
        self,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        *,
        head: bool = False,
    ) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        self._send(status, json.dumps(value).encode(), all_headers, head=self.command == "HEAD")

    def _error(
        self, status: int, code: str, message: str, extra: dict[str, str] | None = None
    ) -> None:
        headers = {"X-Error-Code": code, "X-Error-Message": message, **(extra or {})}
        self._json(status, {"error": message}, headers)

    def _repo_missing(self) -> None:
        status = 404 if self._token() else 401
        self._error(status, "RepoNotFound", "Repository not found")

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def _route(self) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = parse_qs(parts.query)
        self.hub.requests.append(f"{self.command} {parts.path}")
        if path == "/api/models":
            return self._search(query)
        if path.startswith("/api/models/"):
            return self._api_model(path.removeprefix("/api/models/"), query)
        match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if match:
            return self._resolve(match.group(1), match.group(2), match.group(3))
        self._error(404, "EntryNotFound", "Not found")

    # -- API -----------------------------------------------------------------------

    def _info(self, repo: HubRepo, *, blobs: bool) -> dict[str, Any]:
        siblings = []
        for name, item in sorted(repo.files.items()):
            sibling: dict[str, Any] = {"rfilename": name}
            if blobs:
                sibling["size"] = item.size()
                sibling["blobId"] = repo.digests(name)[1]
                if item.lfs:
                    sibling["lfs"] = {
                        "size": item.size(),
                        "sha256": repo.digests(name)[0],
                        "pointerSize": 134,
                    }
            siblings.append(sibling)
        info: dict[str, Any] = {
            "_id": repo.commit[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": repo.commit,
            "private": False,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "downloads": repo.downloads,
            "likes": 0,
            "trendingScore": repo.trending_score,
            "tags": list(repo.tags),
            "pipeline_tag": repo.pipeline_tag,
            "library_name": repo.library_name,
            "cardData": repo.card_data,
            "siblings": siblings,
            "lastModified": "2026-01-01T00:00:00.000Z",
            "createdAt": "2026-01-01T00:00:00.000Z",
        }
        if repo.gguf is not None:
            info["gguf"] = repo.gguf
        if repo.safetensors is not None:
            info["safetensors"] = repo.safetensors
        return info

    def _search(self, query: dict[str, list[str]]) -> None:
        text = (query.get("search") or [""])[0].lower()
        author = query["author"][0] if query.get("author") else None
        task = query["pipeline_tag"][0] if query.get("pipeline_tag") else None
        sort = (query.get("sort") or ["downloads"])[0]
        limit = int((query.get("limit") or ["1000"])[0])
        found = [
            repo
            for repo in self.hub.repos
            if text in repo.repo_id.lower()
            and (author is None or repo.repo_id.split("/")[0] == author)
            and (task is None or repo.pipeline_tag == task)
        ]
        key = "trending_score" if sort == "trendingScore" else "downloads"
        found.sort(key=lambda repo: (-getattr(repo, key), repo.repo_id))
        full = bool(query.get("full")) or "siblings" in query.get("expand", [])
        items = []
        for repo in found[:limit]:
            info = self._info(repo, blobs=False)
            if not full:
                info.pop("siblings")
            items.append(info)
        self._json(200, items)

    def _api_model(self, rest: str, query: dict[str, list[str]]) -> None:
        owner, _, rest = rest.partition("/")
        name, _, rest = rest.partition("/")
        repo = self.hub.repo(f"{owner}/{name}")
        if repo is None:
            return self._repo_missing()
        if rest == "":
            return self._json(200, self._info(repo, blobs=bool(query.get("blobs"))))
        kind, _, rest = rest.partition("/")
        revision, _, sub = rest.partition("/")
        if revision not in ("main", repo.commit):
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        if kind == "revision" and not sub:
            return self._json(200, self._info(repo, blobs=bool(query.get("blobs"))))
        if kind == "tree":
            return self._tree(
                repo, sub, recursive=(query.get("recursive") or [""])[0].lower() == "true"
            )
        self._error(404, "EntryNotFound", "Not found")

    def _tree(self, repo: HubRepo, prefix: str, *, recursive: bool) -> None:
        base = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        entries: list[dict[str, Any]] = []
        folders: set[str] = set()
        for name in sorted(repo.files):
            if not name.startswith(base):
                continue
            rest = name[len(base) :]
            if "/" in rest and not recursive:
                folder = base + rest.split("/")[0]
                if folder not in folders:
                    folders.add(folder)
                    entries.append(
                        {"type": "directory", "oid": "0" * 40, "size": 0, "path": folder}
                    )
                continue
            item = repo.files[name]
            entry: dict[str, Any] = {
                "type": "file",
                "oid": repo.digests(name)[1],
                "size": item.size(),
                "path": name,
            }
            if item.lfs:
                entry["lfs"] = {
                    "oid": repo.digests(name)[0],
                    "size": item.size(),
                    "pointerSize": 134,
                }
            entries.append(entry)
        self._json(200, entries)

    # -- files ---------------------------------------------------------------------

    def _resolve(self, repo_id: str, revision: str, path: str) -> None:
        repo = self.hub.repo(repo_id)
        if repo is None:
            return self._repo_missing()
        commit = {"X-Repo-Commit": repo.commit}
        if revision not in ("main", repo.commit):
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        if repo.gated:
            token = self._token()
            if token is None:
                message = (
                    f"Access to model {repo_id} is restricted. You must have access to it "
                    "and be authenticated to access it. Please log in."
                )
                return self._error(401, "GatedRepo", message, commit)
            if token not in self.hub.authorized_tokens:
                message = (
                    f"Access to model {repo_id} is restricted and you are not in the "
                    f"authorized list. Visit https://huggingface.co/{repo_id} to ask for access."
                )
                return self._error(403, "GatedRepo", message, commit)
        item = repo.files.get(path)
        if item is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist", commit)
        size = item.size()
        etag = repo.etag(path)
        headers = {
            **commit,
            "ETag": f'"{etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if item.lfs:
            headers["X-Linked-Etag"] = f'"{etag}"'
            headers["X-Linked-Size"] = str(size)
        start, end, status = 0, size - 1, 200
        wanted = self.headers.get("Range")
        if wanted:
            match = _RANGE.fullmatch(wanted.strip())
            if match is None:
                return self._error(400, "BadRange", "bad range")
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            if start >= size or start > end:
                headers["Content-Range"] = f"bytes */{size}"
                return self._send(416, b"", headers, head=self.command == "HEAD")
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            status = 206
            if self.command == "GET":
                self.hub.ranges.append((path, start))
        length = end - start + 1
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if self.command == "HEAD":
            return
        self._stream(item, path, start, end)

    def _stream(self, item: HubFile, path: str, start: int, end: int) -> None:
        position = start
        rate = self.hub.bytes_per_second
        drop = self.hub.drop_after.pop(path, None)
        try:
            while position <= end:
                if drop is not None and position - start >= drop:
                    self.close_connection = True  # the body stops short of its length
                    return
                chunk = item.read(position, min(end, position + _CHUNK - 1))
                self.wfile.write(chunk)
                self.hub.served[path] += len(chunk)
                position += len(chunk)
                if rate:
                    time.sleep(len(chunk) / rate)
        except (BrokenPipeError, ConnectionResetError):
            return


@contextmanager
def pointed_at(hub: FakeHub) -> Iterator[FakeHub]:
    """``HF_ENDPOINT`` names ``hub`` for the block (as it was after)."""
    previous = os.environ.get("HF_ENDPOINT")
    os.environ["HF_ENDPOINT"] = hub.url
    try:
        yield hub
    finally:
        if previous is None:
            os.environ.pop("HF_ENDPOINT", None)
        else:
            os.environ["HF_ENDPOINT"] = previous
