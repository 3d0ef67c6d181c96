"""Alert rules evaluated into Alert rows (one open alert per rule and subject, refreshed while it
fires, resolved when it stops), and their delivery to the operator's webhook."""

import json
import logging
import socket
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.db import IntegrityError
from django.utils import timezone

from apps.monitoring import http_metrics, rules, services, webhook
from apps.monitoring.models import Alert
from tests.monitoring.conftest import failed_derive_job, failed_import_job, failed_training_job
from tests.training.fixtures import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def thresholds(settings, clean_request_window):
    settings.ALERT_JOB_FAILED_WINDOW_MIN = 60
    settings.ALERT_QUEUE_WAIT_MIN = 15
    settings.ALERT_HTTP_ERROR_RATE = 0.05
    settings.ALERT_HTTP_MIN_REQUESTS = 20
    settings.TRAINING_HEARTBEAT_STALE_S = 90
    settings.ALERT_WEBHOOK_URL = None


def open_alerts():
    return {(a.rule, a.subject): a for a in Alert.objects.filter(resolved_at__isnull=True)}


def test_failed_jobs_of_every_kind_and_project_make_one_alert_naming_the_latest(project, owner, other_project):
    earlier = timezone.now() - timedelta(minutes=5)
    for _ in range(3):
        failed_import_job(other_project, owner, finished_at=earlier)
    failed_derive_job(project, owner, finished_at=earlier)
    failed_training_job(project, owner, name="Night run")  # the latest
    outcome = services.alerts_evaluate()
    assert len(outcome.opened) == 1 and list(open_alerts()) == [("job_failed", rules.JOBS_SUBJECT)]
    message = Alert.objects.get().message
    assert message.startswith("5 jobs failed in the last 60 min, in 2 projects (1 fine-tune, 3 imports, 1 derive).")
    assert "Latest: Fine-tune “Night run” in Alpha: CUDA out of memory. Tried to allocate 2.00 GiB" in message
    assert "Traceback" not in message  # the error's first line only


def test_another_failure_updates_the_one_open_alert_instead_of_opening_one(project, owner):
    failed_training_job(project, owner)
    services.alerts_evaluate()
    failed_import_job(project, owner)
    outcome = services.alerts_evaluate()
    assert outcome.opened == [] and Alert.objects.count() == 1
    assert Alert.objects.get().message.startswith("2 jobs failed") and "Line 3 is not JSON" in Alert.objects.get().message


def test_evaluating_again_refreshes_the_open_alert_instead_of_adding_one(project, owner):
    failed_training_job(project, owner)
    first = timezone.now()
    services.alerts_evaluate(now=first)
    outcome = services.alerts_evaluate(now=first + timedelta(minutes=1))
    assert outcome.opened == [] and Alert.objects.count() == 1
    alert = Alert.objects.get()
    assert alert.first_seen == first and alert.last_seen == first + timedelta(minutes=1)


def test_a_failure_older_than_the_window_resolves_its_alert(project, owner):
    failed_training_job(project, owner, finished_at=timezone.now() - timedelta(minutes=30))
    services.alerts_evaluate()
    later = timezone.now() + timedelta(minutes=31)
    outcome = services.alerts_evaluate(now=later)
    assert [a.rule for a in outcome.resolved] == ["job_failed"]
    assert Alert.objects.get().resolved_at == later
    assert open_alerts() == {}


def test_a_job_failing_again_after_its_alert_resolved_opens_a_new_one(project, owner):
    job = failed_training_job(project, owner)
    services.alerts_evaluate()
    job.state = "queued"
    job.save()
    services.alerts_evaluate()  # resumed: resolved
    job.state, job.finished_at = "failed", timezone.now()
    job.save()
    services.alerts_evaluate()
    assert Alert.objects.filter(rule="job_failed").count() == 2
    assert len(open_alerts()) == 1


def test_the_database_keeps_one_open_alert_per_rule_and_subject():
    now = timezone.now()
    Alert.objects.create(rule="worker_lost", subject="training-job:1", message="m", first_seen=now, last_seen=now)
    Alert.objects.create(rule="worker_lost", subject="training-job:1", message="m", first_seen=now, last_seen=now,
                         resolved_at=now)  # resolved ones may pile up
    with pytest.raises(IntegrityError):
        Alert.objects.create(rule="worker_lost", subject="training-job:1", message="m", first_seen=now, last_seen=now)


def test_a_running_job_with_a_stale_heartbeat_raises_worker_lost_until_it_beats_again(project, owner):
    now = timezone.now()
    lost = make_job(project, owner, state="running", worker="gpu-1@node", heartbeat_at=now - timedelta(seconds=300))
    make_job(project, owner, state="running", worker="gpu-2@node", heartbeat_at=now - timedelta(seconds=5))
    services.alerts_evaluate(now=now)
    alerts = open_alerts()
    assert list(alerts) == [("worker_lost", f"training-job:{lost.pk}")]
    assert "gpu-1@node" in alerts[("worker_lost", f"training-job:{lost.pk}")].message
    assert "300 s" in alerts[("worker_lost", f"training-job:{lost.pk}")].message

    lost.heartbeat_at = now  # another worker took it over
    lost.save()
    outcome = services.alerts_evaluate(now=now + timedelta(seconds=1))
    assert [a.subject for a in outcome.resolved] == [f"training-job:{lost.pk}"]


