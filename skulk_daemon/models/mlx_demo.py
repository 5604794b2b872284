"""The MLX demo: the Gemma 3 270M demo converted to MLX's own layout (4-bit).

No MLX weights can be downloaded here, so the packaged GGUF is converted: assembled
from its package, dequantized into the Hugging Face layout and quantized by
``mlx-lm``'s own converter (:mod:`skulk_daemon.models.gguf_to_hf`, in a subprocess).
Same weights as the llama.cpp demo, re-quantized, so answers track it closely.

Unlike the other demos it is not installed at every first start: the conversion
takes minutes of CPU, which no node should pay before it answers. ``skulk models
add local/gemma-3-270m-mlx-4bit`` installs it (as it re-adds any demo), and only
where the MLX engine is installed.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

from skulk_core.ids import ModelId
from skulk_core.models.cards import Memory, ModelCard, ModelKind, ModelTask
from skulk_core.models.catalog import InstalledModel
from skulk_daemon.models.demo import DEMO_BASE_MODEL, DEMO_LICENSE, load_demo_package
from skulk_daemon.models.packaged import install_once

log = logging.getLogger(__name__)

MLX_DEMO_MODEL_ID: Final = ModelId("local/gemma-3-270m-mlx-4bit")
MLX_DEMO_DISPLAY_NAME: Final = "Gemma 3 270M MLX 4-bit (demo, converted)"
MLX_DEMO_BACKENDS: Final = ("mlx",)
MLX_DEMO_BITS: Final = 4
MLX_WEIGHTS: Final = "model.safetensors"
CONVERSION_TIMEOUT_S: Final = 1800.0
"""A 2-core machine under load takes a few minutes; past this something is wrong."""


def mlx_installed() -> bool:
    """Whether ``mlx`` and ``mlx-lm`` are importable here (found, not imported)."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in ("mlx", "mlx_lm"))
    except (ImportError, ValueError):
        return False


def install_mlx_demo(models_dir: Path) -> InstalledModel | None:
    """Convert and record the MLX demo under ``models_dir``; idempotent (blocking)."""
    package = load_demo_package()
    if package is None or not mlx_installed():
        return None
    return install_once(
        models_dir,
        MLX_DEMO_MODEL_ID,
        "MLX demo",
        lambda model_dir: _install(package.assemble, str(package.MODEL_NAME), model_dir),
        artifact=MLX_WEIGHTS,
    )


def _install(assemble: object, file_name: str, model_dir: Path) -> ModelCard:
    assert callable(assemble)
    # NOTE: everything is built in a scratch dir inside the model dir and moved in
    # file by file, the weights last; install_once writes the card only after that,
    # so a crash leaves no record describing half a model.
    with tempfile.TemporaryDirectory(dir=model_dir, prefix=".convert-") as scratch:
        work = Path(scratch)
        gguf = work / file_name
        assemble(gguf, overwrite=True)
        out = work / "mlx"
        command = [
            sys.executable,
            "-m",
            "skulk_daemon.models.gguf_to_hf",
            str(gguf),
            str(work / "hf"),
            str(out),
            str(MLX_DEMO_BITS),
        ]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=CONVERSION_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            tail = (done.stderr or "").strip().splitlines()[-3:]
            raise ValueError(f"the MLX conversion failed: {' | '.join(tail)}")
        names = sorted(path.name for path in out.iterdir() if path.name != MLX_WEIGHTS)
        for name in [*names, MLX_WEIGHTS]:
            shutil.move(str(out / name), str(model_dir / name))
    return mlx_demo_card(model_dir)


def mlx_demo_card(model_dir: Path) -> ModelCard:
    """The MLX demo's card, with its geometry read from the converted ``config.json``."""
    config = json.loads((model_dir / "config.json").read_text())
    size = sum(path.stat().st_size for path in model_dir.iterdir() if path.is_file())
    return ModelCard(
        model_id=MLX_DEMO_MODEL_ID,
        storage_size=Memory(in_bytes=size),
        n_layers=int(config["num_hidden_layers"]),
        tasks=(ModelTask.TEXT_GENERATION,),
        hidden_size=int(config["hidden_size"]),
        architecture="gemma3",
        context_length=int(config["max_position_embeddings"]),
        num_key_value_heads=int(config["num_key_value_heads"]),
        head_dim=int(config["head_dim"]),
        num_attention_heads=int(config["num_attention_heads"]),
        # A base checkpoint, like the GGUF demo it comes from: no chat template.
        chat_template=None,
        model_kind=ModelKind.BASE,
        bos_token="<bos>",
        eos_token="<eos>",
        compatible_backends=MLX_DEMO_BACKENDS,
        base_model=DEMO_BASE_MODEL,
        quantization=f"MLX {MLX_DEMO_BITS}-bit",
        display_name=MLX_DEMO_DISPLAY_NAME,
        license=DEMO_LICENSE,
    )
