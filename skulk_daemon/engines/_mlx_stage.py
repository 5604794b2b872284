"""One rank's layers of a Pipeline-sharded MLX model, and the wire between ranks.

An ``MlxRing`` instance splits a model's layers across ranks in device-rank order:
rank 0 (the node that serves requests) embeds the tokens, runs the first layers,
and computes the logits; every later rank runs only its own layers. Each rank
builds the model lazily and materializes only the weights it uses, so a rank's
memory holds its layers (plus, on rank 0, the embeddings and the head).

Rank 0 drives every step over ``mx.distributed`` (the ring backend, TCP): it sends
a :data:`HEADER_LEN` int32 header, then the hidden states, to rank 1; each rank
runs its layers with its own KV cache and passes the result on; the last rank
sends it back to rank 0. Headers:

- ``[FORWARD, n_tokens, dtype, 0]`` followed by ``[1, n_tokens, hidden]`` states;
- ``[RESET, 0, 0, 0]``: a new sequence starts (fresh KV caches);
- ``[TRIM, keep, 0, 0]``: a new sequence starts from the first ``keep`` tokens of
  the last one (every rank trims its KV caches back to them: prefix reuse);
- ``[STOP, 0, 0, 0]``: the instance is going away.

Every receive first sleeps until its bytes have arrived (:mod:`._mlx_ring_wait`):
MLX's own receive spins while it waits.

Supported model types: :data:`RING_MODEL_TYPES` (their layer loops are replicated
here; other architectures are refused by name).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Final

import mlx.core as mx
from mlx.nn.layers.base import Module
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache, RotatingKVCache, make_prompt_cache

# NOTE: mlx-lm's common base of the per-layer KV caches (KVCache, RotatingKVCache, ...).
from mlx_lm.models.cache import _BaseCache as LayerCache
from mlx_lm.utils import load_model

from skulk_daemon.engines._mlx_ring_wait import RingWait

log = logging.getLogger(__name__)

HEADER_LEN: Final = 4
FORWARD: Final = 1
RESET: Final = 2
STOP: Final = 3
TRIM: Final = 4
DTYPES: Final = (mx.float32, mx.float16, mx.bfloat16)
RING_MODEL_TYPES: Final = ("gemma3_text", "llama", "qwen2", "qwen3")


class StageError(Exception):
    """This rank cannot hold its share of the model."""


def ring_refusal(model_dir: Path) -> str | None:
    """Why the model in ``model_dir`` cannot be split over an MLX ring, or None."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError) as exc:
        return f"cannot read {model_dir.name}/config.json: {exc}"
    model_type = config.get("model_type")
    if model_type not in RING_MODEL_TYPES:
        return (
            f"MlxRing splits {', '.join(RING_MODEL_TYPES)} models by layers; "
            f"{model_dir.name} is {model_type!r}"
        )
    return None


class Stage:
    """Layers ``[start, end)`` of the model in ``model_dir`` (see the module docstring)."""

    def __init__(self, model_dir: Path, start: int, end: int, *, first: bool) -> None:
        refused = ring_refusal(model_dir)
        if refused is not None:
            raise StageError(refused)
        try:
            model, config = load_model(model_dir, lazy=True)
        except (ValueError, OSError, KeyError) as exc:
            raise StageError(f"MLX cannot load {model_dir.name}: {exc}") from exc
        self.model: Any = model
        eos = config.get("eos_token_id")
        self.eos_token_ids: int | list[int] | None = eos
        inner = model.model
        n_layers = len(inner.layers)
        if not 0 <= start < end <= n_layers:
            raise StageError(f"layers [{start}, {end}) are not within the model's {n_layers}")
        self.start = start
        self.end = end
        self.first = first
        self.args: Any = model.args
        self.model_type: str = model.args.model_type
        # Only this rank's weights are ever evaluated: the others stay unread on disk.
        self.layers: list[Any] = list(inner.layers[start:end])
        wanted: list[Any] = [layer.parameters() for layer in self.layers]
        if first:
            wanted.append(inner.embed_tokens.parameters())
            wanted.append(inner.norm.parameters())
            if not _tied(model):
                wanted.append(model.lm_head.parameters())
        mx.eval(wanted)
        self.hidden_size: int = int(model.args.hidden_size)
        self.trim_below = _trim_bound(model)
        """Every rank's caches can be trimmed while they hold fewer tokens than this."""

    def make_cache(self) -> list[LayerCache]:
        # NOTE: mlx-lm's own choice per layer (KVCache, RotatingKVCache, ...); only
        # some model classes define make_cache().
        caches = make_prompt_cache(self.model)
        return list(caches[self.start : self.end])

    def embed(self, tokens: mx.array) -> mx.array:
        inner = self.model.model
        h: mx.array = inner.embed_tokens(tokens)
        if self.model_type == "gemma3_text":
            h = h * mx.array(self.hidden_size**0.5, mx.bfloat16).astype(h.dtype)
        return h

    def run_layers(self, h: mx.array, cache: list[LayerCache]) -> mx.array:
        for index, (layer, c) in enumerate(zip(self.layers, cache, strict=True)):
            h = layer(h, self._mask(h, self.start + index, layer, c), c)
        return h

    def logits(self, h: mx.array) -> mx.array:
        inner = self.model.model
        out = inner.norm(h)
        head = inner.embed_tokens.as_linear if _tied(self.model) else self.model.lm_head
        logits: mx.array = head(out)
        return logits

    def _mask(
        self, h: mx.array, index: int, layer: Module, cache: LayerCache
    ) -> mx.array | str | None:
        """The mask the whole model gives layer ``index``: windowed for a sliding
        layer (Gemma 3's pattern; Llama's ``sliding_attention`` layer types)."""
        if self.model_type == "gemma3_text":
            pattern = int(self.args.sliding_window_pattern)
            sliding = pattern > 1 and index % pattern != pattern - 1
        else:
            sliding = bool(getattr(layer, "use_sliding", False))
        if sliding:
            mask: mx.array | str | None = create_attention_mask(
                h, cache, window_size=self.args.sliding_window
            )
            return mask
        mask = create_attention_mask(h, cache)
        return mask


