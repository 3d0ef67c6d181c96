"""The metrics of an eval suite and the gate built from them.

A suite's metrics are a list of {"metric": name, "threshold": number or null}, with "judge" (a
judge's id) for a judge's criterion ("criterion": its name) and for the win rate against the
suite's baseline. Each item's scores come from workers.comparison.scores / perplexity (exact
match, ROUGE-L and the perplexity of the reference, all against the row's reference) and from a
judge's verdicts: a criterion on 0..1 (pass 1, fail 0; 1-5 as (score - 1) / 4), a pairwise
verdict on the run's output against the baseline's as 1 (won), 0 (lost) or 0.5 (tie, or the two
orders disagreeing). Each metric has a `key` (its name; "judge:<id>:<criterion>",
"win_rate:<id>"), under which items and aggregates keep it. A run's aggregate of a metric is its
mean over the items that have it. A threshold makes the metric part of the gate: a run passes
when every thresholded aggregate is on the right side of its threshold (at least it for the
scores where higher is better, at most it for perplexity, where lower is).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from workers.judging.stats import pair_outcome


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    higher_is_better: bool
    low: float  # the range a threshold must lie in
    high: float


METRICS = {m.name: m for m in (
    Metric("exact_match", "Exact match (normalised words)", True, 0.0, 1.0),
    Metric("rouge_l", "ROUGE-L F1", True, 0.0, 1.0),
    Metric("perplexity", "Perplexity of the reference", False, 1.0, 1e6),
    Metric("judge", "A judge's criterion (0..1)", True, 0.0, 1.0),
    Metric("win_rate", "Win rate against the baseline (a pairwise judge)", True, 0.0, 1.0),
)}
JUDGED = ("judge", "win_rate")  # the metrics a judge gives
MAX_METRICS = 16


class MetricError(ValueError):
    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message, self.field = message, field


def check_metrics(metrics) -> list[dict]:
    """The suite's metrics, checked: a non-empty list of distinct known metrics, each threshold
    a finite number in its metric's range (or null: reported, not gated). Raises MetricError
    naming the field ("metrics", "metrics[1].threshold")."""
    if not isinstance(metrics, list) or not metrics:
        raise MetricError(f"metrics is a non-empty list of {{metric, threshold}}; metrics: {', '.join(METRICS)}.",
                          "metrics")
    if len(metrics) > MAX_METRICS:
        raise MetricError(f"A suite has at most {MAX_METRICS} metrics.", "metrics")
    checked, seen = [], set()
    for i, entry in enumerate(metrics):
        field = f"metrics[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"metric", "threshold", "judge", "criterion"}:
            raise MetricError("Each metric is an object {metric, threshold} (and judge, criterion for a judge's).",
                              field)
        name = entry.get("metric")
        if not isinstance(name, str) or name not in METRICS:
            raise MetricError(f"Unknown metric {str(name)[:40]!r}: one of {', '.join(METRICS)}.", f"{field}.metric")
        extra = {}
        if name in JUDGED:
            judge = entry.get("judge")
            if isinstance(judge, bool) or not isinstance(judge, int) or judge < 1:
                raise MetricError(f"{name} names its judge by id.", f"{field}.judge")
            extra["judge"] = judge
            key = f"win_rate:{judge}"
            if name == "judge":
                criterion = entry.get("criterion")
                if not isinstance(criterion, str) or not criterion.strip() or len(criterion) > 64:
                    raise MetricError("A judge metric names one criterion of the judge's rubric.",
                                      f"{field}.criterion")
                extra["criterion"] = criterion.strip()
                key = f"judge:{judge}:{extra['criterion']}"
        elif set(entry) & {"judge", "criterion"}:
            raise MetricError(f"{name} takes no judge.", f"{field}.judge")
        else:
            key = name
        if key in seen:
            raise MetricError(f"{key} is listed twice.", f"{field}.metric")
        seen.add(key)
        metric, threshold = METRICS[name], entry.get("threshold")
        if threshold is not None:
            if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not math.isfinite(threshold) \
                    or not metric.low <= threshold <= metric.high:
                raise MetricError(f"The threshold of {name} is a number from {metric.low:g} to {metric.high:g} "
                                  "(or null: not gated).", f"{field}.threshold")
            threshold = float(threshold)
        checked.append({"metric": name, **extra, "key": key, "threshold": threshold})
    return checked


def aggregate(item_scores: Iterable[dict], metrics: list[dict]) -> dict[str, float | None]:
    """Each metric's mean over the items that have a score for it (None when none has)."""
    totals = {m["key"]: [0.0, 0] for m in metrics}
    for scores in item_scores:
        for name, total in totals.items():
            value = scores.get(name)
            if isinstance(value, int | float) and math.isfinite(value):
                total[0] += value
                total[1] += 1
    return {name: round(total / count, 6) if count else None for name, (total, count) in totals.items()}


