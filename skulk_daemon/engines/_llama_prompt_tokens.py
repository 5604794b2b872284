"""A prompt's tokens, reusing those of a prefix tokenized for an earlier prompt.

llama.cpp tokenizes in two passes (``llama_vocab::impl::tokenize``): it cuts the
text at every occurrence of a special token's text (control, user-defined and
unknown tokens, the longest texts first: ``tokenizer_st_partition``), then
tokenizes each piece of plain text on its own. The first pass searches the whole
text once per special token. Gemma 3 has 6,414 of them: tokenizing a 1,600-token
conversation takes 4.2-4.8 ms on one EPYC core (``bench/prompt_tokens.py``), again
at every turn, and grows with the conversation (llama-server pays it too).

Because the pieces are tokenized independently, a prompt cut where a special
token is cut out anyway tokenizes as its two halves do, one after the other. A
cut at byte ``c``, where special text ``S`` begins, is such a *clean cut* when

* no special text at least as long as ``S`` (those are searched for first), nor
  ``S`` itself, matches the prompt from before ``c`` across it, or from inside
  ``S`` (one that starts at ``c`` is cut out at ``c`` too); and
* no whitespace a special token strips can reach across ``c``: ``S`` does not
  strip to its left, and where any special strips, ``S`` holds no whitespace (a
  stripped run reaching ``c`` from either side would pass through ``S``).

Then ``S`` is cut out at ``c`` and nothing crosses it. Each prompt is tokenized as
its two halves around its last clean cut, and the first half's tokens are kept (a
few prompts, most recent first). A later prompt that starts with one of those
texts, as a conversation's next turn does, has only what follows tokenized, once
the cut is found clean in it too (what lies right of the cut has changed). The
cut is searched for at the special texts earlier prompts were cut at (a chat
template's few); a prompt with none of those is tokenized whole, and its special
tokens, from the last, say where it could have been cut.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Final

_WHITESPACE: Final = frozenset(b" \t\n\v\f\r")
"""What llama.cpp's stripping removes (C's isspace)."""
KEPT_PREFIXES: Final = 16
_CANDIDATES: Final = 16
"""Occurrences tried, from the prompt's end, for its last clean cut."""
_MARKERS: Final = 8

Tokenize = Callable[[bytes], list[int]]
"""The tokens of UTF-8 text, special texts parsed, no BOS added."""

Rival = tuple[bytes, int]
"""A special text that may overlap ``S``, and where it starts relative to ``S``."""


