"""One loaded GGUF and its llama.cpp context: loading, tokens, the decode batch.

Everything here that touches the context is called from the engine's scheduler
thread only; tokenizing reads the vocabulary alone and is safe from any thread.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final, cast

import llama_cpp
import numpy as np

from skulk_core.models.kv_cache import KvCacheBackend
from skulk_daemon.engines._llama_prompt_tokens import PromptTokens
from skulk_daemon.engines.base import DEFAULT_SLOTS, EngineLoadError
from skulk_daemon.engines.llama_rpc import OffloadParams, RpcOffload, offload_summary

DEFAULT_N_BATCH: Final = 512
_GGUF_MAGIC: Final = b"GGUF"
_PIECE_BUFFER_BYTES: Final = 128
_GGML_LOG_LEVEL_ERROR: Final = 4  # enum ggml_log_level in ggml.h
_KEPT_ERRORS: Final = 8
_SPECIAL_ATTRS: Final = (
    llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
    | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
    | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
)
"""The tokens llama.cpp's tokenizer cuts out of the text first (its special-token cache)."""

_Int32s = ctypes.Array[ctypes.c_int32]
BatchArrays = tuple[
    _Int32s, _Int32s, ctypes.Array[ctypes.c_int], ctypes.Array[_Int32s], ctypes.Array[ctypes.c_int8]
]
"""A batch's token, pos, n_seq_id, seq_id and logits arrays."""


def _address_returning(function: int | None) -> Callable[[object, int], int | None]:
    """The C function at ``function`` (a ``float *(ctx, int32)``), answering an address."""
    assert function is not None
    prototype = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)
    return cast(Callable[[object, int], int | None], prototype(function))


# NOTE: llama_get_logits_ith again, answering the row's address as an int: the
# bindings' prototype wraps it in a new ctypes pointer, and numpy's as_array then
# builds an array type around that, a few microseconds every token.
_LOGITS_ITH: Final = _address_returning(
    ctypes.cast(llama_cpp.llama_get_logits_ith, ctypes.c_void_p).value
)
_KEPT_VIEWS: Final = 64
"""Logits rows whose numpy views are kept (one per output row the buffer has had)."""


class _LlamaLog:
    """Where llama.cpp's log goes: stderr when verbose; otherwise only its
    errors are kept (a few), to explain a failed load in the error message."""

    def __init__(self) -> None:
        self.verbose = False
        self.errors: list[str] = []
        # NOTE: kept on the instance so the C callback is never garbage-collected.
        self.callback = llama_cpp.llama_log_callback(self._on_log)

    def _on_log(self, level: int, text: bytes, _user_data: object) -> None:
        if self.verbose:
            sys.stderr.write(text.decode("utf-8", errors="replace"))
        elif level == _GGML_LOG_LEVEL_ERROR and len(self.errors) < _KEPT_ERRORS:
            self.errors.append(text.decode("utf-8", errors="replace").strip())

    def first_error(self) -> str:
        """The first error since :attr:`errors` was cleared: the cause, where
        later ones only say that loading failed."""
        return f" (llama.cpp: {self.errors[0]})" if self.errors else ""


LLAMA_LOG: Final = _LlamaLog()


def set_llama_logging(*, verbose: bool) -> None:
    """Route llama.cpp's (process-global) log: to stderr if ``verbose``, else nowhere."""
    LLAMA_LOG.verbose = verbose
    llama_cpp.llama_log_set(LLAMA_LOG.callback, ctypes.c_void_p(0))


KV_CACHE_TYPES: Final[Mapping[str, int]] = {
    "f16": llama_cpp.GGML_TYPE_F16,
    "q8_0": llama_cpp.GGML_TYPE_Q8_0,
    "q4_0": llama_cpp.GGML_TYPE_Q4_0,
}
"""The KV cells' types a runner can be given (``inference.kv_cache_backend``)."""


