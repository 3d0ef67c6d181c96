"""Runs a derive job in a worker: a new version made from an existing one, or a report on it.

- split: rows copied inside the database (INSERT … SELECT), then assigned in batches, then
  hashed again (a version's hash covers its split assignment; its rows' hashes do not);
- redact: rows rewritten with typed placeholders where PII was found (new hashes);
- pii_scan: a report (counts per type and column, masked examples); no new version;
- purge: the parent's rows deleted for good, in batches (it was marked purged when asked).
A new version stays BUILDING until done; a failure or cancel removes it, as for imports.
"""

import logging
import time
import traceback

from django.db import connection, transaction

from apps.core.chunks import in_chunks
from apps.core.jobs import JobCancelled, JobRun
from apps.datasets import events, search_index
from apps.datasets.bulk import insert_rows, row_tuple, stored_tallies
from apps.datasets.importer import BATCH_ROWS, discard_version, next_version_number
from apps.datasets.models import DatasetRow, DatasetVersion, DeriveJob
from workers.ingest import VersionHasher
from workers.ingest.splits import assign_splits
from workers.ingest.stats import VersionStats

logger = logging.getLogger(__name__)
UPDATE_BATCH = 5000
TEXT_FIELDS = ("prompt", "response", "reference")

COPY_ROWS = """
INSERT INTO datasets_datasetrow (version_id, position, row_hash, ext_id, prompt, response, messages, label,
                                 reference, metadata, split)
SELECT %s, position, row_hash, ext_id, prompt, response, messages, label, reference, metadata, ''
FROM datasets_datasetrow WHERE version_id = %s ORDER BY position
"""


def run_derive(job_id: int, *, worker: str = "") -> None:
    """Claim the job (apps.core.jobs: a message redelivered while a live worker runs it does
    nothing; ended ones neither), then derive under a heartbeat."""
    run = JobRun.claim(DeriveJob, job_id, worker=worker, what="job",
                       on_given_up=lambda lost: discard_version(lost.version),
                       publish=lambda job, **details: events.derive_progress(job),
                       every_s=0)  # every batch is reported, to the last one
    if run is None:
        return
    with run:
        _derive(run)


def _derive(run: JobRun) -> None:
    job = run.job
    if job.runs > 1:
        discard_version(job.version)  # its worker died mid-way: start again
    version = None
    if job.kind not in DeriveJob.REPORT_KINDS:
        version = _new_version(job)
    job.version = version
    job.save(update_fields=["version"])
    events.derive_progress(job)
    try:
        {DeriveJob.Kind.SPLIT: _split, DeriveJob.Kind.REDACT: _redact, DeriveJob.Kind.PII_SCAN: _scan,
         DeriveJob.Kind.EDIT: _edit, DeriveJob.Kind.TOKEN_STATS: _token_stats, DeriveJob.Kind.PURGE: _purge}[job.kind](
            job, version, run.progress)
    except JobCancelled:
        discard_version(version)
        run.cancel(version=None)
    except Exception as exc:  # keep the traceback; never leave a half version
        logger.exception("derive job %s failed", job.pk)
        discard_version(version)
        run.fail(f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}", version=None)
    else:
        run.finish(result=job.result)


def _new_version(job: DeriveJob) -> DatasetVersion:
    parent = job.parent
    with transaction.atomic():
        return DatasetVersion.objects.create(
            dataset=parent.dataset, number=next_version_number(parent.dataset), parent=parent, author=job.created_by,
            message=job.params.get("message", ""), content_hash=parent.content_hash, row_count=parent.row_count,
            schema=parent.schema, stats=parent.stats,
            source={"derived_from": parent.number, "kind": job.kind, "params": job.params})


def _parent_rows(job: DeriveJob):
    # Piece by piece, not .iterator(): the job writes between pieces (see apps.core.chunks).
    return in_chunks(DatasetRow.objects.filter(version=job.parent), key="position", size=BATCH_ROWS)


