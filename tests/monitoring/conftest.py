"""Monitoring fixtures: a plain site-staff user, failed jobs of every kind, a clean request window."""

import pytest
from django.utils import timezone

from apps.datasets.models import Dataset, DatasetVersion, DeriveJob, ImportJob
from apps.monitoring import broker, history, http_metrics, redis_store
from tests.factories import UserFactory
from tests.training.fixtures import make_job


@pytest.fixture(autouse=True)
def no_shared_inspection(monkeypatch):
    """Each test asks the broker itself: the process's shared inspection starts empty."""
    monkeypatch.setattr(broker, "_latest", None)


@pytest.fixture
def staff(db):
    """Site staff without superuser rights: enough for monitoring."""
    return UserFactory(username="stella", is_staff=True)


@pytest.fixture
def no_workers(monkeypatch):
    """The broker answers and no worker does, without the one-second ping wait."""
    monkeypatch.setattr(broker, "inspect_workers", lambda timeout=None: broker.Inspection(reachable=True))


@pytest.fixture
def clean_request_window():
    """Every test suite request adds to the shared per-minute counts; start from none."""
    http_metrics.flush()
    client = redis_store.client()
    keys = list(client.scan_iter(match=http_metrics.WINDOW_KEY + "*"))
    if keys:
        client.delete(*keys)


@pytest.fixture
def clean_queue_history():
    """No queue depth samples yet, and none taken recently (the sampling lock gone too); none
    left behind either (the browser tests' dashboards would chart them)."""
    redis_store.client().delete(history.QUEUE_SAMPLES_KEY, history.SAMPLE_LOCK_KEY)
    yield
    redis_store.client().delete(history.QUEUE_SAMPLES_KEY, history.SAMPLE_LOCK_KEY)


def training_job(project, owner, *, name="Run", **fields):
    """tests.training's job row (on a placeholder model), with a name of our choosing."""
    job = make_job(project, owner, **fields)
    if name != job.name:
        job.name = name
        job.save(update_fields=["name"])
    return job


def failed_training_job(project, owner, *, error="CUDA out of memory. Tried to allocate 2.00 GiB\nTraceback ...",
                        finished_at=None, **fields):
    return training_job(project, owner, state="failed", error=error, finished_at=finished_at or timezone.now(),
                        **fields)


def failed_import_job(project, owner, *, error="Line 3 is not JSON", finished_at=None):
    dataset = Dataset.objects.create(project=project, name=f"Imported {Dataset.objects.count()}", created_by=owner)
    return ImportJob.objects.create(dataset=dataset, created_by=owner, filename="rows.jsonl", size_bytes=10,
                                    state="failed", error=error, finished_at=finished_at or timezone.now())


def failed_derive_job(project, owner, *, error="No rows left for the test split", finished_at=None):
    dataset = Dataset.objects.create(project=project, name=f"Split {Dataset.objects.count()}", created_by=owner)
    version = DatasetVersion.objects.create(dataset=dataset, number=1, status="ready", author=owner)
    return DeriveJob.objects.create(parent=version, kind="split", created_by=owner, state="failed", error=error,
                                    finished_at=finished_at or timezone.now())