def deltas(values: dict[str, float | None], baseline: dict[str, float | None]) -> dict[str, float | None]:
    """values minus the baseline's, per metric (None where either is missing)."""
    return {name: None if value is None or baseline.get(name) is None else round(value - baseline[name], 6)
            for name, value in values.items()}


@dataclass(frozen=True)
class GateFailure:
    metric: str  # the metric's key
    value: float | None
    threshold: float
    higher_is_better: bool = True

    @property
    def reason(self) -> str:
        if self.value is None:
            return f"{self.metric}: no value (no item had a score), threshold {self.threshold:g}"
        side = "at least" if self.higher_is_better else "at most"
        return f"{self.metric} {self.value:g} is not {side} its threshold {self.threshold:g}"

    def as_dict(self) -> dict:
        return {"metric": self.metric, "value": self.value, "threshold": self.threshold, "reason": self.reason}


def gate(values: dict[str, float | None], metrics: list[dict]) -> list[GateFailure]:
    """The thresholded metrics the values miss (an empty list: the gate passes)."""
    failures = []
    for entry in metrics:
        key, threshold = entry["key"], entry.get("threshold")
        if threshold is None:
            continue
        value, higher = values.get(key), METRICS[entry["metric"]].higher_is_better
        if value is None or not (value >= threshold if higher else value <= threshold):
            failures.append(GateFailure(key, value, threshold, higher))
    return failures


def criterion_score(answer: dict | None, criterion: str, scale: str) -> float | None:
    """A pointwise judge's answer on one criterion on 0..1 (None: unparseable): pass 1, fail 0;
    1-5 as (score - 1) / 4."""
    if answer is None or criterion not in answer:
        return None
    score = answer[criterion]["score"]
    if scale == "pass_fail":
        return 1.0 if score == "pass" else 0.0
    return (int(score) - 1) / 4


def win_score(outcome: str | None) -> float | None:
    """A pairwise verdict on (the run's output, the baseline's) as the run's share of the win:
    first 1, second 0, tie or inconsistent 0.5 (None: an answer could not be read)."""
    return {"first": 1.0, "second": 0.0, "tie": 0.5, "inconsistent": 0.5}.get(outcome) if outcome else None


def judged_scores(kind: str, verdicts, asked: list[dict], scales: dict[str, str]) -> dict[str, float | None]:
    """An item's scores from one judge's verdicts on it (workers.judging.Verdict: `swapped`,
    `answer`): for a pairwise judge, the win score under its one win-rate key (the run's output is
    `first`); for a pointwise one, each asked criterion's score under its key."""
    if kind == "pairwise":
        winners = {v.swapped: (v.answer or {}).get("winner") if v.answer else None for v in verdicts}
        return {asked[0]["key"]: win_score(pair_outcome(winners.get(False), winners.get(True)))}
    answer = verdicts[0].answer
    return {m["key"]: criterion_score(answer, m["criterion"], scales.get(m["criterion"], "")) for m in asked}