def _split(job: DeriveJob, version: DatasetVersion, progress) -> None:
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
            progress(done)
    counts = {name: len(positions) for name, positions in by_split.items()}
    version.content_hash = _stored_hash(version)  # the split assignment is part of the version's identity
    version.schema = {**version.schema, "splits": {"ratios": params["ratios"], "seed": params["seed"],
                                                   "stratified": params["stratify"], "counts": counts}}
    version.stats = {**version.stats, "splits": counts}
    version.status = DatasetVersion.Status.READY
    version.save(update_fields=["content_hash", "schema", "stats", "status"])
    search_index.after_ready(version)


def _stored_hash(version: DatasetVersion) -> str:
    """The content hash of a version's stored rows: their row hashes and splits, in order."""
    hasher = VersionHasher()
    for row_hash, split in (DatasetRow.objects.filter(version=version).order_by("position")
                            .values_list("row_hash", "split").iterator(chunk_size=BATCH_ROWS)):
        hasher.update_row_hash(row_hash, split)
    return hasher.hexdigest()


def _texts(row: DatasetRow):
    """(column, text) pairs of a row that may hold PII."""
    for field in TEXT_FIELDS:
        if getattr(row, field):
            yield field, getattr(row, field)
    for turn in row.messages or []:
        if isinstance(turn, dict) and isinstance(turn.get("content"), str):
            yield "messages", turn["content"]
    for key, value in (row.metadata or {}).items():
        if isinstance(value, str):
            yield f"metadata.{key}", value


def _scan(job: DeriveJob, version: None, progress) -> None:
    from workers.pii import ScanSummary

    summary = ScanSummary()
    done = 0
    last = time.monotonic()
    for row in _parent_rows(job):
        for column, text in _texts(row):
            summary.add(row.position, column, text)
        done += 1
        if time.monotonic() - last > 0.5:  # per row: reported twice a second
            last = time.monotonic()
            progress(done)
    job.rows_done = done
    job.result = summary.as_dict()


def _redact(job: DeriveJob, version: DatasetVersion, progress) -> None:
    from workers.pii import redact_text

    def redacted(row: DatasetRow) -> dict:
        content = {"ext_id": row.ext_id, "label": row.label}
        for field in TEXT_FIELDS:
            value = getattr(row, field)
            content[field] = redact_text(value) if value else value
        content["messages"] = ([{**turn, "content": redact_text(turn["content"])}
                                if isinstance(turn, dict) and isinstance(turn.get("content"), str) else turn
                                for turn in row.messages] if row.messages else row.messages)
        content["metadata"] = {key: redact_text(value) if isinstance(value, str) else value
                               for key, value in (row.metadata or {}).items()}
        return content

    job.result = {"rows_changed": _rewrite(job, version, progress, redacted)}


def _edit(job: DeriveJob, version: DatasetVersion, progress) -> None:
    """The parent's rows, renumbered without the dropped ones, the edited ones changed."""
    edits, drops = job.params.get("edits", {}), set(job.params.get("drops", []))

    def edited(row: DatasetRow) -> dict | None:
        if row.position in drops:
            return None
        return {"ext_id": row.ext_id, "prompt": row.prompt, "response": row.response, "messages": row.messages,
                "label": row.label, "reference": row.reference, "metadata": row.metadata or {},
                **edits.get(str(row.position), {})}

    _rewrite(job, version, progress, edited)
    job.result = {"rows_edited": len(edits), "rows_dropped": len(drops)}


