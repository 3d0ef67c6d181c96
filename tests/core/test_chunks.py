"""A job that streams rows and writes between them must not hold a read open across its writes:
on SQLite (WAL) such a write fails at once once another connection has committed meanwhile (a job's
own heartbeat thread does, every few seconds). The PII scan of a large version failed this way."""

import threading

import pytest
from django.db import connection
from django.utils import timezone

from apps.core.chunks import in_chunks
from apps.datasets.models import DatasetRow, DeriveJob
from tests.training.fixtures import make_version

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def commit_elsewhere(job_id: int) -> None:
    """What a heartbeat thread does: a commit on its own connection."""
    from django.db import connections

    def beat():
        DeriveJob.objects.filter(pk=job_id).update(heartbeat_at=timezone.now())
        connections.close_all()

    thread = threading.Thread(target=beat)
    thread.start()
    thread.join()


def test_rows_read_in_chunks_leave_the_connection_free_to_write_after_another_commit(project, owner):
    version = make_version(project, owner, rows=[(f"question {i}", f"answer {i}") for i in range(3000)], eval_rows=[])
    job = DeriveJob.objects.create(parent=version, kind="pii_scan", created_by=owner)
    seen = []
    for row in in_chunks(DatasetRow.objects.filter(version=version), key="position", size=100):
        seen.append(row.position)
        if len(seen) % 100 == 0:
            commit_elsewhere(job.pk)
            DeriveJob.objects.filter(pk=job.pk).update(rows_done=len(seen))  # the job's progress
    assert seen == sorted(seen) and len(seen) == DatasetRow.objects.filter(version=version).count()
    job.refresh_from_db()
    assert job.rows_done == 3000


@pytest.mark.skipif(connection.vendor != "sqlite", reason="PostgreSQL lets a connection write while it reads")
def test_an_open_iterator_is_what_fails_on_sqlite(project, owner):
    """The reason in_chunks exists: the same loop over .iterator() fails."""
    from django.db.utils import OperationalError

    version = make_version(project, owner, rows=[(f"question {i}", f"answer {i}") for i in range(3000)], eval_rows=[])
    job = DeriveJob.objects.create(parent=version, kind="pii_scan", created_by=owner)
    with pytest.raises(OperationalError, match="locked"):
        for i, _ in enumerate(DatasetRow.objects.filter(version=version).order_by("position").iterator(chunk_size=100)):
            if i == 100:
                commit_elsewhere(job.pk)
                DeriveJob.objects.filter(pk=job.pk).update(rows_done=i)