class LlamaCppSettings:
    """How to load the model. Plain values; the runner builds one from ``Load``."""

    __slots__ = (
        "context_tokens",
        "flash_attention",
        "kv_cache",
        "model_path",
        "n_batch",
        "n_threads",
        "offload",
        "prompt_cache_bytes",
        "reuse_replies",
        "settle_after",
        "slots",
    )

    def __init__(
        self,
        model_path: str | Path,
        *,
        context_tokens: int,
        slots: int = DEFAULT_SLOTS,
        n_threads: int | None = None,
        n_batch: int = DEFAULT_N_BATCH,
        flash_attention: bool | None = None,
        kv_cache: str | None = None,
        offload: RpcOffload | None = None,
        prompt_cache_bytes: int = 0,
        reuse_replies: bool = False,
        settle_after: float | None = None,
    ) -> None:
        """``flash_attention=None`` lets llama.cpp decide (it enables it where
        supported, which on CPU decodes faster; it also rounds differently from
        llama-cpp-python's ``Llama``, which turns it off by default). ``kv_cache``
        is the KV cells' type, one of :data:`KV_CACHE_TYPES` (``None``: llama.cpp's
        default, F16); a quantized one needs flash attention. ``offload``
        drives an RPC pool: the model's last layers go to its donors.
        ``prompt_cache_bytes`` bounds the host-RAM prompt cache (0: off).
        ``reuse_replies`` lets a reply's cells be reused (see ``_llama_slots``).
        ``settle_after``: the idle seconds before a slot is settled (``None``: never)."""
        if context_tokens < 1:
            raise ValueError(f"context_tokens must be positive, got {context_tokens}")
        if not 1 <= slots <= n_batch:
            raise ValueError(f"slots must be between 1 and n_batch ({n_batch}), got {slots}")
        self.model_path = Path(model_path)
        self.context_tokens = context_tokens
        self.slots = slots
        self.n_threads = n_threads if n_threads else (os.cpu_count() or 1)
        self.n_batch = n_batch
        if prompt_cache_bytes < 0:
            raise ValueError(f"prompt_cache_bytes must not be negative, got {prompt_cache_bytes}")
        self.prompt_cache_bytes = prompt_cache_bytes
        self.reuse_replies = reuse_replies
        if settle_after is not None and settle_after < 0:
            raise ValueError(f"settle_after must not be negative, got {settle_after}")
        self.settle_after = settle_after
        if kv_cache is not None and kv_cache not in KV_CACHE_TYPES:
            raise ValueError(
                f"kv_cache must be one of {', '.join(KV_CACHE_TYPES)}, got {kv_cache!r}"
            )
        if kv_cache is not None and KvCacheBackend(kv_cache).quantized and flash_attention is False:
            raise ValueError(f"a {kv_cache} KV cache needs flash attention")
        self.flash_attention = flash_attention
        self.kv_cache = kv_cache
        self.offload = offload


def load_model(path: Path, context_tokens: int, offload: RpcOffload | None = None) -> object:
    """Load a GGUF model (weights only, no context) that can serve ``context_tokens``
    per sequence, its last layers on ``offload``'s RPC donors if given; raises
    :class:`EngineLoadError` with llama.cpp's own reason."""
    check_model_file(path)
    llama_cpp.llama_backend_init()
    LLAMA_LOG.errors.clear()
    params = llama_cpp.llama_model_default_params()
    offloaded: OffloadParams | None = None
    if offload is not None:
        try:
            offloaded = OffloadParams(offload)
        except (OSError, ValueError) as exc:
            raise EngineLoadError(f"cannot pool {path.name} over RPC: {exc}") from None
        offloaded.apply(params)
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    del offloaded  # llama.cpp copied the device list and overrides while loading
    if not model:
        where = "" if offload is None else f" with {offload_summary(offload)}"
        raise EngineLoadError(
            f"llama.cpp could not load {path}{where}: the file is damaged, its architecture "
            f"is not supported by this llama.cpp build, or a donor refused its share"
            f"{LLAMA_LOG.first_error()}"
        )
    trained = llama_cpp.llama_model_n_ctx_train(model)
    if context_tokens > trained > 0:
        llama_cpp.llama_model_free(model)
        raise EngineLoadError(
            f"context_tokens {context_tokens} exceeds the {trained} tokens "
            f"{path.name} was trained for"
        )
    return model


