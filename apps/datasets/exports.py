"""Streaming exports of a version: memory stays flat whatever the row count."""

import json

from django.http import StreamingHttpResponse

from apps.core.exports import csv_lines
from apps.core.jobs import Heartbeat, claim
from apps.datasets.models import DatasetRow, DatasetVersion

ROLE_COLUMNS = ["id", "prompt", "response", "messages", "label", "reference", "split"]


def export_record(row: DatasetRow) -> dict:
    record = {"id": row.ext_id, "prompt": row.prompt, "response": row.response, "messages": row.messages,
              "label": row.label, "reference": row.reference, "split": row.split or None}
    record.update({f"metadata.{key}": value for key, value in row.metadata.items()})
    return {key: value for key, value in record.items() if value is not None}


def _rows(version: DatasetVersion):
    return DatasetRow.objects.filter(version=version).order_by("position").iterator(chunk_size=2000)


def version_export_response(version: DatasetVersion, export_format: str) -> StreamingHttpResponse:
    filename = f"{version.dataset.name}-v{version.number}".replace('"', "")
    if export_format == "jsonl":
        body = (json.dumps(export_record(row), ensure_ascii=False) + "\n" for row in _rows(version))
        content_type = "application/x-ndjson"
    else:
        metadata_keys = [f"metadata.{key}" for key in version.schema.get("metadata_keys", [])]
        header = ROLE_COLUMNS + metadata_keys

        body = csv_lines(header, (_csv_cells(row, header) for row in _rows(version)))
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

    from apps.core.exports import csv_lines
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

    records = (_export_row(row) for row in _rows(job.version))
    try:
        target = work / job.filename
        if job.format == ExportJob.Format.PARQUET:
            write_parquet(records, target, progress)
        elif job.format == ExportJob.Format.DATASETS:
            directory = work / "dataset"
            write_datasets_dir(records, directory, progress)
            with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
                for file in sorted(directory.iterdir()):
                    archive.write(file, f"{job.filename.removesuffix('.datasets.zip')}/{file.name}")
        else:
            with open(target, "w", encoding="utf-8", newline="") as handle:
                if job.format == ExportJob.Format.JSONL:
                    lines = (json.dumps(export_record(row), ensure_ascii=False) + "\n" for row in _rows(job.version))
                else:
                    header = ROLE_COLUMNS + [f"metadata.{k}" for k in job.version.schema.get("metadata_keys", [])]
                    lines = csv_lines(header, (_csv_cells(row, header) for row in _rows(job.version)))
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


def _export_row(row: DatasetRow) -> dict:
    return {"id": row.ext_id, "prompt": row.prompt, "response": row.response, "messages": row.messages,
            "label": row.label, "reference": row.reference, "split": row.split or None, "metadata": row.metadata}


def _csv_cells(row: DatasetRow, header: list[str]) -> list:
    record = export_record(row)
    return [json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else v
            for v in (record.get(column) for column in header)]
