"""Runs one import inside a worker: the adapter between the database and the ingest engine.

Rows are written in batches into a version that stays BUILDING (invisible) until the last
row is in; a failure or a cancel deletes that version and its rows, so nothing half-written
is left behind. The job row is the record of progress; each batch also publishes progress
to the job's websocket group. It runs as an apps.core.jobs.JobRun: redelivery of a job that
already ended, or that a live worker runs, does nothing; a job found RUNNING whose worker died
(its heartbeat stale) has its half version discarded and is run again from the start.
"""

import gc
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import tempfile
import time
import traceback
from pathlib import Path

from django.conf import settings
from django.db import connection, connections, transaction
from django.db.models import Max

from apps.core import storage
from apps.core.jobs import JobCancelled, JobRun
from apps.datasets import events, search_index
from apps.datasets.bulk import RowWriter, VersionTally, concurrently, first_repeated_id, insert_rows, stored_tallies
from apps.datasets.models import DatasetRow, DatasetVersion, ImportJob
from workers.ingest import (
    BadRows,
    ColumnMapping,
    IngestError,
    SourceFormat,
    canonical_row,
    canonical_split,
    read_records,
)
from workers.ingest.chunks import Part, Window, count_records, split_lines
from workers.ingest.errors import DEFAULT_LIMITS, record_bad_row
from workers.ingest.text import read_jsonl

logger = logging.getLogger(__name__)

# 2,000 rows a batch: large enough that the per-batch commit and progress write are cheap,
# small enough that a cancel is noticed within about a second.
BATCH_ROWS = 2000
# A part process writes larger batches: nobody waits on it between them (the parent reports).
PART_BATCH_ROWS = 10_000
PROGRESS_INTERVAL_S = 0.5  # progress written and published, and the cancel flag read, at most this often
SHORT_FIELDS = {"ext_id": 200, "label": 200}  # indexed columns have a length limit


def source_path(job: ImportJob) -> Path:
    return Path(job.server_path) if job.server_path else storage.local_blob(job.artifact_sha256)


def estimate_rows(path: Path, fmt: SourceFormat) -> int | None:
    """A cheap row estimate for the progress bar; None when it cannot be known up front."""
    try:
        if fmt.kind == "parquet" and not fmt.compression:
            import pyarrow.parquet as pq

            return pq.ParquetFile(path).metadata.num_rows
        if fmt.kind in ("jsonl", "csv", "tsv") and not fmt.compression:
            lines = 0
            with open(path, "rb") as handle:
                while chunk := handle.read(1024 * 1024):
                    lines += chunk.count(b"\n")
            return max(lines - (1 if fmt.kind != "jsonl" and fmt.has_header else 0), 0)
    except OSError:
        return None
    return None


def next_version_number(dataset) -> int:
    return (dataset.versions.aggregate(n=Max("number"))["n"] or 0) + 1


def discard_version(version: DatasetVersion | None) -> None:
    if version is not None and version.pk is not None:
        DatasetRow.objects.filter(version=version).delete()
        version.delete()


def run_import(job_id: int, *, worker: str = "") -> None:
    """Claim the import (JobRun.claim: a message redelivered while a live worker runs it does
    nothing), then load it into a new version under a heartbeat."""
    run = JobRun.claim(ImportJob, job_id, worker=worker, what="import", on_given_up=_given_up,
                       publish=events.import_progress, every_s=PROGRESS_INTERVAL_S)
    if run is None:
        return  # deleted, ended, or running under a live worker
    with run:
        _run(run)


def _given_up(job: ImportJob) -> None:
    discard_version(job.version)
    transaction.on_commit(lambda: events.import_progress(job))


