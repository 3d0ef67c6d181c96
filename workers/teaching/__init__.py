"""The teacher engine (distillation): the chat messages a teacher model is asked for one dataset
row, the run that asks it for every row, and what a run will take, shown before launch. Plain
Python: `call(messages)` is whatever reaches the teacher (a provider, the local inference
engine) and returns a Reply or raises; the run stops at the first error it raises.

    run_teacher(items, call=ask_the_teacher, on_answers=store_and_ask_whether_to_stop, done=positions_stored)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from workers.judging.run import CHARS_PER_TOKEN, Call

# Where a row's prompt comes from: its prompt column, its chat messages up to (without) the last
# assistant turn, or a metadata key of the version (any other name).
PROMPT, MESSAGES = "prompt", "messages"


@dataclass(frozen=True)
class TeacherItem:
    position: int  # the row's position in its version: what a resumed run skips
    messages: list[dict]


@dataclass(frozen=True)
class Answer:
    position: int
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class TeacherCancelled(Exception):
    """on_answers asked to stop."""


def prompt_messages(source: str, *, prompt: str | None, messages: list | None, metadata: dict) -> list[dict] | None:
    """The messages to send the teacher for one row, or None when the row has no prompt there. A
    conversation is cut before its last assistant turn (that answer is what the teacher replaces);
    what is left must end with a user turn."""
    if source == MESSAGES:
        if not isinstance(messages, list):
            return None
        kept = [{"role": str(m.get("role", "")), "content": str(m.get("content") or "")}
                for m in messages if isinstance(m, dict)]
        while kept and kept[-1]["role"] == "assistant":
            kept.pop()
        return kept if kept and kept[-1]["role"] == "user" and kept[-1]["content"].strip() else None
    text = prompt if source == PROMPT else metadata.get(source)
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = str(text)
    return [{"role": "user", "content": text}] if isinstance(text, str) and text.strip() else None


def run_teacher(items: Sequence[TeacherItem], *, call: Call, on_answers: Callable[[list[Answer]], bool],
                done: Collection[int] = (), concurrency: int = 1) -> None:
    """Ask the teacher for every item whose position is not in `done`, `concurrency` at a time
    (their calls made together from threads, so a batching engine batches them and a provider has
    several requests in flight; `call` must be safe to call from threads). Each round's answers
    are handed to on_answers in order; it answers whether to stop (TeacherCancelled). The first
    error `call` raised is raised after the answers of that round that came before it."""
    todo = [item for item in items if item.position not in done]

    def ask(item: TeacherItem) -> Answer:
        reply = call(item.messages)
        return Answer(position=item.position, text=reply.text, prompt_tokens=reply.prompt_tokens,
                      completion_tokens=reply.completion_tokens)

    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="teacher") as pool:
        for start in range(0, len(todo), max(1, concurrency)):
            futures = [pool.submit(ask, item) for item in todo[start:start + max(1, concurrency)]]
            answers, failure = [], None
            for future in futures:
                if future.exception() is not None:
                    failure = future.exception()
                    break
                answers.append(future.result())
            if answers and on_answers(answers):
                raise TeacherCancelled()
            if failure is not None:
                raise failure


def estimate_cost(items: Sequence[TeacherItem], *, max_tokens: int) -> dict:
    """What asking the teacher for `items` will take: one call a row, the prompt tokens (the
    messages' characters over CHARS_PER_TOKEN) and at most `max_tokens` answered per call."""
    prompt_chars = sum(len(m["content"]) for item in items for m in item.messages)
    prompt_tokens = math.ceil(prompt_chars / CHARS_PER_TOKEN)
    calls = len(items)
    return {"calls": calls, "prompt_tokens": prompt_tokens, "max_completion_tokens": calls * max_tokens,
            "max_total_tokens": prompt_tokens + calls * max_tokens}
