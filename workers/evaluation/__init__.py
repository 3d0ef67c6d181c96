"""Eval suites' figures: which metrics a suite may hold, their thresholds, the aggregate of
per-item scores, the delta to a baseline and the gate's verdict. Plain Python, no Django."""

from .suite import (
    JUDGED,
    METRICS,
    GateFailure,
    MetricError,
    aggregate,
    check_metrics,
    criterion_score,
    deltas,
    gate,
    judged_scores,
    win_score,
)

__all__ = ["JUDGED", "METRICS", "GateFailure", "MetricError", "aggregate", "check_metrics", "criterion_score", "deltas",
           "gate", "judged_scores", "win_score"]