def _run(run: JobRun) -> None:
    job = run.job
    job_id = job.pk
    if job.runs > 1:  # taken over from a worker that died: its rows go, the import starts again
        logger.warning("import %s lost its worker; starting it again", job_id)
        discard_version(job.version)
        job.version = None
    job.rows_done = 0
    fmt = SourceFormat(**job.source_format)
    path = source_path(job)
    job.rows_total_estimate = estimate_rows(path, fmt)
    with transaction.atomic():
        version = DatasetVersion.objects.create(
            dataset=job.dataset, number=next_version_number(job.dataset), author=job.created_by, message=job.message,
            parent=job.dataset.versions.filter(status=DatasetVersion.Status.READY).order_by("-number").first(),
            source={"import": job.pk, "filename": job.filename, "artifact_sha256": job.artifact_sha256,
                    "format": job.source_format, "mapping": job.mapping})
        job.version = version
        job.save(update_fields=["version", "rows_done", "rows_total_estimate"])  # not the heartbeat's field
    events.import_progress(job)
    try:
        _load_rows(run, version, path, fmt)
    except JobCancelled:
        discard_version(version)
        run.cancel(version=None, bad_rows=job.bad_rows)
    except IngestError as exc:
        discard_version(version)
        run.fail(str(exc), version=None, bad_rows=job.bad_rows)
    except Exception as exc:  # keep the traceback for the scientist; never leave a half version
        logger.exception("import %s failed", job_id)
        discard_version(version)
        run.fail(f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}", version=None, bad_rows=job.bad_rows)
    else:
        run.finish(version=version, bad_rows=job.bad_rows)
        search_index.after_ready(version)


def _parallel_parts(job: ImportJob, path: Path, fmt: SourceFormat) -> list[Part]:
    """The parts a large JSON Lines file is read in by processes of their own (one per core,
    up to IMPORT_PROCESSES), or [] to read it in this process. Only where every row's place is
    known before reading it: uncompressed JSON Lines, bad rows not skipped, into PostgreSQL."""
    processes = min(os.cpu_count() or 1, settings.IMPORT_PROCESSES)
    if (processes < 2 or connection.vendor != "postgresql" or fmt.kind != "jsonl" or fmt.compression
            or (job.options or {}).get("skip_bad_rows") or path.stat().st_size < settings.IMPORT_PARALLEL_MIN_BYTES):
        return []
    parts = split_lines(path, processes)
    return parts if len(parts) > 1 else []


def _load_rows(run: JobRun, version: DatasetVersion, path: Path, fmt: SourceFormat) -> None:
    job = run.job
    started = time.monotonic()
    parts = _parallel_parts(job, path, fmt)
    if parts:
        position, tally = _load_parts(run, version, path, parts)
        bad_rows = BadRows()
    else:
        position, tally, bad_rows = _load_sequentially(run, version, path, fmt)
    if position == 0:
        raise IngestError("no rows to import" + (f" ({len(bad_rows)} bad rows skipped)" if bad_rows else ""))
    # Ids are checked once the rows are stored (an index-free pass in the database), not in a set
    # in memory that would grow with the file.
    loaded = time.monotonic()
    id_column = next((column for column, role in job.mapping.items() if role == "id"), None)
    repeated, tallies = concurrently(lambda: first_repeated_id(version.pk) if id_column else None,
                                     lambda: stored_tallies(version.pk))
    if repeated is not None:
        ext_id, again_at = repeated
        raise IngestError(f"duplicate id {ext_id!r}", line=_line_of(job, path, fmt, again_at), column=id_column)
    job.rows_done = position
    job.bad_rows = list(bad_rows)
    if bad_rows.total:
        version.source = {**version.source, "bad_rows_skipped": bad_rows.total}
    version.row_count = position
    version.content_hash = tally.hasher.hexdigest()
    version.schema = {"roles": job.mapping, "metadata_keys": sorted(tally.metadata_keys)}
    version.stats = {**tally.stats.as_dict(), **tallies}
    version.status = DatasetVersion.Status.READY
    version.save(update_fields=["row_count", "content_hash", "schema", "stats", "status", "source"])
    logger.info("import %s: %d rows read and written in %.1f s (%d processes), checked and counted in %.1f s",
                job.pk, position, loaded - started, max(len(parts), 1), time.monotonic() - loaded)


