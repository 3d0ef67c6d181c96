"""The alert rules: each looks at the current state and says what is wrong now, one Firing per
subject. Thresholds come from settings (ALERT_*; the worker-lost limit is the training
heartbeat's own TRAINING_HEARTBEAT_STALE_S)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.db.models import Max

from apps.monitoring import http_metrics, selectors
from apps.monitoring.models import Alert
from apps.projects.models import AuditEvent
from apps.training.models import TrainingJob


@dataclass(frozen=True)
class Firing:
    rule: str
    subject: str
    message: str


class RuleUnavailable(Exception):
    """The rule's inputs could not be read: its open alerts are neither refreshed nor resolved."""


JOBS_SUBJECT = "jobs"


def job_failed(now: datetime) -> list[Firing]:
    """Fine-tunes, imports and derivations that failed in the last ALERT_JOB_FAILED_WINDOW_MIN
    minutes, as one alert: fifty failed imports across projects are one thing to look at, not
    fifty. Resolving it by hand closes the failures it covered: only later ones open it again."""
    since = now - timedelta(minutes=settings.ALERT_JOB_FAILED_WINDOW_MIN)
    period = f"in the last {settings.ALERT_JOB_FAILED_WINDOW_MIN} min"
    resolved_by_hand = (Alert.objects.filter(rule=Alert.Rule.JOB_FAILED, resolved_by__isnull=False)
                        .aggregate(at=Max("resolved_at"))["at"])
    if resolved_by_hand is not None and resolved_by_hand > since:
        since = resolved_by_hand
        period = "since the last alert was resolved"
    summary = selectors.failure_summary(since=since)
    if not summary.total:
        return []
    kinds = ", ".join(f"{count} {kind.lower()}{'s' if count != 1 else ''}"
                      for kind, count in summary.by_kind.items() if count)
    latest = summary.latest
    return [Firing(Alert.Rule.JOB_FAILED, JOBS_SUBJECT,
                   f"{summary.total} job{'s' if summary.total != 1 else ''} failed {period}, in {summary.projects} "
                   f"project{'s' if summary.projects != 1 else ''} ({kinds}). Latest: {latest.kind} "
                   f"“{latest.name}” in {latest.project_name}: {latest.error_line or 'no error recorded'}")]


def worker_lost(now: datetime) -> list[Firing]:
    """A running fine-tune whose heartbeat is older than TRAINING_HEARTBEAT_STALE_S. The reaper
    re-sends such a job, so this alert usually resolves itself once another worker took it over."""
    stale_s = settings.TRAINING_HEARTBEAT_STALE_S
    firing = []
    for job in (TrainingJob.objects.filter(state=TrainingJob.State.RUNNING).select_related("project")
                .order_by("pk")):
        age = (now - job.heartbeat_at).total_seconds() if job.heartbeat_at else None
        if age is not None and age <= stale_s:
            continue
        silence = f"for {age:.0f} s" if age is not None else "at all"
        firing.append(Firing(Alert.Rule.WORKER_LOST, f"training-job:{job.pk}",
                             f"Fine-tune “{job.name}” in {job.project.name}: no heartbeat from "
                             f"{job.worker or 'its worker'} {silence} (limit {stale_s:.0f} s)."))
    return firing


def queue_wait(now: datetime) -> list[Firing]:
    """The oldest queued fine-tune has waited longer than ALERT_QUEUE_WAIT_MIN minutes.

    Waiting is counted from creation, so only jobs that never started count: a resumed job
    keeps its old created_at and no requeue time is stored (it would alarm at once)."""
    waiting = TrainingJob.objects.filter(state=TrainingJob.State.QUEUED, started_at__isnull=True)
    oldest = waiting.select_related("project").order_by("created_at", "pk").first()
    limit_min = settings.ALERT_QUEUE_WAIT_MIN
    if oldest is None or now - oldest.created_at <= timedelta(minutes=limit_min):
        return []
    waited_min = (now - oldest.created_at).total_seconds() / 60
    return [Firing(Alert.Rule.QUEUE_WAIT, "queue:gpu",
                   f"{waiting.count()} fine-tune job(s) waiting; the oldest, “{oldest.name}” in "
                   f"{oldest.project.name}, has waited {waited_min:.0f} min (limit {limit_min} min). "
                   "Is a worker consuming the gpu queue?")]


def http_error_rate(now: datetime) -> list[Firing]:
    """More than ALERT_HTTP_ERROR_RATE of the web requests of the last few minutes answered 5xx
    (judged from ALERT_HTTP_MIN_REQUESTS requests on: one failure in two requests is no rate)."""
    try:
        window = http_metrics.window_counts(selectors.HTTP_WINDOW_MIN)
    except redis.RedisError as exc:
        raise RuleUnavailable(f"request counts unreadable: {type(exc).__name__}") from exc
    threshold = settings.ALERT_HTTP_ERROR_RATE
    if window.requests < settings.ALERT_HTTP_MIN_REQUESTS or window.error_rate <= threshold:
        return []
    return [Firing(Alert.Rule.HTTP_ERROR_RATE, "http",
                   f"{window.errors} of {window.requests} web requests answered 5xx in the last "
                   f"{window.minutes} min ({window.error_rate:.0%}, limit {threshold:.0%}).")]


def canary_rolled_back(now: datetime) -> list[Firing]:
    """A canary rolled back automatically (its thresholds breached) in the last
    ALERT_JOB_FAILED_WINDOW_MIN minutes: one alert per alias, naming the breach."""
    since = now - timedelta(minutes=settings.ALERT_JOB_FAILED_WINDOW_MIN)
    latest: dict[str, AuditEvent] = {}
    for event in AuditEvent.objects.filter(action="model.alias_rollback", actor__isnull=True,
                                           created_at__gte=since).select_related("project").order_by("created_at"):
        latest[event.target_id] = event
    return [Firing(Alert.Rule.CANARY_ROLLED_BACK, f"model-alias:{alias_id}",
                   f"The canary of {(event.after or {}).get('alias', event.target_repr)} in "
                   f"{event.project.name if event.project else 'a deleted project'} was rolled back: "
                   f"{(event.after or {}).get('reason', 'a threshold was breached')}.")
            for alias_id, event in latest.items()]


RULES: dict[str, Callable[[datetime], list[Firing]]] = {
    Alert.Rule.JOB_FAILED: job_failed,
    Alert.Rule.WORKER_LOST: worker_lost,
    Alert.Rule.QUEUE_WAIT: queue_wait,
    Alert.Rule.HTTP_ERROR_RATE: http_error_rate,
    Alert.Rule.CANARY_ROLLED_BACK: canary_rolled_back,
}
