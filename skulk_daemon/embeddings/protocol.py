"""OpenAI's embeddings wire types (``POST /v1/embeddings``)."""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from skulk_daemon.errors import decode_json


class EmbeddingRequest(msgspec.Struct, frozen=True, kw_only=True):
    """OpenAI's request, decoded leniently (unknown fields are ignored, as OpenAI does).

    Token-id inputs decode so that they can be refused with a clear message: a
    client's token ids come from its own tokenizer, not this model's.
    """

    model: str
    input: str | list[str | int | list[int]]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = None
    user: str | None = None


class Embedding(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    embedding: list[float] | str
    object: Literal["embedding"] = "embedding"


class EmbeddingUsage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(msgspec.Struct, frozen=True, kw_only=True):
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
    object: Literal["list"] = "list"


_decoder: Final = msgspec.json.Decoder(EmbeddingRequest)


def decode_embedding_request(raw: bytes) -> EmbeddingRequest:
    return decode_json(raw, _decoder)
