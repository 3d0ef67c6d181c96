"""Reads for the monitoring page, the alert rules and /metrics. Operator data across every
project: callers check site staff first (apps.monitoring.access)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from datetime import timezone as dt_timezone

import redis
from django.conf import settings
from django.db.models import Count, F, Q, Sum
from django.urls import reverse
from django.utils import timezone

from apps.datasets.models import DeriveJob, ImportJob
from apps.monitoring import broker, engine_metrics, history, http_metrics
from apps.monitoring.models import Alert
from apps.monitoring.worker_report import worker_reports
from apps.training.models import TrainingJob

RECENT_FAILURES = 20
RECENTLY_RESOLVED_ALERTS = 10
HTTP_WINDOW_MIN = 5  # the cross-process window shown on the page and judged by the error-rate rule
HISTORY_MIN = 60  # the dashboard's charts show this far back
DASHBOARD_ALERTS = 50  # open alerts sent with each live snapshot (rules keep them few)
ERROR_LINE_CHARS = 300
_NEVER = datetime.min.replace(tzinfo=dt_timezone.utc)


def error_line(error: str) -> str:
    """The first non-empty line of a job's error, shortened: the summary an operator scans."""
    line = next((line.strip() for line in (error or "").splitlines() if line.strip()), "")
    return line if len(line) <= ERROR_LINE_CHARS else line[:ERROR_LINE_CHARS - 1] + "…"


# --- failures -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Failure:
    kind: str  # "Fine-tune", "Import", "Derive"
    name: str
    project_id: int
    project_name: str
    error_line: str
    finished_at: datetime | None
    url: str


def recent_failures(*, limit: int | None = RECENT_FAILURES, since: datetime | None = None) -> list[Failure]:
    """Failed fine-tunes, imports and derivations, latest first; `since` keeps those that ended
    after it. Three queries whatever the number of jobs."""
    order = F("finished_at").desc(nulls_last=True)
    training = TrainingJob.objects.filter(state=TrainingJob.State.FAILED).select_related("project")
    imports = ImportJob.objects.filter(state=ImportJob.State.FAILED).select_related("dataset__project")
    derives = DeriveJob.objects.filter(state=DeriveJob.State.FAILED).select_related("parent__dataset__project")
    if since is not None:
        training, imports, derives = (q.filter(finished_at__gte=since) for q in (training, imports, derives))
    if limit is not None:
        training, imports, derives = (q.order_by(order, "-pk")[:limit] for q in (training, imports, derives))
    failures = [
        *(Failure("Fine-tune", j.name, j.project_id, j.project.name, error_line(j.error),
                  j.finished_at, reverse("training:detail", args=[j.project_id, j.pk])) for j in training),
        *(Failure("Import", f"{j.filename} into {j.dataset.name}", j.dataset.project_id,
                  j.dataset.project.name, error_line(j.error), j.finished_at,
                  reverse("datasets:import", args=[j.dataset.project_id, j.dataset_id, j.pk])) for j in imports),
        *(Failure("Derive", f"{j.get_kind_display()} of {j.parent.dataset.name} "
                  f"v{j.parent.number}", j.parent.dataset.project_id, j.parent.dataset.project.name,
                  error_line(j.error), j.finished_at,
                  reverse("datasets:version", args=[j.parent.dataset.project_id, j.parent.dataset_id,
                                                    j.parent.number])) for j in derives),
    ]
    failures.sort(key=lambda f: f.finished_at or _NEVER, reverse=True)
    return failures[:limit] if limit is not None else failures


@dataclass(frozen=True)
class FailureSummary:
    total: int
    by_kind: dict[str, int]  # "Fine-tune" -> 3, every kind present (0 included)
    projects: int  # how many projects the failures are in
    latest: Failure | None


def failure_summary(*, since: datetime) -> FailureSummary:
    """Failed fine-tunes, imports and derivations that ended at or after `since`, counted in
    the database (however many there are), with the latest one for the wording."""
    querysets = {
        "Fine-tune": (TrainingJob.objects.filter(state=TrainingJob.State.FAILED, finished_at__gte=since), "project_id"),
        "Import": (ImportJob.objects.filter(state=ImportJob.State.FAILED, finished_at__gte=since),
                   "dataset__project_id"),
        "Derive": (DeriveJob.objects.filter(state=DeriveJob.State.FAILED, finished_at__gte=since),
                   "parent__dataset__project_id"),
    }
    by_kind, projects = {}, set()
    for kind, (queryset, project_field) in querysets.items():
        by_kind[kind] = queryset.count()
        if by_kind[kind]:
            projects.update(queryset.order_by().values_list(project_field, flat=True).distinct())
    total = sum(by_kind.values())
    latest = recent_failures(limit=1, since=since)[0] if total else None
    return FailureSummary(total=total, by_kind=by_kind, projects=len(projects), latest=latest)


