"""Celery tasks of the shared plumbing: the one reaper of jobs whose worker vanished; and the
worker signals by which a stopping worker hands its long jobs back (apps.core.jobs.JobRun.hand_back)."""

from celery import shared_task
from celery.signals import worker_ready, worker_shutting_down

from apps.core.jobs import clear_worker_stopping, mark_worker_stopping, reap_stale


@worker_shutting_down.connect
def _worker_shutting_down(sender=None, how=None, **_) -> None:
    # A warm stop (SIGTERM) waits for running tasks: the long ones read this and hand back.
    if how == "Warm" and sender:
        mark_worker_stopping(str(sender))


@worker_ready.connect
def _worker_ready(sender=None, **_) -> None:
    # The same name restarted: its jobs run again.
    if sender is not None and getattr(sender, "hostname", None):
        clear_worker_stopping(sender.hostname)


@shared_task(name="core.reap_stale")
def reap_stale_task() -> dict[str, int]:
    return reap_stale()
