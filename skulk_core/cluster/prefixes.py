"""Prompt prefix fingerprints: which replica of a model holds a request's prefix.

A rendered prompt is cut into blocks of :data:`BLOCK_BYTES` UTF-8 bytes and each
block gets a 32-bit hash chained from the one before it (``h[i]`` covers blocks
``0..i``), so one hash names a whole prefix and a request's longest held prefix is
the first ``i`` whose hash a replica does not hold. A node remembers the chains of
the prompts it sent to each instance (:class:`PrefixIndex`, bounded) and
publishes the hashes in its telemetry: never the text, never tokens.

NOTE: this is a routing hint, not a cache lookup. The engine matches tokens
exactly when the request arrives (see the llama.cpp engine's slot table); a hash
collision or an entry the runner has since evicted only costs a prefill.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable
from typing import Final

import msgspec

from skulk_core.ids import InstanceId

BLOCK_BYTES: Final = 256
"""Bytes of rendered prompt per fingerprint block (about 64 tokens of English)."""

MAX_PROMPTS: Final = 32
"""Prompts an index remembers per instance (the most recently routed)."""

MAX_HASHES: Final = 1024
"""Distinct hashes an index publishes per instance: 256 KiB of prompt prefixes."""


class InstancePrefixes(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The prefix hashes of prompts one node sent to one instance."""

    instance_id: InstanceId
    hashes: tuple[int, ...]


def prompt_fingerprint(prompt: str) -> tuple[int, ...]:
    """The chained hashes of ``prompt``'s whole blocks (a partial last block has none)."""
    data = prompt.encode("utf-8")
    chain: list[int] = []
    previous = b""
    for start in range(0, len(data) - BLOCK_BYTES + 1, BLOCK_BYTES):
        digest = hashlib.blake2b(previous + data[start : start + BLOCK_BYTES], digest_size=4)
        previous = digest.digest()
        chain.append(int.from_bytes(previous, "big"))
    return tuple(chain)


def held_blocks(fingerprint: tuple[int, ...], held: frozenset[int] | set[int]) -> int:
    """How many leading blocks of ``fingerprint`` a holder of ``held`` has."""
    n = 0
    for value in fingerprint:
        if value not in held:
            break
        n += 1
    return n


class PrefixIndex:
    """The fingerprints of the last :data:`MAX_PROMPTS` prompts sent to one instance.

    Not thread-safe: owned by one event loop.
    """

    def __init__(self) -> None:
        self._prompts: OrderedDict[tuple[int, ...], None] = OrderedDict()

    def record(self, fingerprint: tuple[int, ...]) -> None:
        if not fingerprint:
            return
        prompts = self._prompts
        # A prompt that extends a remembered one replaces it (a conversation's next turn).
        for known in [p for p in prompts if fingerprint[: len(p)] == p]:
            del prompts[known]
        prompts[fingerprint] = None
        prompts.move_to_end(fingerprint)
        while len(prompts) > MAX_PROMPTS:
            prompts.popitem(last=False)

    def hashes(self) -> tuple[int, ...]:
        """Distinct hashes, the most recent prompts' first, at most :data:`MAX_HASHES`."""
        seen: dict[int, None] = {}
        for fingerprint in reversed(self._prompts):
            for value in fingerprint:
                if len(seen) >= MAX_HASHES:
                    return tuple(seen)
                seen.setdefault(value, None)
        return tuple(seen)


class RoutedPrompts:
    """A node's :class:`PrefixIndex` per instance: every prompt this node sends to an
    instance, local or remote, is recorded. Thread-safe (telemetry reads it from a
    worker thread)."""

    def __init__(self) -> None:
        self._indexes: dict[InstanceId, PrefixIndex] = {}
        self._lock = threading.Lock()

    def record(self, instance_id: InstanceId, fingerprint: tuple[int, ...]) -> None:
        with self._lock:
            self._indexes.setdefault(instance_id, PrefixIndex()).record(fingerprint)

    def published(self, live: Collection[InstanceId]) -> tuple[InstancePrefixes, ...]:
        """What telemetry carries: the indexes of instances still placed (others dropped)."""
        with self._lock:
            for gone in [i for i in self._indexes if i not in live]:
                del self._indexes[gone]
            return tuple(
                InstancePrefixes(instance_id=instance_id, hashes=index.hashes())
                for instance_id, index in sorted(self._indexes.items())
            )


def prefix_holders(
    readings: Iterable[tuple[InstancePrefixes, ...]],
) -> dict[InstanceId, frozenset[int]]:
    """Every instance's hashes, merged from all nodes' telemetry (and this node's own
    live :meth:`RoutedPrompts.published`, which is fresher than its last reading)."""
    merged: dict[InstanceId, set[int]] = {}
    for prefixes in readings:
        for entry in prefixes:
            merged.setdefault(entry.instance_id, set()).update(entry.hashes)
    return {instance_id: frozenset(hashes) for instance_id, hashes in merged.items()}