# --- workers ------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunningJob:
    pk: int
    name: str
    project_id: int
    project_name: str
    worker: str
    heartbeat_age_s: float | None  # None: no heartbeat yet
    stale: bool  # older than TRAINING_HEARTBEAT_STALE_S: its worker is probably gone
    step: int
    total_steps: int | None
    url: str


def running_training_jobs() -> list[RunningJob]:
    now = timezone.now()
    jobs = []
    for job in (TrainingJob.objects.filter(state=TrainingJob.State.RUNNING).select_related("project")
                .order_by("worker", "started_at", "pk")):
        age = (now - job.heartbeat_at).total_seconds() if job.heartbeat_at else None
        jobs.append(RunningJob(job.pk, job.name, job.project_id, job.project.name, job.worker, age,
                               age is None or age > settings.TRAINING_HEARTBEAT_STALE_S, job.current_step,
                               job.total_steps, reverse("training:detail", args=[job.project_id, job.pk])))
    return jobs


@dataclass
class WorkerRow:
    hostname: str
    online: bool  # answered the ping just now
    queues: list[str] = field(default_factory=list)
    concurrency: int | None = None
    pid: int | None = None
    uptime_s: int | None = None
    active: list[tuple[broker.ActiveTask, float | None]] = field(default_factory=list)  # (task, running for s)
    report: dict | None = None  # the worker's own resource report (worker_report), None when none is fresh
    report_age_s: float | None = None
    training_jobs: list[RunningJob] = field(default_factory=list)


@dataclass
class WorkersOverview:
    broker_reachable: bool
    broker_error: str
    reports_error: str  # the resource reports could not be read (Redis unreachable)
    online: list[WorkerRow]
    silent: list[WorkerRow]  # named by a running job or a fresh report, but did not answer the ping


def workers_overview(inspection: broker.Inspection | None = None) -> WorkersOverview:
    inspection = inspection if inspection is not None else broker.inspect_workers()
    try:
        reports, reports_error = worker_reports(), ""
    except redis.RedisError as exc:
        reports, reports_error = {}, f"Redis error: {type(exc).__name__}"
    now = time.time()
    rows = {}
    for state in inspection.workers:
        rows[state.hostname] = WorkerRow(
            hostname=state.hostname, online=True, queues=state.queues, concurrency=state.concurrency, pid=state.pid,
            uptime_s=state.uptime_s,
            active=[(t, None if t.started_at is None else max(0.0, now - t.started_at)) for t in state.active])
    for job in running_training_jobs():
        rows.setdefault(job.worker, WorkerRow(hostname=job.worker, online=False)).training_jobs.append(job)
    for hostname, report in reports.items():
        row = rows.setdefault(hostname, WorkerRow(hostname=hostname, online=False))
        row.report, row.report_age_s = report, max(0.0, now - report.get("at", now))
    ordered = sorted(rows.values(), key=lambda r: r.hostname)
    return WorkersOverview(broker_reachable=inspection.reachable, broker_error=inspection.error,
                           reports_error=reports_error, online=[r for r in ordered if r.online],
                           silent=[r for r in ordered if not r.online])


def queue_depths() -> broker.QueueDepths:
    return broker.queue_depths(broker.configured_queues())


# --- counts, HTTP, alerts -------------------------------------------------------------------

def job_counts(model) -> dict[str, int]:
    """Rows of a job model by state, every state present (0 included)."""
    counts = dict.fromkeys(model.State.values, 0)
    counts.update(model.objects.order_by().values_list("state").annotate(n=Count("pk")))
    return counts


def tokens_trained() -> int:
    return TrainingJob.objects.aggregate(total=Sum("tokens_trained"))["total"] or 0


@dataclass
class HttpSummary:
    routes: list[http_metrics.RouteStats]  # this web process, since it started
    window: http_metrics.WindowCounts | None  # every web process, the last HTTP_WINDOW_MIN minutes
    window_error: str


def http_summary() -> HttpSummary:
    http_metrics.flush()
    try:
        window, error = http_metrics.window_counts(HTTP_WINDOW_MIN), ""
    except redis.RedisError as exc:
        window, error = None, f"Redis error: {type(exc).__name__}"
    return HttpSummary(routes=http_metrics.route_stats(), window=window, window_error=error)


