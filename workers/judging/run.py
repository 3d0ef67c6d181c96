"""Running a judge over items: one call per pointwise item, two per pairwise item (both orders,
so position bias shows). Plain Python: `call(messages)` is whatever reaches the judge model (a
provider, the local inference engine) and returns a Reply or raises; the run stops at the
first error it raises (the caller decides what is worth a retry before raising).

    run_judge(rubric, items, call=ask_the_model, on_item=store_and_ask_whether_to_stop, done=keys_stored)

`on_item(verdicts)` gets every verdict of one item at once (a pair's two orders together), so
whoever stores them never keeps half an item; it answers whether to stop.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .rubric import PAIRWISE, Rubric, judge_messages, parse_answer

# A rough tokens-per-character ratio for English text under BPE tokenizers (OpenAI's own rule of
# thumb is ~4 characters a token): an estimate shown before launch, not a bill.
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class PointItem:
    key: str  # unique within a run: what a resumed run skips
    prompt: str
    response: str


@dataclass(frozen=True)
class PairItem:
    key: str
    prompt: str
    first: str  # shown as A in the first order, as B in the swapped one
    second: str


@dataclass(frozen=True)
class Reply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


Call = Callable[[list[dict]], Reply]


@dataclass(frozen=True)
class Verdict:
    key: str
    swapped: bool  # pairwise: `second` was shown as A
    raw: str  # the judge's answer as it came
    answer: dict | None  # parsed and valid against the schema, or None
    error: str  # why it could not be read ("" when it could)
    prompt_tokens: int = 0
    completion_tokens: int = 0


class JudgeCancelled(Exception):
    """on_item asked to stop."""


def orders(rubric: Rubric) -> tuple[bool, ...]:
    return (False, True) if rubric.kind == PAIRWISE else (False,)


def messages_for(rubric: Rubric, item: PointItem | PairItem, swapped: bool) -> list[dict]:
    if isinstance(item, PairItem):
        a, b = (item.second, item.first) if swapped else (item.first, item.second)
        return judge_messages(rubric, item.prompt, a=a, b=b)
    return judge_messages(rubric, item.prompt, response=item.response)


def run_judge(rubric: Rubric, items: Sequence[PointItem | PairItem], *, call: Call,
              on_item: Callable[[list[Verdict]], bool], done: Collection[str] = (), concurrency: int = 1) -> None:
    """Judge every item whose key is not in `done`, `concurrency` items at a time (their calls
    made together from threads, so a batching engine batches them and a provider has several
    requests in flight; `call` must be safe to call from threads). Items are handed to on_item
    in order, whole. Raises JudgeCancelled when on_item asks to stop, and the first error `call`
    raised (after handing on the items of that round whose calls all succeeded: nothing of the
    failed item)."""
    todo = [item for item in items if item.key not in done]
    sides = orders(rubric)

    def ask(item, swapped: bool) -> Verdict:
        reply = call(messages_for(rubric, item, swapped))
        answer, error = parse_answer(reply.text, rubric)
        return Verdict(key=item.key, swapped=swapped, raw=reply.text, answer=answer, error=error,
                       prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens)

    if concurrency <= 1:
        for item in todo:
            if on_item([ask(item, swapped) for swapped in sides]):
                raise JudgeCancelled()
        return
    with ThreadPoolExecutor(max_workers=concurrency * len(sides), thread_name_prefix="judge") as pool:
        for start in range(0, len(todo), concurrency):
            chunk = todo[start:start + concurrency]
            futures = [[pool.submit(ask, item, swapped) for swapped in sides] for item in chunk]
            failure = None
            for item_futures in futures:
                errors = [f.exception() for f in item_futures]
                if any(errors):
                    failure = failure or next(e for e in errors if e)
                    continue
                if on_item([f.result() for f in item_futures]):
                    raise JudgeCancelled()
            if failure is not None:
                raise failure


def estimate_cost(rubric: Rubric, items: Sequence[PointItem | PairItem], *, max_tokens: int) -> dict:
    """What judging `items` will take, before it starts: the number of calls, the prompt tokens
    (messages' characters over CHARS_PER_TOKEN) and at most `max_tokens` answered per call."""
    calls = prompt_chars = 0
    for item in items:
        for swapped in orders(rubric):
            calls += 1
            prompt_chars += sum(len(m["content"]) for m in messages_for(rubric, item, swapped))
    prompt_tokens = math.ceil(prompt_chars / CHARS_PER_TOKEN)
    return {"calls": calls, "items": len(items), "prompt_tokens": prompt_tokens,
            "max_completion_tokens": calls * max_tokens, "max_total_tokens": prompt_tokens + calls * max_tokens}
