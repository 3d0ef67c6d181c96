"""What the batcher tells an observer as it works: plain observations, no metrics library.

The batcher calls an Observer on its worker thread, so each call must be cheap and must not
raise (an exception is logged and dropped: figures never fail a generation). Requests are named
by the batcher's own keys: `model_key` as given to Batcher.submit (one running batch per key)
and `adapter` the adapter directory given there (None: the base model's own rows). Turning those
keys into metric labels, and keeping their number bounded, is the caller's business.

    class Printer(Observer):
        def first_token(self, model_key, adapter, seconds):
            print(model_key, adapter, "first token after", seconds)

    Batcher(cache, observer=Printer())
"""

from __future__ import annotations


class Observer:
    """Does nothing; subclass and override what you count."""

    def admitted(self, model_key: str, adapter: str | None, queue_wait_s: float) -> None:
        """A request joined its model's running batch, `queue_wait_s` after it was submitted (the
        wait includes loading the model when it was not in the cache)."""

    def first_token(self, model_key: str, adapter: str | None, seconds: float) -> None:
        """A request's first token, `seconds` after it was submitted (queue wait and prefill)."""

    def next_token(self, model_key: str, adapter: str | None, gap_s: float) -> None:
        """Every later token of a request, `gap_s` after that request's previous token."""

    def finished(self, model_key: str, adapter: str | None, *, tokens: int, reason: str) -> None:
        """A request ended with `tokens` generated (finish `reason`: stop, length or cancelled)."""

    def step(self, model_key: str, *, rows: int, max_rows: int, tokens: int, token_budget: int | None,
             kv_cache_bytes: int, seconds: float) -> None:
        """After each prefill or decoding step of a model's batch, which took `seconds`: its `rows`
        of `max_rows`, the `tokens` its cache holds of the `token_budget` the key/value budget
        allows (None: no budget or an unknown size per token), and the cache's bytes now (0: the
        batch emptied)."""
