"""Streaming exports of a version: memory stays flat whatever the row count. Every format has the
one column layout of workers.ingest.export (metadata fields as columns of their own names)."""

import json

from django.db import connection
from django.http import StreamingHttpResponse

from apps.core.exports import csv_lines
from apps.core.jobs import Heartbeat, claim
from apps.datasets.bulk import MAX_METADATA_KEYS
from apps.datasets.models import DatasetRow, DatasetVersion
from workers.ingest.export import ROLE_COLUMNS, export_record, metadata_columns, table_cell


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


def _jsonl_lines(version: DatasetVersion):
    columns = metadata_columns(metadata_keys(version))
    return (json.dumps(export_record(_row(row), columns), ensure_ascii=False) + "\n" for row in _rows(version))


def _csv(version: DatasetVersion):
    """The CSV lines: role columns, then one column per metadata field; lists and objects as JSON."""
    columns = metadata_columns(metadata_keys(version))
    header = list(ROLE_COLUMNS) + list(columns.values())

    def cells(row: DatasetRow) -> list:
        record = _row(row)
        messages = json.dumps(record["messages"], ensure_ascii=False) if record["messages"] else None
        return ([messages if name == "messages" else record[name] for name in ROLE_COLUMNS]
                + [table_cell(row.metadata.get(key)) for key in columns])

    return csv_lines(header, (cells(row) for row in _rows(version)))


def _rows(version: DatasetVersion):
    return DatasetRow.objects.filter(version=version).order_by("position").iterator(chunk_size=2000)


def version_export_response(version: DatasetVersion, export_format: str) -> StreamingHttpResponse:
    filename = f"{version.dataset.name}-v{version.number}".replace('"', "")
    if export_format == "jsonl":
        body = _jsonl_lines(version)
        content_type = "application/x-ndjson"
    else:
        body = _csv(version)
        content_type = "text/csv; charset=utf-8"
    response = StreamingHttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}.{export_format}"'
    return response


# --- export jobs: a file written by a worker ----------------------------------------------------

def run_export_job(job_id: int, *, worker: str = "") -> None:
    """Write the job's version to ARTIFACT_ROOT/exports/<job>/<file>, under a temporary name until
    complete; a failure leaves no file and says why."""
    import logging
    import shutil
    import tempfile
    import zipfile
    from pathlib import Path

    from django.conf import settings
    from django.utils import timezone

    from apps.datasets.models import ExportJob
    from workers.ingest.export import write_datasets_dir, write_parquet

    if claim(ExportJob, job_id, worker=worker, what="export") is None:
        return  # ended, gone, or written by a live worker (apps.core.jobs.claim)
    job = ExportJob.objects.select_related("version__dataset").get(pk=job_id)
    heartbeat = Heartbeat(job).__enter__()
    folder = Path(settings.ARTIFACT_ROOT) / "exports" / str(job.pk)
    folder.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=folder))

    def progress(done: int) -> None:
        ExportJob.objects.filter(pk=job_id).update(rows_done=done)

    records = (_row(row) for row in _rows(job.version))
    try:
        target = work / job.filename
        if job.format == ExportJob.Format.PARQUET:
            write_parquet(records, target, progress, metadata_keys=metadata_keys(job.version))
        elif job.format == ExportJob.Format.DATASETS:
            directory = work / "dataset"
            write_datasets_dir(records, directory, progress, metadata_keys=metadata_keys(job.version))
            with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
                for file in sorted(directory.iterdir()):
                    archive.write(file, f"{job.filename.removesuffix('.datasets.zip')}/{file.name}")
        else:
            with open(target, "w", encoding="utf-8", newline="") as handle:
                lines = _jsonl_lines(job.version) if job.format == ExportJob.Format.JSONL else _csv(job.version)
                for number, line in enumerate(lines, start=1):
                    handle.write(line)
                    if number % 5000 == 0:
                        progress(number)
        final = folder / job.filename
        target.rename(final)
        job.path, job.size_bytes, job.state = str(final), final.stat().st_size, ExportJob.State.SUCCEEDED
        job.rows_done = job.version.row_count
    except Exception as exc:
        logging.getLogger(__name__).exception("export %s failed", job_id)
        job.state, job.error = ExportJob.State.FAILED, f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        heartbeat.__exit__(None, None, None)
    job.finished_at = timezone.now()
    job.save()