class PromptTokens:
    """Tokenizes prompts through ``tokenize``, reusing kept prefixes' tokens.

    ``specials`` maps each special token's id to its text (what the partition
    searches for); ``strips_left`` and ``strips_right`` are those that eat the
    whitespace before and after them.
    Safe from any thread: the kept prefixes are behind a lock, tokenizing is not.
    """

    def __init__(
        self,
        tokenize: Tokenize,
        specials: Mapping[int, bytes],
        strips_left: frozenset[int] = frozenset(),
        strips_right: frozenset[int] = frozenset(),
        kept: int = KEPT_PREFIXES,
    ) -> None:
        self._tokenize = tokenize
        self._texts = {token: text for token, text in specials.items() if text}
        self._lstrip = frozenset(self._texts[t] for t in strips_left if t in self._texts)
        self._any_strip = bool(self._lstrip) or any(t in self._texts for t in strips_right)
        # Special texts by the bytes they contain, longest first: the candidates
        # for a text's rivals without reading every special.
        by_byte: dict[int, set[bytes]] = {}
        for text in set(self._texts.values()):
            for byte in set(text):
                by_byte.setdefault(byte, set()).add(text)
        self._by_byte = {
            byte: sorted(texts, key=len, reverse=True) for byte, texts in by_byte.items()
        }
        self._rivals: dict[bytes, tuple[Rival, ...] | None] = {}
        self._kept: OrderedDict[bytes, tuple[array[int], bytes]] = OrderedDict()
        """Kept prefixes: their tokens (4 bytes each: a 128k-token prompt's are 512 KiB,
        not the 4.5 MiB of a tuple of ints) and the special text after them."""
        self._markers: tuple[bytes, ...] = ()
        """Special texts prompts were cut at (at most ``_MARKERS``, the latest last)."""
        self._capacity = kept
        self._lock = threading.Lock()
        self.reused_tokens = 0
        """Tokens taken from kept prefixes instead of tokenized, since start."""

    def __call__(self, data: bytes) -> list[int]:
        start, kept = self._reusable(data)
        found = self._last_cut(data, start)
        if found is None:
            tokens = [*kept, *self._tokenize(data[start:] if start else data)]
            self._learn(data, tokens, start, len(kept))
            return tokens
        cut, special = found
        head = [*kept, *self._tokenize(data[start:cut])]
        self._keep(data[:cut], head, special)
        return [*head, *self._tokenize(data[cut:])]

    def _reusable(self, data: bytes) -> tuple[int, array[int]]:
        """The longest kept prefix of ``data`` still a clean cut in it, and its tokens."""
        with self._lock:
            found = [
                (prefix, tokens, special)
                for prefix, (tokens, special) in self._kept.items()
                if data.startswith(prefix)
            ]
        for prefix, tokens, special in sorted(found, key=lambda entry: len(entry[0]), reverse=True):
            cut = len(prefix)
            if data.startswith(special, cut) and self._clean(data, cut, special):
                with self._lock:
                    if prefix in self._kept:
                        self._kept.move_to_end(prefix)
                    self.reused_tokens += len(tokens)
                return cut, tokens
        return 0, array("i")

    def _last_cut(self, data: bytes, start: int) -> tuple[int, bytes] | None:
        """The last clean cut after ``start`` at a special text earlier prompts were
        cut at (a template's few: found by searching the text, tokenizing nothing)."""
        best: tuple[int, bytes] | None = None
        for special in self._markers:
            end = len(data)
            for _ in range(_CANDIDATES):
                cut = data.rfind(special, start + 1, end)
                if cut < 0 or (best is not None and cut <= best[0]):
                    break
                if self._clean(data, cut, special):
                    best = (cut, special)
                    break
                end = cut
        return best

    def _learn(self, data: bytes, tokens: list[int], start: int, first_new: int) -> None:
        """With no known special to cut at, find the prompt's last clean cut among
        the special tokens it holds, and know that special from now on.

        The cut's token index is what is left when the tokens after it (the last
        special and what follows: a few tokens) are taken off the end; the tail is
        tokenized for that, and must match, or nothing is learned."""
        end = len(data)
        for tried, token in enumerate(t for t in reversed(tokens[first_new:]) if t in self._texts):
            special = self._texts[token]
            cut = data.rfind(special, start + 1, end)
            if cut < 0:
                continue
            end = cut
            if self._clean(data, cut, special):
                tail = self._tokenize(data[cut:])
                count = len(tokens) - len(tail)
                if count > 0 and tokens[count:] == tail:
                    self._keep(data[:cut], tokens[:count], special)
                    with self._lock:
                        if special not in self._markers:
                            self._markers = (*self._markers, special)[-_MARKERS:]
                return
            if tried + 1 >= _CANDIDATES:
                return

    def _keep(self, prefix: bytes, tokens: list[int], special: bytes) -> None:
        with self._lock:
            self._kept[prefix] = (array("i", tokens), special)
            self._kept.move_to_end(prefix)
            while len(self._kept) > self._capacity:
                self._kept.popitem(last=False)

    def _clean(self, data: bytes, cut: int, special: bytes) -> bool:
        rivals = self._rivals_of(special)
        if rivals is None:
            return False
        for rival, shift in rivals:
            at = cut - shift
            if at >= 0 and data.startswith(rival, at):
                return False
        return True

    def _rivals_of(self, special: bytes) -> tuple[Rival, ...] | None:
        """Every special text searched no later than ``special`` (as long or
        longer), at every start relative to it (``shift`` bytes before it, or
        after it when negative; not at it, which cuts at the same place) where it
        agrees with ``special`` over their overlap; None when ``special`` is never
        a cut (stripped whitespace could cross it)."""
        if special in self._rivals:
            return self._rivals[special]
        if special in self._lstrip or (self._any_strip and not _WHITESPACE.isdisjoint(special)):
            self._rivals[special] = None
            return None
        size = len(special)
        candidates: set[bytes] = set()
        for byte in set(special):
            for text in self._by_byte.get(byte, ()):
                if len(text) < size:
                    break
                candidates.add(text)
        rivals: list[Rival] = []
        for text in candidates:
            for shift in (*range(-(size - 1), 0), *range(1, len(text))):
                if shift > 0:
                    overlap = min(len(text) - shift, size)
                    agrees = text[shift : shift + overlap] == special[:overlap]
                else:
                    agrees = text.startswith(special[-shift:])
                if agrees:
                    rivals.append((text, shift))
        self._rivals[special] = found = tuple(rivals)
        return found
