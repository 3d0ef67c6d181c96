"""The full-text search index of a version's rows, built once the version is READY.

Why after and not as rows arrive: keeping a GIN index current row by row was most of an
import's time (bench/README.md, import_jsonl); built in one go over a finished version it costs
less, and the version can be browsed, filtered, annotated and trained on meanwhile.

On PostgreSQL each version's index is a partition of datasets_rowsearch (LIST on version_id):
made as a plain table from the version's rows in one statement, indexed, then attached, all in
one transaction (a worker dying half-way leaves nothing). A search reads only its own version's
partition, and a purge drops it whole. Until it is attached a search scans the version's rows:
the same results, slower, and stopped by a statement timeout with a clear message; the first
such search queues the build, which also covers versions made before this existed. A worker's
build is a SearchIndexJob under the jobs lease (apps.core.jobs): one worker builds it, and the
reaper re-sends a build whose worker was lost. SQLite keeps its FTS5 table current through
triggers: always indexed.
"""

import logging

from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone

from apps.core.jobs import JobRun, enqueue
from apps.datasets.models import DatasetVersion, SearchIndexJob
from apps.datasets.tasks import index_search_task

logger = logging.getLogger(__name__)

# Versions up to this size are indexed at once by whoever made them (well under a second);
# larger ones by a worker task of their own.
INLINE_ROWS = 20_000
# The text a search matches: the same expression the rows' search has always used.
DOCUMENT = ("to_tsvector('simple', coalesce(prompt, '') || ' ' || coalesce(response, '') || ' ' || "
            "coalesce(reference, ''))")
_LOCK_SPACE = 0x5EA2C4  # pg_advisory_xact_lock(space, version id): one builder per version
QUEUED_KEY = "datasets:search-index-queued:{}"
QUEUED_TTL_S = 600  # a lost build is queued again by the next search after this long


def applies() -> bool:
    return connection.vendor == "postgresql"


def partition(version_id: int) -> str:
    return f"datasets_rowsearch_v{int(version_id)}"


def is_indexed(version: DatasetVersion) -> bool:
    return not applies() or version.search_indexed_at is not None


def build(version_id: int) -> bool:
    """Index a READY version's rows for search; False when there was nothing to do (not
    PostgreSQL, not READY, already indexed)."""
    if not applies():
        return False
    version_id = int(version_id)
    table = partition(version_id)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_SPACE, version_id])
        version = DatasetVersion.objects.filter(pk=version_id, status=DatasetVersion.Status.READY,
                                                search_indexed_at__isnull=True).first()
        if version is None:
            return False
        cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
        # The version id is an int, inlined: CREATE TABLE AS takes no parameters.
        cursor.execute(f"CREATE TABLE {table} AS SELECT version_id, id AS row_id, position, {DOCUMENT} AS document "
                       f"FROM datasets_datasetrow WHERE version_id = {version_id}")
        cursor.execute(f"CREATE INDEX ON {table} USING GIN (document)")
        cursor.execute(f"ALTER TABLE datasets_rowsearch ATTACH PARTITION {table} FOR VALUES IN ({version_id})")
        version.search_indexed_at = timezone.now()
        version.save(update_fields=["search_indexed_at"])
    return True


def drop(version_id: int) -> None:
    """Remove a version's index (its rows are being purged, or the version deleted)."""
    if not applies():
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_SPACE, int(version_id)])
        cursor.execute(f"DROP TABLE IF EXISTS {partition(version_id)}")
        DatasetVersion.objects.filter(pk=version_id).update(search_indexed_at=None)


def after_ready(version: DatasetVersion) -> None:
    """What the maker of a version calls once it is READY: index it now if small, else queue."""
    if not applies():
        return
    if version.row_count > INLINE_ROWS:
        queue(version.pk)
        return
    try:
        build(version.pk)
    except Exception:  # the version stays usable; its searches scan and queue the build again
        logger.exception("search index of version %s not built", version.pk)
    version.refresh_from_db(fields=["search_indexed_at"])


def queue(version_id: int) -> None:
    """Ask a worker to build the index, at most once per QUEUED_TTL_S per version (every search of
    an unindexed version asks); a build running under a live worker is left to it."""
    version_id = int(version_id)
    if not applies() or not cache.add(QUEUED_KEY.format(version_id), 1, timeout=QUEUED_TTL_S):
        return
    job, created = SearchIndexJob.objects.get_or_create(version_id=version_id)
    if not created:
        if job.state == SearchIndexJob.State.RUNNING:
            return  # the lease sees it through: the reaper re-sends it if its worker is lost
        SearchIndexJob.objects.filter(pk=version_id).update(state=SearchIndexJob.State.QUEUED, error="",
                                                            finished_at=None)
    transaction.on_commit(lambda: enqueue(
        index_search_task, version_id, queue=SearchIndexJob.QUEUE,
        on_failure=lambda reason: SearchIndexJob.objects.filter(pk=version_id).update(
            state=SearchIndexJob.State.FAILED, error=reason, finished_at=timezone.now())))


def run_build(version_id: int, *, worker: str = "") -> None:
    """What a worker runs for a SearchIndexJob: claim it, then build under a heartbeat."""
    version_id = int(version_id)
    if not applies():
        return
    if DatasetVersion.objects.filter(pk=version_id, search_indexed_at__isnull=True).exists():
        # A message sent before builds were job rows names a version that has none yet.
        SearchIndexJob.objects.get_or_create(version_id=version_id)
    run = JobRun.claim(SearchIndexJob, version_id, worker=worker, what="search index build")
    if run is None:
        return  # built already, gone, or building under a live worker
    with run:
        try:
            build(version_id)
        except Exception as exc:  # the version stays usable; its searches scan and queue the build again
            logger.exception("search index of version %s not built", version_id)
            run.fail(f"{type(exc).__name__}: {exc}"[:2000])
        else:
            run.finish()


def on_version_deleted(sender, instance: DatasetVersion, **kwargs) -> None:
    """post_delete of a version: its partition goes with it."""
    if instance.search_indexed_at is not None:
        drop(instance.pk)
