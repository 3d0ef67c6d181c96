import hashlib
import os
from dataclasses import asdict
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.core import storage
from apps.core.errors import Conflict, Invalid, NotFound
from apps.core.jobs import ask_to_cancel, enqueue
from apps.datasets import importer
from apps.datasets.models import Dataset, ImportJob
from apps.datasets.tasks import derive_version_task, export_version_task, import_dataset_task
from apps.projects import policy
from apps.projects.audit import audit_record
from apps.projects.models import Project


@transaction.atomic
def dataset_create(*, user, project: Project, name: str, description: str = "", token=None,
                   ip_address: str | None = None) -> Dataset:
    policy.require(user, "dataset.import", project, token)
    name = " ".join((name or "").split())
    if not name:
        raise Invalid("A dataset needs a name.", field="name")
    if len(name) > 120:
        raise Invalid("Dataset names are at most 120 characters.", field="name")
    if project.datasets.filter(name__iexact=name).exists():
        raise Invalid(f"This project already has a dataset called “{name}”.", field="name")
    try:
        with transaction.atomic():
            dataset = Dataset.objects.create(project=project, name=name, description=(description or "").strip(),
                                             created_by=user)
    except IntegrityError:  # a concurrent create of the same name
        raise Invalid(f"This project already has a dataset called “{name}”.", field="name") from None
    audit_record(actor=user, action="dataset.create", project=project, target=dataset, ip_address=ip_address,
                 after={"name": name})
    return dataset


@transaction.atomic
def dataset_delete(*, user, dataset: Dataset, token=None, ip_address: str | None = None) -> None:
    """Soft delete: the dataset disappears everywhere, its versions stay for the jobs that
    pinned them, and the name is freed (a suffix keeps the unique constraint)."""
    policy.require(user, "dataset.delete", dataset, token)
    audit_record(actor=user, action="dataset.delete", project=dataset.project, target=dataset,
                 ip_address=ip_address, before={"name": dataset.name})
    dataset.deleted_at = timezone.now()
    dataset.name = f"{dataset.name[:90]} (deleted {dataset.deleted_at:%Y-%m-%d %H:%M:%S} #{dataset.pk})"
    dataset.save(update_fields=["deleted_at", "name"])


# --- imports ------------------------------------------------------------------------------------

PREVIEW_ROWS = 20


def import_create(*, user, dataset: Dataset, upload=None, server_path: str = "", token=None,
                  ip_address: str | None = None) -> ImportJob:
    """Keep the uploaded file (content-addressed) or check a server-side path, detect its
    format and open a draft import waiting for its column mapping."""
    from workers.ingest import IngestError, detect_format

    policy.require(user, "dataset.import", dataset, token)
    if (upload is None) == (not server_path):
        raise Invalid("Send either a file or a server-side path.", field="file")
    try:
        if upload is not None:
            if upload.size == 0:
                raise Invalid("The file is empty.", field="file")
            sha256, size = storage.store_stream(upload)
            filename = os.path.basename(upload.name or "upload")[:255]
            fmt = detect_format(storage.local_blob(sha256), filename)
            server = ""
        else:
            path = importer.data_root_path(server_path)
            if not path.exists():
                raise Invalid("No file or directory at that path.", field="server_path")
            fmt = detect_format(path, path.name)
            if path.is_dir():
                sha256, size, server = "", sum(p.stat().st_size for p in path.rglob("*") if p.is_file()), str(path)
            else:
                sha256, size = storage.store_file(path)
                server = ""
            filename = path.name[:255]
    except IngestError as exc:
        raise Invalid(str(exc), field="server_path" if server_path else "file") from None
    # Only now a transaction: storing the file (up to 2 GiB, perhaps to a bucket) held one open.
    with transaction.atomic():
        job = ImportJob.objects.create(dataset=dataset, created_by=user, filename=filename, artifact_sha256=sha256,
                                       server_path=server, size_bytes=size, source_format=asdict(fmt))
        audit_record(actor=user, action="dataset.import_upload", project=dataset.project, target=dataset,
                     ip_address=ip_address, after={"filename": filename, "sha256": sha256, "bytes": size})
    return job