def inference_figures() -> dict:
    """The engine's figures per served model and adapter, summed over the live inference
    workers since each started (engine_metrics.lines), ready for JSON; `error` says why there
    are none when Redis cannot be read."""
    try:
        expositions = engine_metrics.worker_expositions()
    except redis.RedisError as exc:
        return {"lines": [], "workers": 0, "error": f"Redis error: {type(exc).__name__}"}
    return {"lines": engine_metrics.lines(engine_metrics.families(expositions)), "workers": len(expositions),
            "error": ""}


def open_alerts():
    return Alert.objects.filter(resolved_at__isnull=True).order_by("-first_seen", "-pk")


def open_alert_counts() -> dict[str, int]:
    counts = dict.fromkeys(Alert.Rule.values, 0)
    counts.update(open_alerts().order_by().values_list("rule").annotate(n=Count("pk")))
    return counts


def recently_resolved_alerts(limit: int = RECENTLY_RESOLVED_ALERTS):
    return (Alert.objects.filter(resolved_at__isnull=False).select_related("resolved_by")
            .order_by("-resolved_at", "-pk")[:limit])


# --- the live dashboard ---------------------------------------------------------------------

def alert_payload(alert: Alert) -> dict:
    return {"id": alert.pk, "rule": alert.rule, "rule_display": alert.get_rule_display(), "subject": alert.subject,
            "message": alert.message, "first_seen": alert.first_seen.isoformat(),
            "last_seen": alert.last_seen.isoformat(),
            "acknowledged_at": alert.acknowledged_at.isoformat() if alert.acknowledged_at else None,
            "acknowledged_by": alert.acknowledged_by.username if alert.acknowledged_by else None,
            "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
            "resolved_by": alert.resolved_by.username if alert.resolved_by else None,
            "notified_at": alert.notified_at.isoformat() if alert.notified_at else None}


def running_job_count() -> int:
    return sum(model.objects.filter(state=model.State.RUNNING).count() for model in (TrainingJob, ImportJob, DeriveJob))


def request_history(minutes: int = HISTORY_MIN) -> list[dict]:
    """Per minute, every web process: requests, 5xx share and mean latency (empty when Redis
    cannot be read: the chart says nothing rather than zeros)."""
    try:
        rows = http_metrics.minutes(minutes)
    except redis.RedisError:
        return []
    return [{"at": m.start, "requests": m.requests, "errors": m.errors,
             "error_rate": m.error_rate, "mean_ms": None if m.mean_s is None else round(m.mean_s * 1000, 1)}
            for m in rows]


def queue_history(minutes: int = HISTORY_MIN) -> list[dict]:
    """Queue depth samples of the last `minutes` (the list keeps more when sampled slowly)."""
    since = time.time() - minutes * 60
    try:
        return [sample for sample in history.queue_depth_samples() if sample["at"] >= since]
    except redis.RedisError:
        return []


def dashboard_snapshot(*, inspection: broker.Inspection | None = None,
                       depths: broker.QueueDepths | None = None) -> dict:
    """What the dashboard's tiles, charts and open-alert table show now, ready for JSON.
    `inspection`, `depths`: read already by the caller (the broker is not asked twice)."""
    now = timezone.now()
    inspection = inspection if inspection is not None else broker.inspect_workers()
    depths = depths if depths is not None else queue_depths()
    alerts = list(open_alerts().select_related("acknowledged_by", "resolved_by")[:DASHBOARD_ALERTS])
    counts = open_alerts().aggregate(open=Count("pk"), unacknowledged=Count("pk", filter=Q(acknowledged_at=None)))
    window_min = settings.ALERT_JOB_FAILED_WINDOW_MIN
    return {
        "at": now.isoformat(),
        "tiles": {
            "workers_online": len(inspection.workers) if inspection.reachable else None,
            "broker_error": inspection.error,
            "workers_asked_at": datetime.fromtimestamp(inspection.asked_at, tz=dt_timezone.utc).isoformat(),
            "queues": depths.waiting if depths.reachable else None,
            "queued_total": sum(depths.waiting.values()) if depths.reachable else None,
            "running_jobs": running_job_count(),
            "failures": failure_summary(since=now - timezone.timedelta(minutes=window_min)).total,
            "failures_window_min": window_min,
            "open_alerts": counts["open"],
            "unacknowledged_alerts": counts["unacknowledged"],
        },
        "alerts": [alert_payload(alert) for alert in alerts],
        "inference": inference_figures(),
        "history_min": HISTORY_MIN,
        "history": {"queues": queue_history(), "requests": request_history()},
    }
