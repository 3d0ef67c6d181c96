"""Workers and queues as the broker and the workers themselves report them, against a real
Celery worker process and the real Redis broker; and the page staying quick when they fail."""

import os
import socket
import time
import uuid

import pytest
from django.utils import timezone

from apps.monitoring import broker, history, rules, selectors, worker_report
from apps.monitoring.models import Alert
from tests.conftest import wait_for
from tests.monitoring.conftest import failed_training_job
from tests.training.fixtures import make_job
from workbench.celery import app as celery_app


def worker_hostname() -> str:
    return f"test-worker-{os.getpid()}@{socket.gethostname()}"




@pytest.mark.slow  # starts the real worker process
def test_the_running_worker_answers_with_its_queues_and_pool(celery_worker):
    started = time.monotonic()
    inspection = broker.inspect_workers()
    assert time.monotonic() - started < broker.INSPECT_DEADLINE_S
    assert inspection.reachable
    worker = {w.hostname: w for w in inspection.workers}[worker_hostname()]
    assert {"default", "gpu"} <= set(worker.queues)  # what the fixture's -Q names
    assert worker.concurrency == 1 and worker.pid == celery_worker.pid
    assert worker.uptime_s is not None


@pytest.mark.slow  # starts the real worker process
def test_the_worker_reports_its_own_cpu_memory_and_no_gpu(celery_worker):
    report = wait_for(lambda: worker_report.worker_reports().get(worker_hostname()), timeout=15,
                      what="the worker's resource report")
    assert report["pid"] == celery_worker.pid
    assert report["processes"] >= 2  # the main process and its pool child
    assert report["rss_bytes"] > 10 * 1024 * 1024
    assert 0 <= report["host_cpu_percent"] <= 100 and report["cpu_count"] >= 1
    assert 0 < report["host_memory_used_bytes"] < report["host_memory_total_bytes"]
    assert report["gpus"] == []  # no GPU on this machine: the page says "no GPU"
    assert time.time() - report["at"] < worker_report.REPORT_TTL_S


def test_a_report_expires_by_itself_and_a_clean_stop_removes_it_at_once(db):
    reporter = worker_report.Reporter(f"probe-{uuid.uuid4().hex[:6]}@here", os.getpid(), interval_s=0.2)
    reporter.start()
    report = wait_for(lambda: worker_report.worker_reports().get(reporter.hostname), timeout=5, what="a report")
    assert report["cpu_percent"] >= 0 and report["rss_bytes"] > 0
    from apps.monitoring import redis_store

    assert 0 < redis_store.client().ttl(reporter.key) <= worker_report.REPORT_TTL_S
    reporter.stop()
    assert reporter.hostname not in worker_report.worker_reports()


@pytest.mark.slow  # starts the real worker process
def test_queue_depth_counts_every_priority_list_of_kombus_redis_transport(celery_worker):
    queue = f"monitoring-test-{uuid.uuid4().hex[:8]}"  # consumed by nobody
    for priority in (0, 5, 9, 9):
        celery_app.send_task("monitoring.never_run", queue=queue, priority=priority)
    try:
        depths = broker.queue_depths([queue, "gpu"])
        assert depths.reachable and depths.waiting[queue] == 4
        with celery_app.connection_for_read() as conn:
            channel = conn.default_channel
            names = broker._redis_list_names(channel, queue)
            lengths = {name: channel.client.llen(name) for name in names}
            # The messages really sit in more than one list, named as broker.py expects.
            assert sum(lengths.values()) == 4 and sum(1 for n in lengths.values() if n) >= 2
            assert any("\x06\x16" in name for name, n in lengths.items() if n)
    finally:
        with celery_app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)


@pytest.mark.slow  # starts the real worker process
def test_the_periodic_task_evaluates_alerts_and_samples_queue_depths_in_the_worker(
        celery_worker, transactional_db, project, owner, clean_queue_history):
    job = failed_training_job(project, owner)
    celery_app.send_task("monitoring.evaluate_alerts", queue="default")
    alert = wait_for(lambda: Alert.objects.filter(rule="job_failed").first(), timeout=30,
                     what="the alert opened by the worker's evaluation")
    assert alert.subject == rules.JOBS_SUBJECT and alert.resolved_at is None and job.name in alert.message
    [sample] = wait_for(history.queue_depth_samples, timeout=10, what="the worker's queue depth sample")
    assert set(sample["waiting"]) == {"default", "gpu", "inference"}


def test_running_jobs_are_grouped_under_their_worker_with_heartbeat_age(db, project, owner, monkeypatch):
    now = timezone.now()
    monkeypatch.setattr(broker, "inspect_workers", lambda: broker.Inspection(
        reachable=True, workers=[broker.WorkerState("gpu-1@node", queues=["gpu"], concurrency=1)]))
    fresh = make_job(project, owner, state="running", worker="gpu-1@node", heartbeat_at=now)
    stale = make_job(project, owner, state="running", worker="gpu-9@gone", heartbeat_at=now - timezone.timedelta(
        minutes=10))
    overview = selectors.workers_overview()
    [online] = [w for w in overview.online if w.hostname == "gpu-1@node"]
    assert [j.pk for j in online.training_jobs] == [fresh.pk] and not online.training_jobs[0].stale
    [silent] = [w for w in overview.silent if w.hostname == "gpu-9@gone"]
    assert [j.pk for j in silent.training_jobs] == [stale.pk] and silent.training_jobs[0].stale
    assert silent.training_jobs[0].heartbeat_age_s >= 600


def test_a_hanging_broker_costs_the_page_the_deadline_not_more(monkeypatch):
    monkeypatch.setattr(broker, "INSPECT_DEADLINE_S", 0.3)
    monkeypatch.setattr(broker, "_inspect", lambda timeout: time.sleep(3))
    started = time.monotonic()
    inspection = broker.inspect_workers()
    assert time.monotonic() - started < 1
    assert not inspection.reachable and "did not answer" in inspection.error


@pytest.mark.parametrize("listening", [False, True], ids=["refused", "silent"])
def test_an_unreachable_or_silent_broker_is_reported_within_a_second_or_so(monkeypatch, listening):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        if listening:
            server.listen(8)  # accepts connections, never answers a command
        monkeypatch.setitem(celery_app.conf, "broker_read_url", f"redis://127.0.0.1:{server.getsockname()[1]}/0")
        for read in (broker.inspect_workers, lambda: broker.queue_depths(["default", "gpu"])):
            started = time.monotonic()
            outcome = read()
            assert time.monotonic() - started < broker.BROKER_TIMEOUT_S + 1
            assert not outcome.reachable and "broker error" in outcome.error