def import_preview(*, job: ImportJob, delimiter: str | None = None, has_header: bool | None = None) -> dict:
    """The first rows as the engine reads them, the columns, and a suggested mapping."""
    from workers.ingest import IngestError, SourceFormat, preview

    fmt = SourceFormat(**job.source_format)
    bad_rows: list = []
    try:
        # Bad rows are listed, not fatal, here: the person decides to fix the file or skip them.
        result = preview(importer.source_path(job), fmt, n=PREVIEW_ROWS, delimiter=delimiter, has_header=has_header,
                         skip_bad_rows=True, bad_rows=bad_rows)
    except IngestError as exc:
        raise Invalid(str(exc), field="file") from None
    return {**result, "suggested_mapping": dict(result["suggested_mapping"].roles),
            "bad_rows": [dict(bad) for bad in bad_rows[:20]]}


def import_start(*, user, job: ImportJob, mapping: dict, skip_bad_rows: bool = False, delimiter: str | None = None,
                 has_header: bool | None = None, message: str = "", token=None,
                 ip_address: str | None = None) -> ImportJob:
    """Check the mapping and queue the import on the `default` Celery queue."""
    from workers.ingest import ColumnMapping, IngestError

    policy.require(user, "dataset.import", job.dataset, token)
    if job.state != ImportJob.State.DRAFT:
        raise Conflict(f"This import is already {job.state}.")
    if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise Invalid("The mapping is an object of column name → role.", field="mapping")
    mapping = {column: role for column, role in mapping.items() if role}  # "" means keep as metadata
    try:
        ColumnMapping(roles=mapping)
    except IngestError as exc:
        raise Invalid(str(exc), field="mapping") from None
    if "prompt" not in mapping.values() and "messages" not in mapping.values():
        raise Invalid("Map a column to prompt or to messages.", field="mapping")
    if delimiter is not None and (len(delimiter) != 1 or delimiter in "\r\n\"'"):
        raise Invalid("The delimiter is one character (not a quote or newline).", field="delimiter")
    with transaction.atomic():
        job = ImportJob.objects.select_for_update().get(pk=job.pk)
        if job.state != ImportJob.State.DRAFT:
            raise Conflict(f"This import is already {job.state}.")
        job.mapping = mapping
        job.options = {"skip_bad_rows": skip_bad_rows, "delimiter": delimiter, "has_header": has_header}
        job.message = (message or "").strip()[:500]
        job.state = ImportJob.State.QUEUED
        job.save()
        audit_record(actor=user, action="dataset.import", project=job.dataset.project, target=job.dataset,
                     ip_address=ip_address, after={"import": job.pk, "mapping": mapping})
        transaction.on_commit(lambda: _enqueue_import(job.pk))
    return job


def _enqueue_import(job_id: int) -> None:
    enqueue(import_dataset_task, job_id, queue="default", on_failure=lambda reason: ImportJob.objects.filter(
        pk=job_id).update(state=ImportJob.State.FAILED, finished_at=timezone.now(), error=reason))


def import_cancel(*, user, job: ImportJob, token=None, ip_address: str | None = None) -> ImportJob:
    """Ask a running import to stop (within a batch); a queued or draft one stops at once."""
    policy.require(user, "dataset.import", job.dataset, token)
    with transaction.atomic():
        job = ask_to_cancel(ImportJob, job.pk, what="import", ends_at_once=(ImportJob.State.DRAFT,
                                                                             ImportJob.State.QUEUED))
        audit_record(actor=user, action="dataset.import_cancel", project=job.dataset.project, target=job.dataset,
                     ip_address=ip_address, after={"import": job.pk})
    return job


# --- derived versions -----------------------------------------------------------------------

def _derive_start(*, user, version, kind: str, params: dict, audit_action: str, token=None,
                  ip_address: str | None = None, audited: dict | None = None):
    """Queue a derived version. The audit entry gets `audited` (default: the params); a param that
    carries row content must not go there: a later redaction could not remove it."""
    from apps.datasets.models import DeriveJob

    policy.require(user, "dataset.edit", version.dataset, token)
    with transaction.atomic():
        job = DeriveJob.objects.create(parent=version, kind=kind, created_by=user, params=params)
        audit_record(actor=user, action=audit_action, project=version.dataset.project, target=version.dataset,
                     ip_address=ip_address, after={"version": version.number, **(params if audited is None else audited)})
        transaction.on_commit(lambda: _enqueue(job.pk))
    return job


