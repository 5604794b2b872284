"""Which engine serves a card on a node, and what that engine implies for memory."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

from skulk_core.cluster.telemetry import NodeTelemetry
from skulk_core.models.cards import ModelCard, ModelTask
from skulk_core.models.kv_cache import LLAMA_CPP_SEQUENCES, KvCacheBackend

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


class KvReservation(msgspec.Struct, frozen=True, kw_only=True):
    """How a placement's KV window is reserved on its nodes: the cells' type, and how
    many sequences get a whole window each."""

    cells: KvCacheBackend = KvCacheBackend.DEFAULT
    sequences: int = 1


F16_ONE: Final = KvReservation()
"""One window of F16 cells (MLX, which grows its cache per request; a card's estimate)."""


def kv_reservation(card: ModelCard, backend: str, serving: NodeTelemetry | None) -> KvReservation:
    """What a placement of ``card`` on ``backend`` reserves on the node that serves it,
    by that node's reading (:data:`LLAMA_CPP_SEQUENCES` slots of F16 when unknown; an
    RPC pool's driver holds every layer's cells in its context, the donors' included)."""
    if serving is None:
        return runner_reservation(card, backend)
    resources = serving.resources
    return runner_reservation(
        card, backend, cells=resources.kv_cache, slots=resources.llama_cpp_slots
    )


def runner_reservation(
    card: ModelCard,
    backend: str,
    *,
    cells: KvCacheBackend = KvCacheBackend.DEFAULT,
    slots: int = LLAMA_CPP_SEQUENCES,
) -> KvReservation:
    """What a runner of ``card`` on ``backend`` reserves: a llama.cpp text runner a
    window for each of its ``slots``, its cells of type ``cells``; a llama.cpp
    embedding runner one window; anything else one window of F16."""
    if backend != BACKEND_LLAMA_CPP:
        return KvReservation()
    if ModelTask.TEXT_GENERATION not in card.tasks:
        return KvReservation(cells=cells)
    return KvReservation(cells=cells, sequences=max(1, slots))
