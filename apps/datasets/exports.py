"""Streaming exports of a version: memory stays flat whatever the row count. Every format has the
one column layout of workers.ingest.export (metadata fields as columns of their own names)."""

from django.db import connection
from django.http import StreamingHttpResponse

from apps.core.chunks import in_chunks
from apps.core.jobs import JobRun
from apps.datasets.bulk import MAX_METADATA_KEYS
from apps.datasets.models import DatasetRow, DatasetVersion
from workers.ingest.export_formats import EXPORT_FORMATS


def metadata_keys(version: DatasetVersion) -> list[str]:
    """Every metadata field of the version's rows, sorted. The schema lists them unless there were
    too many to list (bulk.MAX_METADATA_KEYS): then the database reads them off the rows."""
    keys = version.schema.get("metadata_keys", [])
    if len(keys) < MAX_METADATA_KEYS:
        return keys
    if connection.vendor == "postgresql":
        query = "SELECT DISTINCT jsonb_object_keys(metadata) FROM datasets_datasetrow WHERE version_id = %s"
    else:
        query = ("SELECT DISTINCT field.key FROM datasets_datasetrow, json_each(datasets_datasetrow.metadata) field "
                 "WHERE version_id = %s")
    with connection.cursor() as cursor:
        cursor.execute(query, [version.pk])
        return sorted(key for (key,) in cursor.fetchall())


def _row(row: DatasetRow) -> dict:
    return {"id": row.ext_id, "prompt": row.prompt, "response": row.response, "messages": row.messages,
            "label": row.label, "reference": row.reference, "split": row.split or None, "metadata": row.metadata}


def _rows(version: DatasetVersion):
    # Piece by piece, not .iterator(): an export job writes its progress between pieces (apps.core.chunks).
    return in_chunks(DatasetRow.objects.filter(version=version), key="position", size=2000)


def version_export_response(version: DatasetVersion, export_format: str) -> StreamingHttpResponse:
    """The version streamed in a format that streams (workers.ingest.export_formats)."""
    fmt = EXPORT_FORMATS[export_format]
    filename = f"{version.dataset.name}-v{version.number}".replace('"', "")
    body = fmt.lines((_row(row) for row in _rows(version)), metadata_keys(version))
    response = StreamingHttpResponse(body, content_type=fmt.content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}.{fmt.extension}"'
    return response


# --- export jobs: a file written by a worker ----------------------------------------------------

def run_export_job(job_id: int, *, worker: str = "") -> None:
    """Write the job's version to ARTIFACT_ROOT/exports/<job>/<file>, under a temporary name until
    complete; a failure leaves no file and says why."""
    import logging
    import shutil
    import tempfile
    from pathlib import Path

    from django.conf import settings

    from apps.datasets.models import ExportJob

    run = JobRun.claim(ExportJob, job_id, worker=worker, what="export")
    if run is None:
        return  # ended, gone, or written by a live worker (apps.core.jobs.JobRun.claim)
    job = ExportJob.objects.select_related("version__dataset").get(pk=job_id)
    folder = Path(settings.ARTIFACT_ROOT) / "exports" / str(job.pk)
    folder.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=folder))
    records = (_row(row) for row in _rows(job.version))
    with run:
        try:
            target = work / job.filename
            EXPORT_FORMATS[job.format].write(records, target, run.progress, metadata_keys=metadata_keys(job.version))
            final = folder / job.filename
            target.rename(final)
        except Exception as exc:
            logging.getLogger(__name__).exception("export %s failed", job_id)
            run.fail(f"{type(exc).__name__}: {exc}"[:2000])
        else:
            run.finish(path=str(final), size_bytes=final.stat().st_size, rows_done=job.version.row_count)
        finally:
            shutil.rmtree(work, ignore_errors=True)
