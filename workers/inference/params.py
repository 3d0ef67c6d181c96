"""Sampling parameters of one generation request, and their validation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import InferenceInputError

MAX_NEW_TOKENS = 8192
MAX_TEMPERATURE = 5.0
MAX_STOP_SEQUENCES = 8
MAX_STOP_LENGTH = 200
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class SamplingParams:
    """How to continue one prompt.

    temperature 0 is greedy decoding (top_p, top_k and seed are then unused); top_k 0 is off.
    `stop`: generation for the sequence ends as soon as its decoded text contains one of these
    strings, and the returned text is cut before it. `seed` seeds the sequence's own random
    generator, so a seeded request samples the same tokens alone or in any batch (up to the
    floating-point differences batching can bring). A single string or a list given as `stop`
    is stored as a tuple.
    """

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = field(default=())
    seed: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif isinstance(self.stop, list):
            object.__setattr__(self, "stop", tuple(self.stop))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def validate(self, *, context_length: int | None = None, prompt_tokens: int | None = None) -> None:
        """Raise InferenceInputError(field, message) for a value no request should carry.

        With `context_length` (the model's, in tokens) max_new_tokens must leave room for a
        prompt; with `prompt_tokens` too, prompt + max_new_tokens must fit (field "prompt").
        """
        n = self.max_new_tokens
        if not _is_int(n) or not 1 <= n <= MAX_NEW_TOKENS:
            raise InferenceInputError("max_new_tokens", f"must be a whole number from 1 to {MAX_NEW_TOKENS}.")
        if context_length is not None and n >= context_length:
            raise InferenceInputError("max_new_tokens", f"must be below the model's context length "
                                                        f"({context_length} tokens).")
        if not _is_number(self.temperature) or not 0 <= self.temperature <= MAX_TEMPERATURE:
            raise InferenceInputError("temperature", f"must be a number from 0 (greedy) to {MAX_TEMPERATURE:g}.")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise InferenceInputError("top_p", "must be a number above 0 and at most 1.")
        if not _is_int(self.top_k) or self.top_k < 0:
            raise InferenceInputError("top_k", "must be a whole number, 0 (off) or more.")
        if not isinstance(self.stop, tuple) or not all(isinstance(s, str) for s in self.stop):
            raise InferenceInputError("stop", "must be a list of strings.")
        if len(self.stop) > MAX_STOP_SEQUENCES:
            raise InferenceInputError("stop", f"at most {MAX_STOP_SEQUENCES} stop sequences.")
        if any(not s for s in self.stop):
            raise InferenceInputError("stop", "a stop sequence may not be empty.")
        if any(len(s) > MAX_STOP_LENGTH for s in self.stop):
            raise InferenceInputError("stop", f"a stop sequence may be at most {MAX_STOP_LENGTH} characters long.")
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed <= MAX_SEED):
            raise InferenceInputError("seed", "must be a whole number from 0 to 2**63 - 1, or empty.")
        if context_length is not None and prompt_tokens is not None and prompt_tokens + n > context_length:
            raise InferenceInputError(
                "prompt", f"the prompt has {prompt_tokens} tokens; with max_new_tokens={n} that is beyond the "
                          f"model's context of {context_length} tokens. Shorten the prompt or ask for fewer tokens.")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