def test_the_oldest_queued_job_waiting_too_long_raises_queue_wait(project, owner):
    job = make_job(project, owner, state="queued")
    make_job(project, owner, state="queued")
    now = timezone.now()
    services.alerts_evaluate(now=now + timedelta(minutes=14))
    assert open_alerts() == {}
    services.alerts_evaluate(now=now + timedelta(minutes=20))
    alert = open_alerts()[("queue_wait", "queue:gpu")]
    assert "2 fine-tune job(s) waiting" in alert.message and job.name in alert.message and "20 min" in alert.message


def test_a_resumed_job_does_not_raise_queue_wait_from_its_old_creation_time(project, owner):
    make_job(project, owner, state="queued", started_at=timezone.now() - timedelta(days=2))
    services.alerts_evaluate(now=timezone.now() + timedelta(days=1))
    assert open_alerts() == {}


def record(requests: int, errors: int) -> None:
    for i in range(requests):
        http_metrics.observe(route="/test/", method="GET", status=500 if i < errors else 200, seconds=0.01)
    http_metrics.flush()


def test_http_error_rate_above_the_threshold_raises_an_alert_across_processes():
    record(40, 4)  # 10 %
    services.alerts_evaluate()
    alert = open_alerts()[("http_error_rate", "http")]
    assert "4 of 40 web requests answered 5xx" in alert.message


def test_http_error_rate_needs_enough_requests_and_a_rate_above_the_threshold():
    record(10, 5)  # 50 %, but of too few requests
    services.alerts_evaluate()
    assert open_alerts() == {}
    record(30, 0)  # 5 of 40: 12.5 %
    services.alerts_evaluate()
    assert ("http_error_rate", "http") in open_alerts()
    record(100, 0)  # 5 of 140: 3.6 %
    services.alerts_evaluate()
    assert open_alerts() == {}


def test_a_rule_that_cannot_read_its_inputs_leaves_its_alerts_alone(monkeypatch):
    record(40, 10)
    services.alerts_evaluate()

    def unreadable(now):
        raise rules.RuleUnavailable("request counts unreadable: ConnectionError")

    monkeypatch.setitem(rules.RULES, "http_error_rate", unreadable)
    outcome = services.alerts_evaluate()
    assert outcome.resolved == [] and "http_error_rate" in outcome.unavailable
    assert ("http_error_rate", "http") in open_alerts()


# --- webhook --------------------------------------------------------------------------------

class Receiver:
    """A tiny HTTP server in a thread that records what is POSTed to it."""

    def __init__(self, status: int = 204, location: str | None = None):
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append({"path": self.path, "type": self.headers["Content-Type"], "body": json.loads(body)})
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_an_opened_alert_is_posted_to_the_webhook_once(project, owner, settings):
    job = failed_training_job(project, owner)
    services.alerts_evaluate()
    with Receiver() as receiver:
        settings.ALERT_WEBHOOK_URL = f"{receiver.url}/hooks/workbench"
        assert services.alerts_notify() == 1
        services.alerts_evaluate()
        assert services.alerts_notify() == 0  # already taken
    [post] = receiver.received
    assert post["path"] == "/hooks/workbench" and post["type"] == "application/json"
    assert post["body"]["status"] == "firing" and post["body"]["rule"] == "job_failed"
    assert post["body"]["subject"] == rules.JOBS_SUBJECT
    assert job.name in post["body"]["message"] and "CUDA out of memory" in post["body"]["message"]
    assert Alert.objects.get().notified_at is not None


def test_a_failing_webhook_is_logged_not_raised_and_tried_again_later(project, owner, settings, caplog):
    failed_training_job(project, owner)
    services.alerts_evaluate()
    with Receiver(status=500) as receiver:
        settings.ALERT_WEBHOOK_URL = receiver.url
        with caplog.at_level(logging.WARNING, logger="apps.monitoring.webhook"):
            assert services.alerts_notify() == 0
    assert "answered 500" in caplog.text
    assert Alert.objects.get().notified_at is None
    settings.ALERT_WEBHOOK_URL = receiver.url  # the server is gone now: refused
    assert services.alerts_notify() == 0
    with Receiver() as receiver:
        settings.ALERT_WEBHOOK_URL = receiver.url
        assert services.alerts_notify() == 1


def test_the_webhook_does_not_follow_redirects_to_another_host(project, owner, settings):
    failed_training_job(project, owner)
    services.alerts_evaluate()
    with Receiver() as elsewhere, Receiver(status=307, location=f"{elsewhere.url}/stolen") as receiver:
        settings.ALERT_WEBHOOK_URL = receiver.url
        assert services.alerts_notify() == 0
    assert len(receiver.received) == 1 and elsewhere.received == []


def test_a_receiver_that_never_answers_costs_only_the_short_timeout(project, owner, settings, monkeypatch):
    failed_training_job(project, owner)
    failed_import_job(project, owner)
    services.alerts_evaluate()
    monkeypatch.setattr(webhook, "TIMEOUT_S", 0.5)
    with socket.socket() as silent:  # accepts connections (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        settings.ALERT_WEBHOOK_URL = f"http://127.0.0.1:{silent.getsockname()[1]}/"
        started = time.monotonic()
        assert services.alerts_notify() == 0
    assert time.monotonic() - started < 1.5  # one timeout: the round stops at the first failure


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.test/x", "http:///no-host", "gopher://x"])
def test_only_http_and_https_webhook_urls_are_used(project, owner, settings, url, caplog):
    failed_training_job(project, owner)
    services.alerts_evaluate()
    settings.ALERT_WEBHOOK_URL = url
    assert services.alerts_notify() == 0
    assert "must be an http(s) URL" in caplog.text
