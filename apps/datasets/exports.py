"""Streaming exports of a version: memory stays flat whatever the row count."""

import json

from django.http import StreamingHttpResponse

from apps.core.exports import csv_lines
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

        def cells(row):
            record = export_record(row)
            values = [record.get(column) for column in header]
            return [json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else v for v in values]

        body = csv_lines(header, (cells(row) for row in _rows(version)))
        content_type = "text/csv; charset=utf-8"
    response = StreamingHttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}.{export_format}"'
    return response
