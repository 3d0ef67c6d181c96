"""What a training method is (see methods/__init__.py): Rows, the rows it reads, and Method."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..data import DataStats


@dataclass(frozen=True)
class Rows:
    """What rows a method reads: the one source for the engine, the launch check, the runner and the
    time estimates. The engine takes rows as dicts: `prompt`, `response` and `messages` as the format
    says, plus the `extra` keys (the dataset keeps those in each row's metadata)."""

    formats: tuple[str, ...]          # the config.format values it takes
    extra: tuple[str, ...] = ()       # keys beyond the format's that every usable row has, non-empty
    needs: str = ""                   # those rows in words, for "No row of … has {needs}"; "" = the format's
    sequences: int = 1                # sequences trained per row, each carrying the prompt (dpo: chosen, rejected)
    response: bool = True             # prompt_response rows need a response too (classify: the prompt only)
    label: bool = False               # rows need a class, under the "label" key, read from config.label_column


class Method(Protocol):
    NAME: str
    ROWS: Rows
    PACKING: bool
    PERPLEXITY: bool
    TRAIN_FLOPS_PER_TOKEN: int
    EVAL_FLOPS_PER_TOKEN: int
    EXAMPLES: tuple[str, str]
    EARLY_STOPPING: tuple[str, str]
    EVAL_ONLY: tuple[str, ...]

    def head(self, model: Any, config: Any) -> list[str]: ...

    def check(self, config: Any) -> None: ...

    def prepare(self, rows: Sequence[dict], tokenizer: Any, config: Any, *,
                evaluation: bool) -> tuple[list, DataStats]: ...

    def batches(self, items: list, config: Any, *, epoch: int | None) -> list[list]: ...

    def weight(self, batch: list) -> int: ...

    def tokens(self, batch: list) -> int: ...

    def loss(self, run: Any, batch: list) -> tuple[Any, Any]: ...

    def summarize(self, outputs: list) -> dict: ...
