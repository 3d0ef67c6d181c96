"""Celery tasks of the shared plumbing: the one reaper of jobs whose worker vanished."""

from celery import shared_task

from apps.core.jobs import reap_stale


@shared_task(name="core.reap_stale")
def reap_stale_task() -> dict[str, int]:
    return reap_stale()
