"""Sending long work to Celery. Every job row is created first; its task gets only the id."""

import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)


def enqueue(task, job_id: int, *, queue: str, on_failure: Callable[[str], None], priority: int | None = None) -> None:
    """Send `task(job_id)` to `queue`. When the broker cannot take it, `on_failure(reason)` marks
    the job failed with a reason a person can read, rather than leave it queued forever.
    `priority`: with Redis, 0 is served first (kombu's steps 0, 3, 6, 9)."""
    try:
        task.apply_async(args=[job_id], queue=queue, **({"priority": priority} if priority is not None else {}))
    except Exception as exc:
        logger.exception("could not queue %s for job %s", task.name, job_id)
        on_failure(f"Could not queue the job: {type(exc).__name__}")
