"""The metrics of an eval suite and the gate built from them.

A suite's metrics are a list of {"metric": name, "threshold": number or null}. Each item's
scores come from workers.comparison.scores / perplexity (exact match, ROUGE-L and the
perplexity of the reference, all against the row's reference); a run's aggregate of a metric is
its mean over the items that have it. A threshold makes the metric part of the gate: a run
passes when every thresholded aggregate is on the right side of its threshold (at least it for
the scores where higher is better, at most it for perplexity, where lower is).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


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
)}
MAX_METRICS = len(METRICS)


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
        raise MetricError(f"A suite has at most {MAX_METRICS} metrics (each once).", "metrics")
    checked, seen = [], set()
    for i, entry in enumerate(metrics):
        field = f"metrics[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"metric", "threshold"}:
            raise MetricError("Each metric is an object {metric, threshold}.", field)
        name = entry.get("metric")
        if not isinstance(name, str) or name not in METRICS:
            raise MetricError(f"Unknown metric {str(name)[:40]!r}: one of {', '.join(METRICS)}.", f"{field}.metric")
        if name in seen:
            raise MetricError(f"{name} is listed twice.", f"{field}.metric")
        seen.add(name)
        metric, threshold = METRICS[name], entry.get("threshold")
        if threshold is not None:
            if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not math.isfinite(threshold) \
                    or not metric.low <= threshold <= metric.high:
                raise MetricError(f"The threshold of {name} is a number from {metric.low:g} to {metric.high:g} "
                                  "(or null: not gated).", f"{field}.threshold")
            threshold = float(threshold)
        checked.append({"metric": name, "threshold": threshold})
    return checked


def aggregate(item_scores: Iterable[dict], metrics: list[dict]) -> dict[str, float | None]:
    """Each metric's mean over the items that have a score for it (None when none has)."""
    totals = {m["metric"]: [0.0, 0] for m in metrics}
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
    metric: str
    value: float | None
    threshold: float

    @property
    def reason(self) -> str:
        if self.value is None:
            return f"{self.metric}: no value (no item had a score), threshold {self.threshold:g}"
        side = "at least" if METRICS[self.metric].higher_is_better else "at most"
        return f"{self.metric} {self.value:g} is not {side} its threshold {self.threshold:g}"

    def as_dict(self) -> dict:
        return {"metric": self.metric, "value": self.value, "threshold": self.threshold, "reason": self.reason}


def gate(values: dict[str, float | None], metrics: list[dict]) -> list[GateFailure]:
    """The thresholded metrics the values miss (an empty list: the gate passes)."""
    failures = []
    for entry in metrics:
        name, threshold = entry["metric"], entry.get("threshold")
        if threshold is None:
            continue
        value = values.get(name)
        passed = value is not None and (value >= threshold if METRICS[name].higher_is_better else value <= threshold)
        if not passed:
            failures.append(GateFailure(name, value, threshold))
    return failures
