"""Constrained decoding: a sequence whose SamplingParams carry a JSON schema (`json_schema`) can
only generate text that parses as JSON valid against it — OpenAI's `response_format` json_object
and json_schema, and a local judge's verdict, which a small model otherwise rarely writes as JSON.

llguidance (the grammar engine vLLM, SGLang and llama.cpp use) compiles the schema to a grammar
and, before each of the sequence's tokens, computes the tokens the grammar allows next; the others'
logits are set to -inf (greedy and sampled rows alike), and the token chosen is fed back to it.
Once the JSON value is complete the grammar allows only the end-of-sequence token. The token
vocabulary is wrapped once per tokenizer (about a second) and kept with it.

A schema llguidance cannot compile is refused before anything runs (InferenceInputError naming
`response_format`), as is one over MAX_SCHEMA_CHARS. A model whose tokenizer llguidance cannot read
(it reads fast byte-level and SentencePiece tokenizers, not, say, a word-level one) fails the
request with UnconstrainableTokenizer, which names response_format too.
"""

from __future__ import annotations

import json
import threading
import weakref
from functools import lru_cache
from typing import Any

from .errors import InferenceInputError

MAX_SCHEMA_CHARS = 32_768
# Compact JSON (no whitespace between tokens): a small model cannot wander off into blank lines.
COMPILE_OPTIONS = {"whitespace_flexible": False}

_tokenizers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def grammar_of(schema: Any, field: str = "response_format") -> str:
    """The llguidance grammar of a JSON schema (a dict), or InferenceInputError(field). Each schema
    is compiled once per process: a request's is checked at submit and used at admission, and a
    judge asks the same one for every item."""
    if not isinstance(schema, dict):
        raise InferenceInputError(field, "the JSON schema is an object.")
    try:
        text = json.dumps(schema, allow_nan=False)  # key order kept: it is the order the properties are written in
    except (TypeError, ValueError):
        raise InferenceInputError(field, "the JSON schema is not JSON.") from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise InferenceInputError(field, f"the JSON schema is over {MAX_SCHEMA_CHARS} characters.")
    grammar, why = _compiled(text)
    if why:
        raise InferenceInputError(field, f"the JSON schema cannot be used: {why}")
    return grammar


@lru_cache(maxsize=256)
def _compiled(text: str) -> tuple[str, str]:
    """(the grammar of a schema's JSON text, "") or ("", why it cannot be used)."""
    from llguidance import LLMatcher

    try:
        grammar = LLMatcher.grammar_from_json_schema(text, defaults=COMPILE_OPTIONS)
    except ValueError as exc:
        return "", str(exc)[:300]
    error = LLMatcher.validate_grammar(grammar)
    if error and not error.startswith("WARNING"):
        return "", error.splitlines()[0][:300]
    return grammar, ""


class UnconstrainableTokenizer(InferenceInputError):
    """The model's tokenizer cannot be read by the grammar engine: its output cannot be constrained."""

    def __init__(self, reason: str):
        super().__init__("response_format", f"this model's tokenizer cannot be constrained to JSON ({reason}).")


def _vocabulary(tokenizer: Any, size: int, eos: set[int]):
    """llguidance's view of `tokenizer` for logits of `size` entries, made once per tokenizer (and
    a tokenizer it cannot read refused once: UnconstrainableTokenizer)."""
    import llguidance.hf

    with _lock:
        kept = _tokenizers.get(tokenizer)  # (size, the vocabulary or None, why not)
        if kept is None or kept[0] != size:
            try:
                kept = (size, llguidance.hf.from_tokenizer(tokenizer, n_vocab=size, eos_token=sorted(eos) or None), "")
            except Exception as exc:  # the library says why in its own words: not a fast tokenizer, no decoder...
                kept = (size, None, str(exc)[:200] or type(exc).__name__)
            _tokenizers[tokenizer] = kept
    if kept[1] is None:
        raise UnconstrainableTokenizer(kept[2])
    return kept[1]


class Constraint:
    """One sequence's grammar state: `restrict(logits)` before its token is chosen, `accept(token)` after."""

    def __init__(self, schema: dict, tokenizer: Any, vocabulary_size: int, eos: set[int]):
        import llguidance
        import llguidance.torch

        self._torch = llguidance.torch
        self.matcher = llguidance.LLMatcher(_vocabulary(tokenizer, vocabulary_size, eos), grammar_of(schema))
        self.mask = llguidance.torch.allocate_token_bitmask(1, vocabulary_size)

    def restrict(self, logits) -> None:
        """Set the logits (one row, in place) of every token the grammar does not allow next to -inf."""
        self._torch.fill_next_token_bitmask(self.matcher, self.mask, 0)
        self._torch.apply_token_bitmask_inplace(logits.view(1, -1), self.mask)

    def accept(self, token: int) -> None:
        self.matcher.consume_token(token)

    @property
    def complete(self) -> bool:
        """The JSON value is whole: nothing but the end of the sequence may follow."""
        return self.matcher.is_stopped() or self.matcher.is_error()
