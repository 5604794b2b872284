"""The ring's Llama, Qwen 2 and Qwen 3 layer loops answer as the whole model does.

``_mlx_stage`` replicates each supported architecture's layer loop (masks, sliding
windows, embedding scale, tied or separate head). Gemma 3's runs in
test_mlx_ring.py on the converted demo; these build tiny random-weight models with
mlx-lm's own model classes (nothing downloaded) and split each over a bare
two-rank ring on loopback (:mod:`tests.engines.mlx_ring_stage_worker`): the
temperature-0 tokens over the ring equal those of the whole model in one process,
for a first prompt and for a follow-up over the ranks' caches trimmed back to the
prefix the two share (prefix reuse).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from skulk_daemon.models.mlx_demo import mlx_installed
from skulk_daemon.telemetry.mlx_probe import mlx_runs

pytestmark = [
    pytest.mark.skipif(not (mlx_installed() and mlx_runs()), reason="MLX does not run here"),
]

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 240
VOCAB = 64
COMMON: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "vocab_size": VOCAB,
    "max_position_embeddings": 256,
    "rope_theta": 10000.0,
    "eos_token_id": VOCAB + 1,  # never sampled: every run decodes all its tokens
}
CONFIGS: dict[str, dict[str, Any]] = {
    # Separate head, and sliding-window layers between full ones (window < prompt).
    "llama": {
        **COMMON,
        "model_type": "llama",
        "tie_word_embeddings": False,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "sliding_window": 4,
    },
    "qwen2": {**COMMON, "model_type": "qwen2", "tie_word_embeddings": True},
    "qwen3": {**COMMON, "model_type": "qwen3", "tie_word_embeddings": True, "head_dim": 16},
}


def build(directory: Path, config: dict[str, Any]) -> Path:
    """A float32 random-weight model of ``config`` in mlx-lm's layout."""
    import mlx.core as mx  # noqa: PLC0415
    from mlx.utils import tree_map  # noqa: PLC0415
    from mlx_lm.utils import _get_classes, save_config, save_model  # noqa: PLC0415

    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    model.update(tree_map(lambda p: p.astype(mx.float32), model.parameters()))
    mx.eval(model.parameters())
    save_model(directory, model)
    save_config(config, directory / "config.json")
    return directory


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def ring_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each tiny model's tokens over the two-rank ring and alone, by model type."""
    tmp = tmp_path_factory.mktemp("ring-stages")
    models = [build(tmp / name, config) for name, config in CONFIGS.items()]
    hostfile = tmp / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{free_port()}"] for _ in range(2)]))
    ranks = []
    for rank in range(2):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MLX_HOSTFILE": str(hostfile)}
        ranks.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.engines.mlx_ring_stage_worker", *map(str, models)],
                cwd=ROOT,
                env={**env, "MLX_RANK": str(rank)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        outputs = [rank.communicate(timeout=WAIT_S) for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
    for rank, (_, err) in zip(ranks, outputs, strict=True):
        assert rank.returncode == 0, err[-3000:]
    answers = [json.loads(line) for line in outputs[0][0].splitlines() if line.startswith("{")]
    return {answer["model"]: answer for answer in answers}


@pytest.mark.parametrize("model_type", list(CONFIGS))
def test_the_ring_decodes_as_the_whole_model(
    ring_answers: dict[str, dict[str, Any]], model_type: str
) -> None:
    answer = ring_answers[model_type]
    assert len(answer["whole"]) == 8
    assert answer["ring"] == answer["whole"]
    # A follow-up prompt over the ranks' caches trimmed back to the shared prefix;
    # Llama's sliding-window caches are full by then, so its ranks start fresh.
    assert answer["trimmed"] == (model_type != "llama")
    assert answer["ring_again"] == answer["whole_again"]
