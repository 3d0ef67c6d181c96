"""Campaign exports.

- resolved: each example with its resolved answer as a new version of a dataset (a worker job);
  each field's type writes its answer into the row (`FieldType.export_resolved`: a form's only
  single_label field becomes the row's label, a text field that edits the response becomes
  the response, the original kept as metadata `original_response`; every other field is
  metadata `annotation.<field>`);
- preferences: DPO-style rows (prompt, chosen, rejected) from the fields whose type teaches
  preferences (preference, ranking);
- raw: every annotation with annotator and times, streamed as JSONL or CSV (no job: it is a
  read of the database, streamed in chunks).
"""


import json
import logging
import traceback

from django.db import transaction
from django.http import StreamingHttpResponse

from apps.annotation.field_types import candidate_keys, field_type, row_value
from apps.annotation.models import Annotation, AnnotationExport, Campaign, Item
from apps.annotation.quality import answers_by_item, resolve
from apps.annotation.services import row_dict
from apps.core.jobs import JobRun
from apps.datasets.models import Dataset
from apps.datasets.writer import write_version
from workers.ingest.export_formats import EXPORT_FORMATS

logger = logging.getLogger(__name__)
MODES = ("majority", "adjudicated", "accepted")
KINDS = ("resolved", "preferences")


def run_export(export_id: int, *, worker: str = "") -> None:
    run = JobRun.claim(AnnotationExport, export_id, worker=worker, what="export")
    if run is None:
        return  # already done (a redelivered message), gone, or run by a live worker
    with run:
        _run(run, export_id)


def _run(run: JobRun, export_id: int) -> None:
    export = AnnotationExport.objects.select_related("campaign__schema", "campaign__dataset_version__dataset",
                                                     "dataset", "created_by").get(pk=export_id)
    try:
        records, roles, kept = _records(export)
        if not records:
            raise ValueError("no example passes the export's conditions")
        with transaction.atomic():
            dataset = export.dataset
            if dataset is None:
                dataset = Dataset.objects.create(project=export.campaign.project, name=export.new_dataset_name,
                                                 created_by=export.created_by)
            parent = (export.campaign.dataset_version if dataset.pk == export.campaign.dataset_version.dataset_id
                      else dataset.versions.filter(status="ready").order_by("-number").first())
            version = write_version(
                dataset=dataset, records=records, roles=roles, author=export.created_by, parent=parent,
                message=export.message or f"Annotations of “{export.campaign.name}” ({export.kind}, {export.mode})",
                source={"annotation_export": export.pk, "campaign": export.campaign_id, "kind": export.kind,
                        "mode": export.mode, "min_agreement": export.min_agreement})
    except Exception as exc:  # the person sees why; write_version left nothing half-written
        logger.exception("annotation export %s failed", export_id)
        run.fail(str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}\n\n"
                                                                f"{traceback.format_exc()}")
    else:
        run.finish(version=version, dataset=dataset, rows=kept)


def _records(export: AnnotationExport) -> tuple[list[dict], dict, int]:
    campaign = export.campaign
    fields = campaign.schema.fields
    grouped = answers_by_item(campaign)
    source_roles = campaign.dataset_version.schema.get("roles", {})
    records = []
    items = Item.objects.filter(campaign=campaign).select_related("row").order_by("position")
    for item in items.iterator(chunk_size=2000):
        annotations = grouped.get(item.pk, [])
        if export.kind == "preferences":
            annotations = [a for a in annotations if a.review != Annotation.Review.REJECTED]
        resolved, score = resolve(fields, item, annotations, export.mode)
        if resolved is None or (export.min_agreement is not None and score < export.min_agreement):
            continue
        if export.kind == "preferences":
            records.extend(_preference_rows(fields, item, resolved, annotations))
        else:
            records.append(_resolved_row(fields, item, resolved, score, len(annotations)))
    if export.kind == "preferences":
        return records, {"prompt": "prompt", "chosen": "response"}, len(records)
    roles = {"id": "id", "prompt": "prompt", "response": "response", "messages": "messages", "label": "label",
             "reference": "reference"}
    if "id" not in source_roles.values():
        roles.pop("id")
    return records, roles, len(records)


def _resolved_row(fields, item: Item, resolved: dict, score: float, annotators: int) -> dict:
    row = item.row
    record = {"id": row.ext_id, "prompt": row.prompt, "response": row.response, "messages": row.messages,
              "label": row.label, "reference": row.reference, **row.metadata}
    for field in fields:
        if field["name"] in resolved:
            field_type(field).export_resolved(field, resolved[field["name"]], record, row=row, fields=fields)
    record["annotation.agreement"] = round(score, 4)
    record["annotation.annotators"] = annotators
    return {key: value for key, value in record.items() if value is not None}


def _preference_rows(fields, item: Item, resolved: dict, annotations) -> list[dict]:
    rows = []
    prompt = item.row.prompt if item.row.prompt is not None else json.dumps(item.row.messages, ensure_ascii=False)
    row = row_dict(item.row)
    for field in fields:
        type_ = field_type(field)
        if not type_.teaches_preferences or field["name"] not in resolved:
            continue
        paths = type_.candidate_paths(field)
        keys = candidate_keys(len(paths))
        texts = {key: row_value(row, path) for key, path in zip(keys, paths, strict=True)}
        for chosen, rejected in type_.preference_pairs(field, resolved[field["name"]]):
            if not texts[chosen] or not texts[rejected]:
                continue
            rows.append({"id": f"{item.row.ext_id or item.row.position}:{field['name']}:{chosen}>{rejected}",
                         "prompt": prompt, "chosen": texts[chosen], "rejected": texts[rejected],
                         "field": field["name"], "chosen_candidate": paths[keys.index(chosen)],
                         "rejected_candidate": paths[keys.index(rejected)],
                         "annotators": sorted({a.annotator.username for a in annotations})})
    return rows


RAW_COLUMNS = ["annotation_id", "item_id", "example_id", "position", "annotator", "skipped", "values", "comment",
               "suggestion", "time_spent_ms", "review", "review_comment", "reviewed_values", "reviewed_by",
               "schema_version", "created_at", "updated_at"]


def _raw_records(campaign: Campaign):
    annotations = (Annotation.objects.filter(item__campaign=campaign)
                   .select_related("annotator", "item__row", "reviewed_by", "schema").order_by("item__position", "id"))
    for a in annotations.iterator(chunk_size=2000):
        yield {"annotation_id": a.pk, "item_id": a.item_id, "example_id": a.item.row.ext_id,
               "position": a.item.position, "annotator": a.annotator.username, "skipped": a.skipped,
               "values": a.values, "comment": a.comment, "suggestion": a.suggestion, "time_spent_ms": a.time_spent_ms,
               "review": a.review, "review_comment": a.review_comment, "reviewed_values": a.reviewed_values,
               "reviewed_by": a.reviewed_by.username if a.reviewed_by else None, "schema_version": a.schema.version,
               "created_at": a.created_at.isoformat(), "updated_at": a.updated_at.isoformat()}


def raw_export_response(campaign: Campaign, export_format: str) -> StreamingHttpResponse:
    """Streamed in a format that streams (workers.ingest.export_formats.STREAM_FORMATS)."""
    fmt = EXPORT_FORMATS[export_format]
    response = StreamingHttpResponse(fmt.record_lines(RAW_COLUMNS, _raw_records(campaign)),
                                     content_type=fmt.content_type)
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in campaign.name)[:80]
    response["Content-Disposition"] = f'attachment; filename="{name}-annotations.{fmt.extension}"'
    return response
