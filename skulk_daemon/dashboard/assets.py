"""The dashboard's files, read once into an immutable manifest.

Only what the manifest holds is ever served, so a request path cannot leave the
directory: there is no path join at request time, ``..`` and absolute parts are
refused while the manifest is built, and a symlink (to anywhere) is never followed.
Each file carries its content type and a strong ETag (its SHA-256), so a browser
revalidates with ``If-None-Match`` and gets a 304 without the body.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Final

STATIC_DIR: Final = Path(__file__).resolve().parent / "static"
"""Where the page's files live, inside the package (the wheel carries them)."""
INDEX: Final = "index.html"
MAX_ASSET_BYTES: Final = 2 * 1024 * 1024
"""A file past this is not the dashboard's (a stray build output); it is left out."""
MAX_ASSETS: Final = 512
"""The manifest's bound: the dashboard ships tens of files, never thousands."""

CONTENT_TYPES: Final = MappingProxyType(
    {
        ".html": "text/html",
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".css": "text/css",
        ".json": "application/json",
        ".svg": "image/svg+xml",
        ".png": "image/png",
        ".ico": "image/x-icon",
        ".woff2": "font/woff2",
        ".txt": "text/plain",
    }
)
"""The types the dashboard ships; a file of any other kind is not served. (The HTTP
layer adds ``charset=utf-8`` to the text types: every file here is UTF-8.)"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Asset:
    path: str
    """Relative to ``static/``, with ``/`` separators."""
    body: bytes
    content_type: str
    etag: str
    """Quoted, as the header carries it."""


class AssetManifest:
    """The served files by relative path; built once, never touched again."""

    def __init__(self, assets: dict[str, Asset]) -> None:
        self._assets = MappingProxyType(dict(assets))

    @classmethod
    def load(cls, root: Path = STATIC_DIR) -> AssetManifest:
        assets: dict[str, Asset] = {}
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            # NOTE: os.walk lists a symlinked directory among dirnames but (with
            # followlinks=False) never descends into it; drop it so no reader wonders.
            dirnames[:] = [d for d in dirnames if not Path(dirpath, d).is_symlink()]
            for name in sorted(filenames):
                full = Path(dirpath, name)
                info = full.lstat()
                if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ASSET_BYTES:
                    continue
                content_type = CONTENT_TYPES.get(full.suffix.lower())
                if content_type is None:
                    continue
                relative = full.relative_to(root).as_posix()
                body = full.read_bytes()
                digest = hashlib.sha256(body).hexdigest()[:32]
                assets[relative] = Asset(
                    path=relative, body=body, content_type=content_type, etag=f'"{digest}"'
                )
                if len(assets) > MAX_ASSETS:
                    raise RuntimeError(f"{root} holds more than {MAX_ASSETS} dashboard files")
        if INDEX not in assets:
            raise RuntimeError(f"the dashboard's {INDEX} is missing from {root}")
        return cls(assets)

    def find(self, path: str) -> Asset | None:
        """The asset at ``path`` (relative, ``/``-separated), if it is one we serve."""
        parts = PurePosixPath(path).parts
        if not parts or any(part in {"", ".", ".."} or "\\" in part for part in parts):
            return None
        if path.startswith("/"):
            return None
        return self._assets.get(path)

    @property
    def index(self) -> Asset:
        return self._assets[INDEX]

    def paths(self) -> list[str]:
        return sorted(self._assets)
