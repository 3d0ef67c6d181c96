"""The Celery app. Web processes enqueue on `default`; training workers consume `gpu`;
generation runs on `inference` (workers with `--pool threads`, sharing one model cache)."""

import os

from celery import Celery
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "workbench.settings")

app = Celery("workbench")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = (Queue("default"), Queue("gpu"), Queue("inference"))
# Each app's tasks.py (apps/<app>/tasks.py); the engine in workers/ knows nothing of Celery.
app.autodiscover_tasks()
