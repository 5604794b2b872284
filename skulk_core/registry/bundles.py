"""Registry v2 artifact bundles: the content-derived ``bundle_id`` and its check.

A bundle's identity is ``bundle_`` + the SHA-256 of its canonical form (root, then
the files sorted by path with their sizes), so a changed file list or size is a
different bundle, and a card cannot claim a bundle id its content does not derive.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Final

from skulk_core.models.cards import ArtifactBundle, BundleFile
from skulk_core.models.hub_cards import is_safe_repo_path

BUNDLE_ID_PATTERN: Final = re.compile(r"bundle_[0-9a-f]{64}")


def derive_bundle_id(root: str, files: tuple[BundleFile, ...]) -> str:
    document = {"root": root, "files": sorted([f.path, f.size] for f in files)}
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return f"bundle_{hashlib.sha256(canonical.encode('ascii')).hexdigest()}"


def make_bundle(root: str, files: tuple[BundleFile, ...]) -> ArtifactBundle:
    """A bundle with its derived identity (what a publisher puts on a v2 card)."""
    ordered = tuple(sorted(files, key=lambda f: f.path))
    return ArtifactBundle(bundle_id=derive_bundle_id(root, ordered), files=ordered, root=root)


def bundle_problem(bundle: ArtifactBundle) -> str | None:
    """Why ``bundle`` cannot be used, or None."""
    if not bundle.files:
        return "its artifact bundle lists no files"
    if bundle.root and not is_safe_repo_path(bundle.root):
        return f"its artifact bundle root {bundle.root!r} escapes the repository"
    for item in bundle.files:
        if not is_safe_repo_path(item.path) or item.size < 0:
            return f"its artifact bundle file {item.path!r} is unsafe or has a negative size"
    if len({f.path for f in bundle.files}) != len(bundle.files):
        return "its artifact bundle lists a file twice"
    expected = derive_bundle_id(bundle.root, bundle.files)
    if bundle.bundle_id != expected:
        return (
            f"its artifact bundle claims {bundle.bundle_id!r} but its content derives {expected!r}"
        )
    return None
