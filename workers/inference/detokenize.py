"""Incremental detokenization: text deltas that are stable, cut at stop sequences.

The text of a sequence grows by decoding a short window of its ids (the method of
text-generation-inference): `decode(ids[prefix:])` minus `decode(ids[prefix:read])`, where
`prefix`..`read` is the last token(s) already turned into text. Decoding a window instead of all
the ids keeps each step O(1) for long generations, while the window's first token gives the
tokenizer the context it needs for leading spaces (SentencePiece) and byte fallbacks. A decoded
window that ends in U+FFFD is an unfinished multi-byte character: nothing is released until a
later token completes it (or the sequence ends, when it is released as it is).

Stop sequences: released text never contains the start of a possible stop sequence (a suffix
that is a prefix of one is held back); when one appears, the text is cut before it and the
sequence is over. So the concatenation of the deltas is exactly the final text.
"""

from __future__ import annotations

from typing import Any

REPLACEMENT = "\ufffd"


class IncrementalText:
    def __init__(self, tokenizer: Any, stop: tuple[str, ...] = ()):
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self._longest_stop = max((len(s) for s in self.stop), default=0)
        self.ids: list[int] = []
        self._prefix = 0  # ids[_prefix:_read] produced the end of `text` (context for the next window)
        self._read = 0    # ids[_read:] are not in `text` yet
        self.text = ""    # decoded so far (cut at a stop sequence once one is found)
        self._emitted = 0  # characters of `text` already released
        self._searched = 0  # `text[:_searched]` holds no stop sequence
        self.stopped = False

    def push(self, token_id: int) -> str:
        """Add a generated token; return the newly released text (may be "")."""
        if self.stopped:
            return ""
        self.ids.append(int(token_id))
        prefix_text = self._decode(self.ids[self._prefix:self._read])
        window = self._decode(self.ids[self._prefix:])
        if len(window) > len(prefix_text) and not window.endswith(REPLACEMENT):
            self.text += window[len(prefix_text):]
            self._prefix, self._read = self._read, len(self.ids)
        return self._release(final=False)

    def finish(self) -> str:
        """The sequence is over: release everything still held back."""
        if not self.stopped and self._read < len(self.ids):
            prefix_text = self._decode(self.ids[self._prefix:self._read])
            window = self._decode(self.ids[self._prefix:])
            self.text += window[len(prefix_text):]
            self._prefix = self._read = len(self.ids)
        return self._release(final=True)

    def _release(self, *, final: bool) -> str:
        if self.stop and not self.stopped:
            start = max(0, self._searched - self._longest_stop + 1)
            hits = [k for k in (self.text.find(s, start) for s in self.stop) if k >= 0]
            if hits:
                self.text = self.text[:min(hits)]
                self.stopped = True
            self._searched = len(self.text)
        limit = len(self.text)
        if not (final or self.stopped):
            limit -= self._held_back()
        delta = self.text[self._emitted:limit] if limit > self._emitted else ""
        self._emitted = max(self._emitted, limit)
        return delta

    def _held_back(self) -> int:
        """Length of the longest suffix of `text` that a stop sequence starts with."""
        for n in range(min(self._longest_stop - 1, len(self.text)), 0, -1):
            suffix = self.text[-n:]
            if any(s.startswith(suffix) for s in self.stop):
                return n
        return 0

    def _decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