def _trim_bound(model: Module) -> int:
    """How many tokens the whole model's caches (every rank's: one model) may hold
    and still be trimmed back: a rotating (sliding-window) cache loses its oldest
    entries once full; other kinds are never trimmed here."""
    bound = 2**62
    for cache in make_prompt_cache(model):
        if isinstance(cache, RotatingKVCache):
            bound = min(bound, int(cache.max_size))
        elif not isinstance(cache, KVCache):
            return 0
    return bound


def trim(cache: list[LayerCache], keep: int) -> None:
    """Drop every token after the first ``keep`` from one rank's caches."""
    for layer in cache:
        layer.trim(layer.offset - keep)  # type: ignore[attr-defined]


def _tied(model: Module) -> bool:
    if hasattr(model, "tie_word_embeddings"):
        return bool(model.tie_word_embeddings)
    return not hasattr(model, "lm_head")


def send_header(op: int, n_tokens: int, dtype: int, group: mx.distributed.Group, dst: int) -> None:
    header = mx.array([op, n_tokens, dtype, 0], dtype=mx.int32)
    mx.eval(mx.distributed.send(header, dst, group=group, stream=mx.cpu))


def recv_header(group: mx.distributed.Group, src: int, waiting: RingWait) -> tuple[int, int, int]:
    waiting.wait()
    header = mx.distributed.recv((HEADER_LEN,), mx.int32, src, group=group, stream=mx.cpu)
    mx.eval(header)
    values: list[int] = header.tolist()  # type: ignore[assignment]
    op, n_tokens, dtype, _ = values
    return op, n_tokens, dtype


class RingModel:
    """Rank 0's view of the whole ring as an mlx-lm model: ``model(tokens, cache)``
    gives logits. ``make_cache()`` starts a new sequence on every rank."""

    def __init__(self, stage: Stage, group: mx.distributed.Group) -> None:
        if not stage.first:
            raise ValueError("only rank 0 drives the ring")
        self.stage = stage
        self.group = group
        self.size: int = int(group.size())
        self.args = stage.args
        self.model_type = stage.model_type
        self.waiting = RingWait(0)

    @property
    def layers(self) -> list[Module]:
        return self.stage.layers

    def make_cache(self) -> list[LayerCache]:
        send_header(RESET, 0, 0, self.group, 1)
        return self.stage.make_cache()

    def trim_cache(self, cache: list[LayerCache], keep: int) -> list[LayerCache]:
        """The last sequence's caches, on every rank, cut back to its first ``keep``
        tokens (which the caller checked :meth:`can_trim`)."""
        send_header(TRIM, keep, 0, self.group, 1)
        trim(cache, keep)
        return cache

    def can_trim(self, held: int) -> bool:
        return 0 < held < self.stage.trim_below

    def __call__(
        self, inputs: mx.array, cache: list[LayerCache] | None = None, **_: object
    ) -> mx.array:
        if cache is None:
            raise ValueError("the ring keeps KV caches on every rank: pass make_cache()'s")
        h = self.stage.run_layers(self.stage.embed(inputs), cache)
        mx.eval(h)
        send_header(FORWARD, int(h.shape[1]), DTYPES.index(h.dtype), self.group, 1)
        mx.eval(mx.distributed.send(h, 1, group=self.group, stream=mx.cpu))
        back = mx.distributed.recv(h.shape, h.dtype, self.size - 1, group=self.group, stream=mx.cpu)
        # The later ranks are running their layers: sleep, not spin, until they answer.
        self.waiting.wait()
        # NOTE: received now, not when the caller evaluates the logits: mlx-lm's
        # prefill evaluates only the caches, and an unread answer would be taken
        # for the next step's.
        mx.eval(back)
        return self.stage.logits(back)

    def stop(self) -> None:
        send_header(STOP, 0, 0, self.group, 1)


def serve_stage(stage: Stage, group: mx.distributed.Group) -> None:
    """A later rank's loop: run its layers for every FORWARD until STOP, passing
    each header on to the next rank (the last rank answers rank 0)."""
    rank = int(group.rank())
    size = int(group.size())
    previous = rank - 1
    following = (rank + 1) % size
    cache = stage.make_cache()
    waiting = RingWait(rank)
    while True:
        op, n_tokens, dtype = recv_header(group, previous, waiting)
        if following != 0:
            send_header(op, n_tokens, dtype, group, following)
        if op == STOP:
            return
        if op == RESET:
            cache = stage.make_cache()
            continue
        if op == TRIM:
            trim(cache, n_tokens)
            continue
        if op != FORWARD:
            raise RuntimeError(f"rank {rank} got an unknown ring header {op}")
        h = mx.distributed.recv(
            (1, n_tokens, stage.hidden_size), DTYPES[dtype], previous, group=group, stream=mx.cpu
        )
        waiting.wait()
        out = stage.run_layers(h, cache)
        mx.eval(mx.distributed.send(out, following, group=group, stream=mx.cpu))