def _rewrite(job: DeriveJob, version: DatasetVersion, progress, transform) -> int:
    """Write the parent's rows in order, each as `transform(row)` returns it (None drops it),
    renumbered from 0, hashed and counted as an import does; the version is READY at the end.
    Returns how many rows changed."""
    hasher, stats = VersionHasher(), VersionStats()
    batch: list[tuple] = []
    position = done = changed = 0
    for row in _parent_rows(job):
        done += 1
        content = transform(row)
        if content is None:
            continue
        stats.add(content)
        row_hash = hasher.update(content, row.split)
        changed += row_hash != row.row_hash
        batch.append(row_tuple(version.pk, position, row_hash, content, row.split))
        position += 1
        if len(batch) >= BATCH_ROWS:
            insert_rows(batch)
            batch.clear()
            progress(done)
    insert_rows(batch)
    job.rows_done = done
    version.row_count = position
    version.content_hash = hasher.hexdigest()
    version.stats = {**stats.as_dict(), **stored_tallies(version.pk)}  # split counts too, drops counted
    version.status = DatasetVersion.Status.READY
    version.save(update_fields=["row_count", "content_hash", "stats", "status"])
    search_index.after_ready(version)
    return changed


def _token_stats(job: DeriveJob, version: None, progress) -> None:
    """Token-length histograms of the parent's rows with a registered model's tokenizer (chat rows:
    the turns before the last assistant turn are the prompt, that turn the response)."""

    from apps.registry.models import RegisteredModel
    from apps.registry.weights import local_weights
    from workers.ingest.stats import TokenLengths
    from workers.models.loading import load_tokenizer

    model = RegisteredModel.all_objects.get(pk=job.params["model"])
    tokenizer = load_tokenizer(local_weights(model))
    lengths = TokenLengths()
    done = 0
    last = time.monotonic()

    def count(text) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    for row in _parent_rows(job):
        prompt, response = row.prompt, row.response
        if row.messages:
            turns = [t for t in row.messages if isinstance(t, dict)]
            last_answer = max((i for i, t in enumerate(turns) if t.get("role") == "assistant"), default=None)
            prompt = "\n".join(str(t.get("content") or "") for t in turns[:last_answer])
            response = str(turns[last_answer].get("content") or "") if last_answer is not None else response
        lengths.add(count(prompt), count(response))
        done += 1
        if time.monotonic() - last > 0.5:  # per row: reported twice a second
            last = time.monotonic()
            progress(done)
    job.rows_done = done
    job.result = {**lengths.as_dict(), "model": model.pk, "model_name": model.name}


PURGE_BATCH = 10_000


def _purge(job: DeriveJob, version: None, progress) -> None:
    """Delete the purged parent's rows and exports, unless something pinned it after it was marked
    (a launch racing the purge): then it is READY again and the job fails saying what pins it."""
    import shutil
    from pathlib import Path

    from django.conf import settings

    from apps.datasets.services import version_pins

    target = job.parent
    with transaction.atomic():
        target = DatasetVersion.objects.select_for_update().get(pk=target.pk)
        pins = version_pins(target)
        if pins:
            target.status, target.purged_at, target.purged_by = DatasetVersion.Status.READY, None, None
            target.save(update_fields=["status", "purged_at", "purged_by"])
    if pins:
        raise RuntimeError(f"Not purged: {', '.join(pins)} started using version {target.number}.")
    search_index.drop(target.pk)
    for export in target.exports.all():
        shutil.rmtree(Path(settings.ARTIFACT_ROOT) / "exports" / str(export.pk), ignore_errors=True)
        export.delete()
    done = 0
    for start in range(0, target.row_count, PURGE_BATCH):  # positions run 0 .. row_count - 1
        with connection.cursor() as cursor:  # plain SQL: nothing in Python refers to these rows any more
            cursor.execute("DELETE FROM datasets_datasetrow WHERE version_id = %s AND position >= %s AND position < %s",
                           [target.pk, start, start + PURGE_BATCH])
            done += cursor.rowcount
        job.rows_done = done
        DeriveJob.objects.filter(pk=job.pk).update(rows_done=done)
        events.derive_progress(job)  # not run.progress: never cancelled, half a purge would be neither version
    job.rows_done = done
    job.result = {"rows_deleted": done}
