"""Writes: evaluating the alert rules into Alert rows, acknowledging and resolving them, and
notifying the operator's webhook."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

import redis
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.core.errors import Conflict
from apps.monitoring import access, broker, events, history, rules, selectors, webhook
from apps.monitoring.models import Alert
from apps.projects.audit import audit_record

logger = logging.getLogger(__name__)


@dataclass
class Evaluation:
    opened: list[Alert] = field(default_factory=list)
    resolved: list[Alert] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # rule -> why it could not be evaluated


def alerts_evaluate(*, now: datetime | None = None) -> Evaluation:
    """Run every rule: open an alert for each new (rule, subject), refresh the open ones that
    still fire, resolve those that stopped. A rule that could not be evaluated leaves its
    alerts as they were. Safe to run concurrently (the page and the periodic task)."""
    now = now or timezone.now()
    outcome = Evaluation()
    firing: dict[tuple[str, str], rules.Firing] = {}
    for rule, check in rules.RULES.items():
        try:
            found = check(now)
        except rules.RuleUnavailable as exc:
            logger.warning("alert rule %s not evaluated: %s", rule, exc)
            outcome.unavailable[rule] = str(exc)
            continue
        firing.update({(f.rule, f.subject): f for f in found})

    open_alerts = {(a.rule, a.subject): a for a in Alert.objects.filter(resolved_at__isnull=True)}
    for key, found in firing.items():
        alert = open_alerts.get(key)
        if alert is not None:
            Alert.objects.filter(pk=alert.pk, resolved_at__isnull=True).update(last_seen=now, message=found.message)
            continue
        try:
            with transaction.atomic():
                alert = Alert.objects.create(rule=found.rule, subject=found.subject, message=found.message,
                                             first_seen=now, last_seen=now)
            outcome.opened.append(alert)
        except IntegrityError:
            pass  # a concurrent evaluation opened it a moment ago
    stopped = [a for key, a in open_alerts.items() if key not in firing and a.rule not in outcome.unavailable]
    for alert in stopped:
        if Alert.objects.filter(pk=alert.pk, resolved_at__isnull=True).update(resolved_at=now):
            alert.resolved_at = now
            outcome.resolved.append(alert)
    if outcome.opened or outcome.resolved:
        events.dashboard_changed()
    return outcome


@transaction.atomic
def alert_acknowledge(*, by, alert: Alert, token=None, ip_address: str | None = None) -> Alert:
    """Someone is on it: the alert stays open (the rule still decides when it stops), marked
    with who took it. Acknowledging it again changes nothing; a resolved alert cannot be."""
    access.require_site_staff(by, token)
    now = timezone.now()
    if not Alert.objects.filter(pk=alert.pk, resolved_at__isnull=True, acknowledged_at__isnull=True).update(
            acknowledged_at=now, acknowledged_by=by):
        alert.refresh_from_db()
        if alert.resolved_at is not None:
            raise Conflict("This alert is already resolved.")
        return alert  # acknowledged already, by this person or another
    alert.refresh_from_db()
    audit_record(actor=by, action="alert.acknowledge", target=alert, ip_address=ip_address,
                 after={"rule": alert.rule, "subject": alert.subject})
    events.dashboard_changed()
    return alert


@transaction.atomic
def alert_resolve(*, by, alert: Alert, token=None, ip_address: str | None = None) -> Alert:
    """Close the alert by hand. A condition that still holds (a lost worker, a long queue) opens
    a new alert at the next evaluation; failed jobs do only when another job fails (see
    rules.job_failed). Resolving a resolved alert changes nothing."""
    access.require_site_staff(by, token)
    if not Alert.objects.filter(pk=alert.pk, resolved_at__isnull=True).update(resolved_at=timezone.now(),
                                                                             resolved_by=by):
        alert.refresh_from_db()
        return alert
    alert.refresh_from_db()
    audit_record(actor=by, action="alert.resolve", target=alert, ip_address=ip_address,
                 after={"rule": alert.rule, "subject": alert.subject})
    events.dashboard_changed()
    return alert


def queue_depths_record() -> broker.QueueDepths:
    """Read the queue depths and keep a sample for the history chart (at most one per
    history.SAMPLE_EVERY_S, whoever asks). Best effort: a missing sample is a gap in a chart."""
    depths = selectors.queue_depths()
    if depths.reachable:
        try:
            history.record_queue_depths(depths.waiting)
        except redis.RedisError as exc:
            logger.warning("queue depth sample not kept: %s", exc)
    return depths


def dashboard_refresh(*, inspection: broker.Inspection) -> dict:
    """One live update of the dashboard: the rules evaluated (as the page does on each view), a
    queue depth sample kept, and the snapshot the browser draws, with the workers as
    `inspection` found them."""
    evaluation = alerts_evaluate()
    snapshot = selectors.dashboard_snapshot(inspection=inspection, depths=queue_depths_record())
    snapshot["rules_unavailable"] = evaluation.unavailable
    return snapshot


def alerts_notify(*, now: datetime | None = None) -> int:
    """POST every open alert the webhook has not yet taken to settings.ALERT_WEBHOOK_URL; returns
    how many it took. The first failure ends the round (the receiver is down or refusing: the
    rest would only wait out their timeouts); the next call tries again. Runs in the periodic
    task, never in a web request: the receiver may be slow."""
    url = settings.ALERT_WEBHOOK_URL
    if not url:
        return 0
    sent = 0
    for alert in Alert.objects.filter(resolved_at__isnull=True, notified_at__isnull=True).order_by("first_seen", "pk"):
        payload = {"status": "firing", "rule": alert.rule, "subject": alert.subject, "message": alert.message,
                   "first_seen": alert.first_seen.isoformat(), "last_seen": alert.last_seen.isoformat()}
        if not webhook.webhook_post(url, payload):
            break
        Alert.objects.filter(pk=alert.pk).update(notified_at=now or timezone.now())
        sent += 1
    return sent