class LlamaModel:
    """A model, a context of ``slots`` sequences of ``context_tokens`` each, and
    one reusable decode batch. Build with :meth:`open`; free with :meth:`close`."""

    def __init__(self, model: object, ctx: object, settings: LlamaCppSettings) -> None:
        self._model: object | None = model
        self.ctx: object | None = ctx
        self.vocab: object = llama_cpp.llama_model_get_vocab(model)
        self.memory: object = llama_cpp.llama_get_memory(ctx)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.bos: int = llama_cpp.llama_vocab_bos(self.vocab)
        self.n_swa: int = llama_cpp.llama_model_n_swa(model)
        self._add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
        self.batch: llama_cpp.llama_batch | None = llama_cpp.llama_batch_init(
            settings.n_batch, 0, 1
        )
        batch = self.batch
        # NOTE: the arrays live as long as the batch; reading a field of the ctypes
        # struct makes a new pointer object each time, so they are read once.
        self._arrays: BatchArrays = (
            batch.token,
            cast(_Int32s, batch.pos),
            batch.n_seq_id,
            batch.seq_id,
            batch.logits,
        )
        self._views: dict[int, np.ndarray] = {}
        self.pieces: dict[int, tuple[bytes, bool]] = {}
        self._piece_buffer = ctypes.create_string_buffer(_PIECE_BUFFER_BYTES)
        self._abort: object | None = None
        self.prompt_tokens: Callable[[bytes], list[int]] = prompt_tokenizer(self.vocab)

    @classmethod
    def open(cls, settings: LlamaCppSettings) -> LlamaModel:
        path = settings.model_path
        model = load_model(path, settings.context_tokens, settings.offload)
        ctx = llama_cpp.llama_init_from_model(model, _context_params(settings))
        if not ctx:
            llama_cpp.llama_model_free(model)
            raise EngineLoadError(
                f"llama.cpp could not create a context of {settings.slots} x "
                f"{settings.context_tokens} tokens for {path.name}{LLAMA_LOG.first_error()}"
            )
        per_sequence = llama_cpp.llama_n_ctx_seq(ctx)
        if per_sequence < settings.context_tokens:
            llama_cpp.llama_free(ctx)
            llama_cpp.llama_model_free(model)
            raise EngineLoadError(
                f"llama.cpp gave each sequence {per_sequence} tokens of context, "
                f"fewer than the {settings.context_tokens} asked for"
            )
        return cls(model, ctx, settings)

    def close(self) -> None:
        self._views.clear()
        if self.batch is not None:
            llama_cpp.llama_batch_free(self.batch)
            self.batch = None
        if self.ctx is not None:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if self._model is not None:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def batch_arrays(self) -> BatchArrays:
        """The batch's arrays. llama-cpp-python annotates ``pos`` as an array of
        arrays; it is a flat ``llama_pos *``, hence the cast."""
        assert self.batch is not None
        return self._arrays

    def logits_address(self, index: int) -> int:
        """The address of the last decode's logits for batch row ``index`` (one
        that asked for them): ``n_vocab`` floats in llama.cpp's output buffer."""
        address: int | None = _LOGITS_ITH(self.ctx, index)
        if not address:  # llama.cpp logged why (a row that asked for no logits)
            raise RuntimeError(f"llama.cpp has no logits for batch row {index}")
        return address

    def logits(self, index: int) -> np.ndarray:
        """The last decode's logits for batch row ``index``, as a view of llama.cpp's
        buffer: read it before the next decode, never keep it."""
        address = self.logits_address(index)
        view = self._views.get(address)
        if view is None:
            # NOTE: one view per address the buffer has given (a row per slot, and
            # again should llama.cpp reallocate it), so each row is wrapped once.
            if len(self._views) >= _KEPT_VIEWS:
                self._views.clear()
            row = (ctypes.c_float * self.n_vocab).from_address(address)
            view = self._views[address] = np.ctypeslib.as_array(row)
        return view

    def fill_span(
        self, tokens: list[int], start: int, n: int, seq_id: int, *, last_logits: bool = False
    ) -> None:
        """Put ``tokens[start:start + n]`` into the batch at their positions in
        sequence ``seq_id``, asking for logits of the last one only if ``last_logits``."""
        token, pos, n_seq_id, ids, logits = self.batch_arrays()
        for i in range(n):
            token[i] = tokens[start + i]
            pos[i] = start + i
            n_seq_id[i] = 1
            ids[i][0] = seq_id
            logits[i] = 0
        logits[n - 1] = last_logits

    def decode(self, n_tokens: int) -> int:
        """Decode the first ``n_tokens`` of the batch; llama_decode's status."""
        batch = self.batch
        assert batch is not None
        batch.n_tokens = n_tokens
        status: int = llama_cpp.llama_decode(self.ctx, batch)
        return status

    def forget(self, seq_id: int) -> None:
        """Drop every KV cell of one sequence (always succeeds for a whole sequence)."""
        llama_cpp.llama_memory_seq_rm(self.memory, seq_id, -1, -1)

    def trim(self, seq_id: int, keep: int) -> bool:
        """Drop ``seq_id``'s cells from position ``keep`` on; False (and the
        sequence emptied) when the memory cannot cut it there."""
        if llama_cpp.llama_memory_seq_rm(self.memory, seq_id, keep, -1):
            return True
        self.forget(seq_id)
        return False

    def abort_when(self, asked: Callable[[], bool] | None) -> None:
        """Have :meth:`decode` stop early, with status 2 and the cells of the batch
        it was computing dropped, once ``asked()`` is true (llama.cpp polls it after
        each graph node); ``None``: never (the default)."""
        # NOTE: a prototype called with no argument is a NULL function pointer; the
        # callback is kept on the instance, so it outlives this call.
        callback = llama_cpp.ggml_abort_callback(*(() if asked is None else (lambda _: asked(),)))
        self._abort = callback
        llama_cpp.llama_set_abort_callback(self.ctx, callback, None)

    def keep_prefix(self, seq_id: int, n_tokens: int, source: int | None = None) -> bool:
        """Make ``seq_id`` hold exactly the cells of positions ``[0, n_tokens)``:
        copied from sequence ``source`` first if given, else its own. False (and
        the sequence emptied) when the cache cannot give them back whole: a
        memory that cannot trim part of a sequence (recurrent state), or a
        sliding-window cache that has already dropped cells the next token
        attends to (llama.cpp's server makes the same ``n_swa`` check)."""
        memory = self.memory
        if source is not None:
            # NOTE: with a non-unified cache the sequences live in separate
            # streams, and llama.cpp copies across streams only whole (it asserts
            # otherwise), so the copy takes everything and the trim below cuts it.
            llama_cpp.llama_memory_seq_cp(memory, source, seq_id, -1, -1)
        if not llama_cpp.llama_memory_seq_rm(memory, seq_id, n_tokens, -1):
            self.forget(seq_id)
            return False
        pos_min = llama_cpp.llama_memory_seq_pos_min(memory, seq_id)
        pos_max = llama_cpp.llama_memory_seq_pos_max(memory, seq_id)
        window_start = max(0, n_tokens - max(self.n_swa, 1)) if self.n_swa > 0 else 0
        if pos_min < 0 or pos_min > window_start or pos_max != n_tokens - 1:
            self.forget(seq_id)
            return False
        return True

    def save_sequence(self, seq_id: int, n_tokens: int) -> bytes | None:
        """The state of ``seq_id``'s first ``n_tokens`` positions (the rest of its
        cells are dropped first), or None when llama.cpp cannot give it."""
        if not llama_cpp.llama_memory_seq_rm(self.memory, seq_id, n_tokens, -1):
            return None
        size = llama_cpp.llama_state_seq_get_size(self.ctx, seq_id)
        if size <= 0:
            return None
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self.ctx, buffer, size, seq_id)
        return bytes(buffer)[:written] if written > 0 else None

    def restore_sequence(self, seq_id: int, data: bytes) -> bool:
        """Replace ``seq_id``'s cells with a state :meth:`save_sequence` gave; False
        (and the sequence emptied) when llama.cpp refuses it."""
        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if llama_cpp.llama_state_seq_set_data(self.ctx, buffer, len(data), seq_id) > 0:
            return True
        self.forget(seq_id)
        return False

    def tokenize(self, text: str) -> list[int]:
        """Tokens for already-rendered text: special tokens parsed, BOS added
        only if the model wants one and the text does not start with it; a prefix
        tokenized for an earlier prompt is reused (``_llama_prompt_tokens``)."""
        tokens = self.prompt_tokens(text.encode("utf-8"))
        if self._add_bos and self.bos >= 0 and (not tokens or tokens[0] != self.bos):
            tokens.insert(0, self.bos)
        return tokens

    def piece(self, token: int) -> tuple[bytes, bool]:
        """A token's bytes (control tokens render as nothing) and whether it ends
        generation; cached in :attr:`pieces`, as the same few thousand recur."""
        cached = self.pieces.get(token)
        if cached is not None:
            return cached
        buffer = self._piece_buffer
        size = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, False)
        if size < 0:
            buffer = ctypes.create_string_buffer(-size)
            size = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, False)
        piece = (buffer.raw[:size], bool(llama_cpp.llama_vocab_is_eog(self.vocab, token)))
        self.pieces[token] = piece
        return piece

    def piece_text(self, token: int) -> str:
        return self.piece(token)[0].decode("utf-8", errors="replace")


