"""Import a GGUF file already on this machine as an installed model.

The card comes from the file's header (architecture, layers, KV geometry, context
length, chat template); the bytes are hashed (SHA-256, recorded in the model's
manifest) and **hard-linked** into the models dir, never copied.

Why a hard link rather than a recorded reference to the original path: the models
dir stays self-contained (the node's installed-model scan, and every later reader,
find ``<model dir>/<file>`` as for any other model), the model survives the user
moving or deleting the original, and the link costs no space. Its limit is that both
paths must be on one filesystem; across filesystems the import is refused with that
reason rather than silently copying gigabytes. The manifest keeps the original path
and the digest, so a later check can tell if the shared inode was changed in place.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from pathlib import Path, PurePosixPath

from skulk_core.models.cards import ModelCard
from skulk_core.models.catalog import InstalledModel
from skulk_core.models.gguf import GgufError, read_gguf_header
from skulk_core.models.hub_cards import HubCardError, card_from_gguf
from skulk_core.models.local_import import (
    ImportRefusedError,
    check_import_path,
    check_model_id,
    check_resolved,
    default_model_id,
)
from skulk_daemon.hub.download import DownloadRefused
from skulk_daemon.hub.manifest import ManifestFile, file_digests, write_manifest
from skulk_daemon.models.packaged import install_lock
from skulk_daemon.models.sidecar import model_dir_name, sidecar_path, write_sidecar
from skulk_daemon.node.node import Node


async def import_gguf(node: Node, raw_path: str, model_id: str | None) -> InstalledModel:
    """Import ``raw_path``; raises :class:`DownloadRefused` with the status to answer."""
    try:
        given = check_import_path(raw_path)
        alias = check_model_id(model_id) if model_id is not None else default_model_id(given)
    except ImportRefusedError as exc:
        raise DownloadRefused(400, "invalid_import", str(exc)) from None
    resolved = await asyncio.to_thread(_locate, node, raw_path, given)
    if node.catalog().get(alias) is not None:
        raise DownloadRefused(
            409,
            "model_exists",
            f"{alias} is already in the catalog; pass another model_id for this import",
        )
    model_dir = node.models_dir / model_dir_name(alias)
    installed = await asyncio.to_thread(_install, resolved, model_dir, alias)
    node.installed_models.insert(0, installed)
    return installed


def _locate(node: Node, raw_path: str, given: PurePosixPath) -> Path:
    source = Path(given)
    if not source.exists():
        raise DownloadRefused(404, "file_not_found", f"{raw_path} does not exist on this node")
    resolved = source.resolve()
    if not resolved.is_file():
        raise DownloadRefused(400, "invalid_import", f"{raw_path} is not a regular file")
    models_dir = node.models_dir.resolve()
    # The models dir may lie inside the data dir (the default); its files are fair game.
    private = (
        []
        if resolved.is_relative_to(models_dir)
        else [
            PurePosixPath(p.resolve()) for p in (node.settings.data_dir, node.settings.config_home)
        ]
    )
    try:
        check_resolved(PurePosixPath(resolved), private)
    except ImportRefusedError as exc:
        raise DownloadRefused(400, "invalid_import", str(exc)) from None
    return resolved


def _install(source: Path, model_dir: Path, alias: str) -> InstalledModel:
    try:
        with source.open("rb") as handle:
            header = read_gguf_header(handle)
    except GgufError as exc:
        raise DownloadRefused(
            400, "not_gguf", f"{source} is not a usable GGUF file: {exc}"
        ) from None
    except PermissionError:
        raise DownloadRefused(403, "unreadable", f"{source} is not readable by Skulk") from None
    size = source.stat().st_size
    with install_lock(model_dir):
        if sidecar_path(model_dir).exists():
            raise DownloadRefused(409, "model_exists", f"{model_dir} already holds a model")
        target = model_dir / source.name
        try:
            os.link(source, target)
        except FileExistsError:
            if not os.path.samefile(source, target):
                raise DownloadRefused(
                    409, "model_exists", f"{target} exists and is another file"
                ) from None
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                raise DownloadRefused(
                    409,
                    "cross_device",
                    f"{source} is on another filesystem than the models dir {model_dir.parent}; "
                    "Skulk imports by hard link (no second copy), so move the file onto that "
                    "filesystem (or set SKULK_MODELS_DIR to one beside it) and import again",
                ) from None
            raise
        sha256, _ = file_digests(target)
        if target.stat().st_size != size:
            target.unlink()
            raise DownloadRefused(409, "file_changed", f"{source} changed while it was imported")
        try:
            card: ModelCard = card_from_gguf(
                model_id=alias,
                header=header,
                gguf_file=source.name,
                storage_bytes=size,
                source_repository=None,
                source_revision=None,
                is_custom=False,
            )
        except HubCardError as exc:
            target.unlink()
            raise DownloadRefused(400, "not_gguf", str(exc)) from None
        write_manifest(
            model_dir,
            (ManifestFile(path=source.name, size=size, sha256=sha256, linked_from=str(source)),),
        )
        installed_at = int(time.time())
        write_sidecar(model_dir, card, installed_at)
    return InstalledModel(card=card, location=str(model_dir), installed_at=installed_at)
