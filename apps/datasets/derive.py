"""Runs a derive job in a worker: a new version from an existing one (today: splits).

Rows are copied inside the database (INSERT … SELECT), then changed in batches; the new
version stays BUILDING until done, and a failure or cancel removes it, as for imports.
"""

import logging
import traceback

from django.db import connection, transaction
from django.utils import timezone

from apps.datasets.importer import discard_version, next_version_number
from apps.datasets.models import DatasetRow, DatasetVersion, DeriveJob
from workers.ingest.splits import assign_splits

logger = logging.getLogger(__name__)
UPDATE_BATCH = 5000

COPY_ROWS = """
INSERT INTO datasets_datasetrow (version_id, position, row_hash, ext_id, prompt, response, messages, label,
                                 reference, metadata, split)
SELECT %s, position, row_hash, ext_id, prompt, response, messages, label, reference, metadata, ''
FROM datasets_datasetrow WHERE version_id = %s ORDER BY position
"""


class DeriveCancelled(Exception):
    pass


def run_derive(job_id: int) -> None:
    job = DeriveJob.objects.select_related("parent__dataset").filter(pk=job_id).first()
    if job is None or job.state not in (DeriveJob.State.QUEUED, DeriveJob.State.RUNNING):
        return
    if job.state == DeriveJob.State.RUNNING:
        discard_version(job.version)
    parent = job.parent
    with transaction.atomic():
        version = DatasetVersion.objects.create(
            dataset=parent.dataset, number=next_version_number(parent.dataset), parent=parent, author=job.created_by,
            message=job.params.get("message", ""), content_hash=parent.content_hash, row_count=parent.row_count,
            schema=parent.schema, stats=parent.stats,
            source={"derived_from": parent.number, "kind": job.kind, "params": job.params})
        job.version, job.state = version, DeriveJob.State.RUNNING
        job.save(update_fields=["version", "state"])
    try:
        _split(job, version)
    except DeriveCancelled:
        _end(job, version, DeriveJob.State.CANCELLED)
    except Exception as exc:
        logger.exception("derive job %s failed", job_id)
        _end(job, version, DeriveJob.State.FAILED, f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}")
    else:
        job.state, job.finished_at = DeriveJob.State.SUCCEEDED, timezone.now()
        job.save(update_fields=["state", "finished_at", "rows_done"])


def _end(job: DeriveJob, version: DatasetVersion, state: str, error: str = "") -> None:
    discard_version(version)
    job.version, job.state, job.error, job.finished_at = None, state, error, timezone.now()
    job.save(update_fields=["version", "state", "error", "finished_at"])


def _split(job: DeriveJob, version: DatasetVersion) -> None:
    params = job.params
    parent_rows = DatasetRow.objects.filter(version=job.parent).values_list("position", "label", "row_hash")
    assignment = assign_splits(parent_rows.iterator(chunk_size=5000), params["ratios"], seed=params["seed"],
                               stratify=params["stratify"])
    with connection.cursor() as cursor:
        cursor.execute(COPY_ROWS, [version.pk, job.parent_id])
    by_split: dict[str, list[int]] = {}
    for position, name in assignment.items():
        by_split.setdefault(name, []).append(position)
    done = 0
    for name, positions in by_split.items():
        for start in range(0, len(positions), UPDATE_BATCH):
            chunk = positions[start:start + UPDATE_BATCH]
            DatasetRow.objects.filter(version=version, position__in=chunk).update(split=name)
            done += len(chunk)
            DeriveJob.objects.filter(pk=job.pk).update(rows_done=done)
            if DeriveJob.objects.filter(pk=job.pk, cancel_requested=True).exists():
                raise DeriveCancelled()
    job.rows_done = done
    counts = {name: len(positions) for name, positions in by_split.items()}
    version.schema = {**version.schema, "splits": {"ratios": params["ratios"], "seed": params["seed"],
                                                   "stratified": params["stratify"], "counts": counts}}
    version.stats = {**version.stats, "splits": counts}
    version.status = DatasetVersion.Status.READY
    version.save(update_fields=["schema", "stats", "status"])