def plain_tokens(vocab: object, data: bytes) -> list[int]:
    """llama.cpp's tokens for UTF-8 text: special texts parsed, no BOS added."""
    capacity = len(data) + 2
    buffer = (llama_cpp.llama_token * capacity)()
    count = llama_cpp.llama_tokenize(vocab, data, len(data), buffer, capacity, False, True)
    if count < 0:
        capacity = -count
        buffer = (llama_cpp.llama_token * capacity)()
        count = llama_cpp.llama_tokenize(vocab, data, len(data), buffer, capacity, False, True)
    return list(buffer[:count])


def prompt_tokenizer(vocab: object) -> Callable[[bytes], list[int]]:
    """:func:`plain_tokens` reusing earlier prompts' prefixes, for the vocabulary
    types whose pieces between special texts tokenize independently (SentencePiece
    and BPE: a fresh session for each piece); plain tokens for the others.

    NOTE: reading every token's attributes takes about 80 ms for a 262k vocabulary
    (Gemma 3: 79-86 ms in ``bench/prompt_tokens.py``), once, as the model loads."""
    plain = functools.partial(plain_tokens, vocab)
    kind = llama_cpp.llama_vocab_type(vocab)
    if kind not in (llama_cpp.LLAMA_VOCAB_TYPE_SPM, llama_cpp.LLAMA_VOCAB_TYPE_BPE):
        return plain
    get_attr = llama_cpp.llama_vocab_get_attr
    specials = {
        token: llama_cpp.llama_vocab_get_text(vocab, token) or b""
        for token in range(llama_cpp.llama_vocab_n_tokens(vocab))
        if get_attr(vocab, token) & _SPECIAL_ATTRS
    }

    def having(attr: int) -> frozenset[int]:
        return frozenset(token for token in specials if get_attr(vocab, token) & attr)

    return PromptTokens(
        plain,
        specials,
        strips_left=having(llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP),
        strips_right=having(llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP),
    )