def version_split_start(*, user, version, ratios: dict, seed: int = 0, stratify: bool = True, message: str = "",
                        token=None, ip_address: str | None = None):
    """Queue a new version that is `version` with a seeded train/validation/test split."""
    from workers.ingest.splits import check_ratios

    policy.require(user, "dataset.edit", version.dataset, token)
    try:
        ratios = check_ratios(ratios)
    except ValueError as exc:
        raise Invalid(str(exc), field="ratios") from None
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**31:
        raise Invalid("The seed is an integer from 0 to 2147483647.", field="seed")
    has_labels = version.rows.filter(label__isnull=False).exists()
    message = message or f"split {', '.join(f'{k} {v:g}' for k, v in ratios.items())}, seed {seed}"
    return _derive_start(user=user, version=version, kind="split", audit_action="dataset.split", token=token,
                         ip_address=ip_address, params={"ratios": ratios, "seed": seed,
                                                        "stratify": bool(stratify and has_labels),
                                                        "message": message[:500]})


EDITABLE_FIELDS = {"prompt": None, "response": None, "reference": None, "label": 200}
MAX_EDITED_ROWS = 1000
MAX_EDIT_CHARS = 1_000_000


def version_edit_start(*, user, version, edits: dict | None = None, drops: list | None = None, message: str = "",
                       token=None, ip_address: str | None = None):
    """Queue a new version that is `version` with some rows fixed (`edits`: {position: {field:
    text or null}}, fields prompt, response, reference, label) and some dropped (`drops`:
    positions). Rows never change in place: the worker writes the new version."""
    policy.require(user, "dataset.edit", version.dataset, token)
    edits, drops = edits or {}, drops or []
    if not isinstance(edits, dict) or not isinstance(drops, list):
        raise Invalid("edits is an object of position to changes, drops a list of positions.", field="edits")
    if not edits and not drops:
        raise Invalid("Nothing to change: give edits or drops.", field="edits")
    if len(edits) + len(drops) > MAX_EDITED_ROWS:
        raise Invalid(f"At most {MAX_EDITED_ROWS} rows per edit; split bigger changes.", field="edits")
    checked: dict[str, dict] = {}
    for key, changes in edits.items():
        where = f"edits.{key}"
        position = _position(key, version, where)
        if not isinstance(changes, dict) or not changes:
            raise Invalid("Each edit is an object of field to new text (or null).", field=where)
        for field, value in changes.items():
            if field not in EDITABLE_FIELDS:
                raise Invalid(f"Only {', '.join(EDITABLE_FIELDS)} can be edited.", field=f"{where}.{field}")
            if value is not None and not isinstance(value, str):
                raise Invalid("A new value is text or null.", field=f"{where}.{field}")
            limit = EDITABLE_FIELDS[field] or MAX_EDIT_CHARS
            if value is not None and len(value) > limit:
                raise Invalid(f"At most {limit} characters.", field=f"{where}.{field}")
        checked[str(position)] = changes
    dropped = sorted({_position(p, version, "drops") for p in drops})
    if len(dropped) >= version.row_count:
        raise Invalid("An edit cannot drop every row of the version.", field="drops")
    for key, changes in list(checked.items()):
        row = version.rows.get(position=int(key))
        if not (changes.get("prompt", row.prompt) or row.messages):
            raise Invalid("A row needs a prompt (or messages).", field=f"edits.{key}.prompt")
        if all(getattr(row, field) == value for field, value in changes.items()):
            del checked[key]  # already so: not a change
    if not checked and not dropped:
        raise Invalid("Nothing changes: every edited field already has that value.", field="edits")
    _refuse_repeated_edit(version, checked, dropped)
    if not isinstance(message, str) or len(message) > 500:
        raise Invalid("A message is at most 500 characters.", field="message")
    described = message or "; ".join(filter(None, [f"{len(checked)} row(s) edited" if checked else "",
                                                   f"{len(dropped)} row(s) dropped" if dropped else ""]))
    audited = {"edited": {key: {field: _digest(value) for field, value in changes.items()}
                          for key, changes in checked.items()}, "drops": dropped, "message": described}
    return _derive_start(user=user, version=version, kind="edit", audit_action="dataset.edit", token=token,
                         ip_address=ip_address, params={"edits": checked, "drops": dropped, "message": described},
                         audited=audited)