def _load_sequentially(run: JobRun, version: DatasetVersion, path: Path, fmt: SourceFormat):
    bad_rows = BadRows()
    tally = VersionTally()
    batch: list[tuple] = []
    started = time.monotonic()
    position = 0
    with RowWriter() as writer:
        for _, row, split in _canonical_rows(run.job, path, fmt, bad_rows):
            batch.append(tally.row(version.pk, position, row, split))
            position += 1
            if len(batch) >= BATCH_ROWS:
                writer.write(batch)
                batch = []  # the writer thread holds the last one
                _report(run, position, time.monotonic() - started)
        writer.write(batch)
    return position, tally, bad_rows


def _load_parts(run: JobRun, version: DatasetVersion, path: Path, parts: list[Part]):
    """Each part read, checked, hashed and written by a process of its own, in parallel: per-row
    Python work is most of an import, and one process uses one core. Positions and the version
    hash are those reading the file in order gives; the first bad line in file order fails it."""
    with tempfile.TemporaryDirectory(prefix="import-parts-") as scratch:
        digests = [Path(scratch) / f"{index}.digests" for index in range(len(parts))]
        return _run_parts(run, version, path, parts, digests)


def _run_parts(run: JobRun, version: DatasetVersion, path: Path, parts: list[Part], digests: list[Path]):
    job = run.job
    context = multiprocessing.get_context("fork")
    connections.close_all()  # each process opens its own
    stop = context.Event()
    counters = [context.Value("q", 0, lock=False) for _ in parts]
    pipes, processes = [], []
    for part, counter, digests_path in zip(parts, counters, digests, strict=True):
        ours, theirs = context.Pipe()
        processes.append(_fork(_load_part, theirs, job.mapping, version.pk, path, part, digests_path, counter, stop))
        theirs.close()
        pipes.append(ours)
    try:
        counts = [_receive(pipe) for pipe in pipes]
        for answer in counts:
            if isinstance(answer, tuple):  # the part could not even be counted
                raise answer[1] if answer[0] == "error" else RuntimeError(f"a part of the import failed:\n{answer[1]}")
        first = 0
        for pipe, count in zip(pipes, counts, strict=True):
            pipe.send(first)
            first += count
        results: dict[int, tuple] = {}
        started = time.monotonic()
        while len(results) < len(pipes):
            waiting = [pipe for index, pipe in enumerate(pipes) if index not in results]
            for pipe in multiprocessing.connection.wait(waiting, timeout=PROGRESS_INTERVAL_S):
                answer = results[pipes.index(pipe)] = _receive(pipe)
                if answer[0] != "ok":
                    stop.set()  # the others need not go on
            _report(run, sum(counter.value for counter in counters), time.monotonic() - started)
    except BaseException:
        stop.set()
        raise
    finally:
        for pid in processes:
            _reap(pid)
    answers = [results[index] for index in range(len(parts))]
    for kind, detail in answers:  # the first part's error first
        if kind == "error":
            raise detail
        if kind == "crash":
            raise RuntimeError(f"a part of the import failed:\n{detail}")
    tally = VersionTally()
    for (_, part_tally), digests_path in zip(answers, digests, strict=True):
        tally.merge_part(part_tally, digests_path)
    return first, tally


