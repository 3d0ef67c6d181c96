"""The Celery app. Web processes enqueue on `default`; training workers consume `gpu`;
generation runs on `inference` (workers with `--pool threads`, sharing one model cache)."""

import os

from celery import Celery
from celery.signals import celeryd_init
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "workbench.settings")

app = Celery("workbench")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = (Queue("default"), Queue("gpu"), Queue("inference"))
# Each app's tasks.py (apps/<app>/tasks.py); the engine in workers/ knows nothing of Celery.
app.autodiscover_tasks()


@celeryd_init.connect
def size_the_database_pool(sender=None, conf=None, options=None, **kwargs):
    """A threads-pool worker (inference: `--pool threads --concurrency N`) runs N jobs at once, each
    with its own database connection and a heartbeat thread holding another (apps.core.jobs): the
    per-process pool (settings.DATABASES, 10 by default) grows to 2N + 4 before its first connection,
    unless DB_POOL_MAX_SIZE sets it. Prefork children each have a pool of their own."""
    from celery.concurrency import get_implementation
    from django.conf import settings

    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    options = options or {}
    worker_pool = options.get("pool") or options.get("pool_cls") or "prefork"  # the CLI hands --pool over as a class
    if isinstance(worker_pool, str):
        worker_pool = get_implementation(worker_pool)
    if not isinstance(pool, dict) or "DB_POOL_MAX_SIZE" in os.environ or worker_pool is not get_implementation("threads"):
        return
    pool["max_size"] = max(pool["max_size"], 2 * int(options.get("concurrency") or 1) + 4)
