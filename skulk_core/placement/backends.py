"""Which engine serves a card on a node, and what that engine implies for memory."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from skulk_core.cluster.telemetry import NodeTelemetry
from skulk_core.models.cards import ModelCard
from skulk_core.models.kv_cache import KvCacheBackend

BACKEND_LLAMA_CPP: Final = "llama_cpp"
BACKEND_MLX: Final = "mlx"
BACKEND_CTRANSLATE2: Final = "ctranslate2"
"""faster-whisper's engine (speech to text)."""
BACKEND_ONNXRUNTIME: Final = "onnxruntime"
"""ONNX voices (text to speech)."""
BACKEND_SD_CPP: Final = "stable_diffusion_cpp"
"""stable-diffusion.cpp (text to image, image to image)."""

# Engines that allocate the whole KV window when they load the model. For them the
# window is a commitment; MLX grows its cache per request instead.
RESERVING_BACKENDS: Final = frozenset({BACKEND_LLAMA_CPP})


def card_backends(card: ModelCard) -> tuple[str, ...]:
    """The engines that can serve ``card``, most preferred first.

    A card's declared ``compatible_backends`` win. A card that declares none is served
    by llama.cpp when it names a GGUF file, else by MLX (safetensors weights).
    """
    if card.compatible_backends:
        return card.compatible_backends
    return (BACKEND_LLAMA_CPP,) if card.gguf_file else (BACKEND_MLX,)


def usable_backends(card: ModelCard, offered: Iterable[str]) -> tuple[str, ...]:
    """The card's backends this node offers, in the card's order of preference."""
    available = set(offered)
    return tuple(backend for backend in card_backends(card) if backend in available)


def common_backend(card: ModelCard, offered_per_node: Sequence[Iterable[str]]) -> str | None:
    """The card's most preferred backend that every node offers, if any."""
    shared = set(card_backends(card))
    for offered in offered_per_node:
        shared &= set(offered)
    return next((backend for backend in card_backends(card) if backend in shared), None)


def is_mlx_card(card: ModelCard) -> bool:
    """Whether MLX serves ``card``: its weights are MLX safetensors, not a GGUF file."""
    return card.gguf_file is None and card.audio is None and BACKEND_MLX in card_backends(card)


def reserves_context_at_load(backend: str) -> bool:
    return backend in RESERVING_BACKENDS


def kv_cache_of(backend: str, serving: NodeTelemetry | None) -> KvCacheBackend:
    """The KV cell type a placement on ``backend`` is sized at: for llama.cpp, the type
    of the node that serves it (``serving``'s reading; an RPC pool's driver holds
    every layer's cells in its context, the donors' included), else F16."""
    if backend != BACKEND_LLAMA_CPP or serving is None:
        return KvCacheBackend.DEFAULT
    return serving.resources.kv_cache