def _refuse_repeated_edit(version, edits: dict, drops: list) -> None:
    """Saving the same edit of a version twice made two identical versions: the second is refused,
    naming the version (or the job still making it) that already holds it."""
    from apps.datasets.models import DeriveJob

    for job in version.derive_jobs.filter(kind=DeriveJob.Kind.EDIT).exclude(
            state__in=(DeriveJob.State.FAILED, DeriveJob.State.CANCELLED)).select_related("version"):
        if job.params.get("edits") == edits and job.params.get("drops") == drops:
            made = f"version {job.version.number}" if job.version else "an edit job still running"
            raise Conflict(f"This edit of version {version.number} was already saved: {made} holds it.")


def _digest(value: str | None) -> str | None:
    """What the audit log keeps of an edited value: its SHA-256, never the text."""
    return None if value is None else hashlib.sha256(value.encode()).hexdigest()


def _position(value, version, field: str) -> int:
    try:
        position = int(value)
    except (TypeError, ValueError):
        raise Invalid(f"{value!r} is not a row position.", field=field) from None
    if not 0 <= position < version.row_count:
        raise Invalid(f"Version {version.number} has rows 0 to {version.row_count - 1}; there is no row {position}.",
                      field=field)
    return position


def version_token_stats_start(*, user, version, model_id, token=None, ip_address: str | None = None):
    """Queue token-length histograms of `version` with the tokenizer of a ready model of the project."""
    from apps.registry.models import RegisteredModel

    policy.require(user, "dataset.view", version.dataset, token)
    try:
        model = policy.get_object(user, RegisteredModel, model_id, "model.view", token,
                                  project_id=version.dataset.project_id)
    except NotFound:
        raise Invalid("No such model in this project.", field="model") from None
    base = model.base_model if model.kind == RegisteredModel.Kind.ADAPTER else model
    if base.status != RegisteredModel.Status.READY:
        raise Invalid(f"The model “{model.name}” is {model.status}, not ready.", field="model")
    from apps.datasets.models import DeriveJob

    with transaction.atomic():
        job = DeriveJob.objects.create(parent=version, kind=DeriveJob.Kind.TOKEN_STATS, created_by=user,
                                       params={"model": base.pk})
        transaction.on_commit(lambda: _enqueue(job.pk))
    return job


def version_pii_scan_start(*, user, version, token=None, ip_address: str | None = None):
    """Queue a PII scan of a version: a report, no new version."""
    return _derive_start(user=user, version=version, kind="pii_scan", audit_action="dataset.pii_scan", params={},
                         token=token, ip_address=ip_address)


def version_redact_start(*, user, version, message: str = "", token=None, ip_address: str | None = None):
    """Queue a new version with every PII finding replaced by a typed placeholder."""
    return _derive_start(user=user, version=version, kind="redact", audit_action="dataset.redact", token=token,
                         ip_address=ip_address, params={"message": (message or "PII redacted")[:500]})


def version_pins(version) -> list[str]:
    """What keeps a version's rows from being purged: the fine-tunes, comparisons and annotation
    campaigns that read them (their lineage must stay reproducible)."""
    pins = [f"fine-tune #{pk}" for pk in version.training_jobs.values_list("pk", flat=True)[:5]]
    pins += [f"comparison “{name}”" for name in version.comparisons.values_list("name", flat=True)[:5]]
    pins += [f"annotation campaign “{name}”" for name in version.campaigns.values_list("name", flat=True)[:5]]
    return pins


def version_purge_start(*, user, version, token=None, ip_address: str | None = None):
    """Delete a version's rows for good (a worker does it, in batches). The version disappears at
    once and stays in the history as purged. Refused while anything pins it."""
    policy.require(user, "dataset.delete", version.dataset, token)
    with transaction.atomic():
        job = _purge(version, user=user, ip_address=ip_address)
    version.refresh_from_db(fields=["status", "purged_at", "purged_by"])
    return job


