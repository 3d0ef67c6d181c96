"""Eval suites' figures: which metrics a suite may hold, their thresholds, the aggregate of
per-item scores, the delta to a baseline and the gate's verdict. Plain Python, no Django."""

from .suite import METRICS, GateFailure, MetricError, aggregate, check_metrics, deltas, gate

__all__ = ["METRICS", "GateFailure", "MetricError", "aggregate", "check_metrics", "deltas", "gate"]
