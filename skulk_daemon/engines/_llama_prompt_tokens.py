"""A prompt's tokens, reusing those of a prefix tokenized for an earlier prompt.

llama.cpp tokenizes in two passes (``llama_vocab::impl::tokenize``): it cuts the
text at every occurrence of a special token's text (control, user-defined and
unknown tokens, the longest texts first: ``tokenizer_st_partition``), then
tokenizes each piece of plain text on its own. The first pass searches the whole
text once per special token. Gemma 3 has 6,414 of them: tokenizing a 1,600-token
conversation takes 4.5 ms on one EPYC core, again at every turn, and grows with
the conversation (llama-server pays it too).

Because the pieces are tokenized independently, a prompt cut where a special
token is cut out anyway tokenizes as its two halves do, one after the other. A
cut at byte ``c``, where special text ``S`` begins, is such a *clean cut* when

* no special text at least as long as ``S`` (those are searched for first), nor
  ``S`` itself shifted, matches the prompt overlapping ``S`` at ``c``; and
* no whitespace a special token strips can reach across ``c``: ``S`` does not
  strip to its left, and where any special strips, ``S`` holds no whitespace (a
  stripped run reaching ``c`` from either side would pass through ``S``).

Then ``S`` is cut out at ``c`` and nothing crosses it. Each prompt's last clean
cut is kept with the tokens before it (a few prompts, most recent first). A later
prompt that starts with one of those texts, as a conversation's next turn does,
has only what follows tokenized, once the cut is found clean in it too (what
lies right of the cut has changed).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Final

_WHITESPACE: Final = frozenset(b" \t\n\v\f\r")
"""What llama.cpp's stripping removes (C's isspace)."""
KEPT_PREFIXES: Final = 16
_CANDIDATES: Final = 16
"""Special tokens tried, from the prompt's end, for its last clean cut."""

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
        self._kept: OrderedDict[bytes, tuple[tuple[int, ...], bytes]] = OrderedDict()
        self._capacity = kept
        self._lock = threading.Lock()
        self.reused_tokens = 0
        """Tokens taken from kept prefixes instead of tokenized, since start."""

    def __call__(self, data: bytes) -> list[int]:
        start, kept = self._reusable(data)
        tokens = [*kept, *self._tokenize(data[start:] if start else data)]
        self._keep_last_cut(data, tokens, start, len(kept))
        return tokens

    def _reusable(self, data: bytes) -> tuple[int, tuple[int, ...]]:
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
        return 0, ()

    def _keep_last_cut(self, data: bytes, tokens: list[int], start: int, first_new: int) -> None:
        """Keep the prompt's last clean cut after ``start`` with the tokens before it.

        The cut's token index is what is left when the tokens after the cut (the
        last special and what follows it: a few tokens) are taken off the end; the
        tail is tokenized for that, and must match, or nothing is kept."""
        end = len(data)
        tried = 0
        for token in reversed(tokens[first_new:]):
            special = self._texts.get(token)
            if special is None:
                continue
            cut = data.rfind(special, start + 1, end)
            if cut < 0:
                continue
            end = cut
            if self._clean(data, cut, special):
                tail = self._tokenize(data[cut:])
                count = len(tokens) - len(tail)
                if count > 0 and tokens[count:] == tail:
                    with self._lock:
                        self._kept[data[:cut]] = (tuple(tokens[:count]), special)
                        self._kept.move_to_end(data[:cut])
                        while len(self._kept) > self._capacity:
                            self._kept.popitem(last=False)
                return
            tried += 1
            if tried >= _CANDIDATES:
                return

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
        after it when negative) where it agrees with ``special`` over their
        overlap; None when ``special`` is never a cut (stripped whitespace could
        cross it)."""
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
            for shift in range(-(size - 1), len(text)):
                if shift == 0 and text == special:
                    continue
                if shift >= 0:
                    overlap = min(len(text) - shift, size)
                    agrees = text[shift : shift + overlap] == special[:overlap]
                else:
                    agrees = text.startswith(special[-shift:])
                if agrees:
                    rivals.append((text, shift))
        self._rivals[special] = found = tuple(rivals)
        return found