def purge_deleted_datasets(*, older_than_days: int) -> dict:
    """Purge every unpinned version of the datasets soft-deleted more than `older_than_days` ago
    (the retention an operator runs from cron). Returns the count, and the versions kept and why."""
    from apps.datasets.models import DatasetVersion

    cutoff = timezone.now() - timedelta(days=older_than_days)
    purged, kept = 0, []
    for version in DatasetVersion.objects.filter(dataset__in=Dataset.all_objects.filter(deleted_at__lt=cutoff),
                                                 status=DatasetVersion.Status.READY).select_related("dataset"):
        try:
            with transaction.atomic():
                _purge(version, user=None)
            purged += 1
        except Conflict as exc:
            kept.append({"dataset": version.dataset_id, "version": version.number, "reason": exc.message})
    return {"purged": purged, "kept": kept}


def _purge(version, *, user, ip_address: str | None = None):
    """Inside a transaction: mark `version` purged and queue the deletion of its rows."""
    from apps.datasets.models import DatasetVersion, DeriveJob

    # Locked: a launch pinning the version at the same moment waits on its foreign key, and
    # the worker checks the pins again before it deletes anything.
    locked = DatasetVersion.objects.select_for_update().select_related("dataset__project").get(pk=version.pk)
    if locked.status != DatasetVersion.Status.READY:
        raise Conflict(f"Version {locked.number} is already purged.")
    pins = version_pins(locked)
    if pins:
        raise Conflict(f"Version {locked.number} cannot be purged: {', '.join(pins)} uses it.")
    if DeriveJob.objects.filter(parent=locked, state__in=ImportJob.ACTIVE).exists():
        raise Conflict(f"Version {locked.number} has a job running on it: wait for it or cancel it first.")
    locked.status, locked.purged_at, locked.purged_by = DatasetVersion.Status.PURGED, timezone.now(), user
    locked.save(update_fields=["status", "purged_at", "purged_by"])
    job = DeriveJob.objects.create(parent=locked, kind=DeriveJob.Kind.PURGE, created_by=user,
                                   params={"rows": locked.row_count})
    audit_record(actor=user, action="dataset.purge_version", project=locked.dataset.project, target=locked.dataset,
                 ip_address=ip_address, before={"version": locked.number, "rows": locked.row_count,
                                                "content_hash": locked.content_hash})
    transaction.on_commit(lambda: _enqueue(job.pk))
    return job


def _enqueue(job_id: int) -> None:
    from apps.datasets.models import DeriveJob
    enqueue(derive_version_task, job_id, queue="default", on_failure=lambda reason: DeriveJob.objects.filter(
        pk=job_id).update(state=DeriveJob.State.FAILED, finished_at=timezone.now(), error=reason))


def export_start(*, user, version, export_format: str, token=None, ip_address: str | None = None):
    """Queue a worker job that writes `version` as a file (jsonl, csv, parquet or a zipped
    `datasets` directory) for download: no request waits on a large export."""
    from apps.datasets.models import ExportJob
    from workers.ingest.export_formats import EXPORT_FORMATS

    policy.require(user, "dataset.export", version.dataset, token)
    if export_format not in EXPORT_FORMATS:
        raise Invalid(f"The format is one of {', '.join(EXPORT_FORMATS)}.", field="format")
    with transaction.atomic():
        job = ExportJob.objects.create(version=version, format=export_format, created_by=user)
        audit_record(actor=user, action="dataset.export", project=version.dataset.project, target=version.dataset,
                     ip_address=ip_address, after={"version": version.number, "format": export_format,
                                                   "job": job.pk})
        transaction.on_commit(lambda: _enqueue_export(job.pk))
    return job


def _enqueue_export(job_id: int) -> None:
    from apps.datasets.models import ExportJob
    enqueue(export_version_task, job_id, queue="default", on_failure=lambda reason: ExportJob.objects.filter(
        pk=job_id).update(state=ExportJob.State.FAILED, finished_at=timezone.now(), error=reason))