def _context_params(settings: LlamaCppSettings) -> llama_cpp.llama_context_params:
    params: llama_cpp.llama_context_params = llama_cpp.llama_context_default_params()
    params.n_ctx = settings.context_tokens * settings.slots
    params.n_batch = settings.n_batch
    params.n_ubatch = settings.n_batch
    params.n_seq_max = settings.slots
    # NOTE: a batch never asks for more logits rows than there are slots (one per
    # prompt's last token, or one per generating sequence); reserving n_batch rows
    # would cost n_batch x n_vocab floats (512 MiB for Gemma 3).
    params.n_outputs_max = settings.slots
    params.n_threads = settings.n_threads
    params.n_threads_batch = settings.n_threads
    # NOTE: non-unified KV gives each sequence its own window of exactly
    # n_ctx / n_seq_max cells, so admission can promise a request its room up
    # front; a unified cache would let neighbours run it out mid-answer.
    params.kv_unified = False
    # NOTE: a full-size sliding-window cache (llama.cpp's default, set here because
    # prefix reuse depends on it): a window-sized one overwrites cells that slide
    # out, and a trimmed sequence could then not attend to its kept prefix.
    params.swa_full = True
    params.no_perf = True
    if settings.kv_cache is not None:
        params.type_k = params.type_v = KV_CACHE_TYPES[settings.kv_cache]
    if settings.flash_attention is not None:
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if settings.flash_attention
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
    return params


def check_model_file(path: Path) -> None:
    try:
        with path.open("rb") as handle:
            magic = handle.read(len(_GGUF_MAGIC))
    except FileNotFoundError:
        raise EngineLoadError(f"model file not found: {path}") from None
    except IsADirectoryError:
        raise EngineLoadError(f"model path is a directory, not a GGUF file: {path}") from None
    except OSError as exc:
        raise EngineLoadError(f"cannot read model file {path}: {exc.strerror}") from None
    if magic != _GGUF_MAGIC:
        raise EngineLoadError(f"{path} is not a GGUF model file")
