"""Writes: evaluating the alert rules into Alert rows, and notifying the operator's webhook."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.monitoring import rules, webhook
from apps.monitoring.models import Alert

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
    return outcome


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