def _fork(target, *args) -> int:
    """Run target(*args) in a forked process; its pid. os.fork, not multiprocessing: a Celery
    prefork worker is a daemonic process, which multiprocessing forbids to have children."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the worker's handlers
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            target(*args)
            code = 0
        finally:
            os._exit(code)  # never the parent's exit handlers
    return pid


def _reap(pid: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return
        time.sleep(0.05)


def _receive(pipe):
    try:
        return pipe.recv()
    except EOFError:
        raise RuntimeError("a process reading part of the import ended without a word") from None


def _load_part(pipe, roles: dict, version_id: int, path: Path, part: Part, digests: Path, counter, stop) -> None:
    """In a process of its own: count the part's records, learn the position of its first row,
    then read, check, hash and write its rows; send back what the whole needs (the rows'
    digests go to the file `digests`)."""
    # Plain connections here: the parent's pool came along without the threads that serve it.
    options = connection.settings_dict["OPTIONS"]
    connection.settings_dict["OPTIONS"] = {key: value for key, value in options.items() if key != "pool"}
    # What came from the parent lives on: the collector need not walk it again and again (nor
    # touch its pages, which fork shares until they are written).
    gc.freeze()
    try:
        pipe.send(count_records(path, part))
        position = pipe.recv()
        mapping = ColumnMapping(roles=roles)
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit = off")
        batch: list[tuple] = []
        with Window(path, part) as window, open(digests, "wb") as digests_out:
            tally = VersionTally(digests_to=digests_out)
            records = read_jsonl(window, DEFAULT_LIMITS, lines_before=part.lines_before, offset=part.start)
            for line, record in records if part.end > part.start else ():
                row = canonical_row(record, mapping, line)
                check_lengths(row, mapping, line)
                batch.append(tally.row(version_id, position, row, canonical_split(record, mapping, line)))
                position += 1
                if len(batch) >= PART_BATCH_ROWS:
                    insert_rows(batch)
                    counter.value += len(batch)
                    batch = []
                    if stop.is_set():
                        return
            insert_rows(batch)
            counter.value += len(batch)
        pipe.send(("ok", tally.part()))
    except IngestError as exc:
        pipe.send(("error", exc))
    except BaseException as exc:  # noqa: BLE001 (reported to the parent, which fails the import)
        pipe.send(("crash", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        connections.close_all()


def _canonical_rows(job: ImportJob, path: Path, fmt: SourceFormat, bad_rows: BadRows):
    """(line, canonical row, split) for each record the import keeps, in order; bad ones skipped
    into `bad_rows` when the job says so, else raised."""
    mapping = ColumnMapping(roles=job.mapping)
    options = job.options or {}
    skip_bad_rows = bool(options.get("skip_bad_rows"))
    records = read_records(path, fmt, delimiter=options.get("delimiter"), has_header=options.get("has_header"),
                           skip_bad_rows=skip_bad_rows, bad_rows=bad_rows)
    for line, record in records:
        try:
            row = canonical_row(record, mapping, line)
            split = canonical_split(record, mapping, line)
        except IngestError as exc:  # e.g. no prompt in this row: skippable like a parse error
            if not skip_bad_rows:
                raise
            record_bad_row(bad_rows, exc)
            continue
        check_lengths(row, mapping, line)
        yield line, row, split


def check_lengths(row: dict, mapping: ColumnMapping, line: int) -> None:
    """Indexed columns have a length limit: a row over it fails the import (never skipped)."""
    for field, limit in SHORT_FIELDS.items():
        if row[field] is not None and len(row[field]) > limit:
            role = "id" if field == "ext_id" else field
            raise IngestError(f"{field.replace('ext_', '')} is longer than {limit} characters", line=line,
                              column=mapping.column_for(role))


def _line_of(job: ImportJob, path: Path, fmt: SourceFormat, position: int) -> int:
    """The source line of the row stored at `position` (read again: only an error needs it)."""
    for index, (line, _, _) in enumerate(_canonical_rows(job, path, fmt, BadRows())):
        if index == position:
            return line
    raise AssertionError(f"no row at position {position}")


def _report(run: JobRun, rows: int, elapsed_s: float) -> None:
    """Progress, with its rate and time left: written and published at most every
    PROGRESS_INTERVAL_S; raises JobCancelled once a cancel was asked for."""
    rate = rows / elapsed_s if elapsed_s > 0 else None
    eta = (run.job.rows_total_estimate - rows) / rate if rate and run.job.rows_total_estimate else None
    run.progress(rows, rows_per_s=rate, eta_s=eta)


def data_root_path(raw: str) -> Path:
    """A server-side path, resolved (symlinks too) and accepted only inside DATA_ROOTS."""
    resolved = Path(raw).resolve()
    for root in settings.DATA_ROOTS:
        if resolved == root or root in resolved.parents:
            return resolved
    raise IngestError("the path is outside the configured data roots")
