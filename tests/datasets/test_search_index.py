"""The per-version full-text search index on PostgreSQL: built after the version is ready (at
once when small, by a real worker when large), the same answers with and without it, a scan
bounded by a timeout until it exists, and gone with the version."""

import pytest
from django.db import connection

from apps.datasets import search_index, selectors, services
from apps.datasets.models import Dataset, DatasetVersion, DeriveJob, SearchIndexJob
from apps.datasets.writer import write_version
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(connection.vendor != "postgresql",
                                 reason="SQLite keeps its FTS5 index current through triggers")]

ROLES = {"id": "id", "prompt": "prompt", "response": "response"}


def records(count: int):
    for i in range(count):
        animal = "llama" if i % 7 == 0 else "alpaca"
        yield {"id": f"r{i}", "prompt": f"Tell me about the {animal} number {i}",
               "response": "A <b>woolly</b> friend." if i % 3 == 0 else "It hums."}


def make_version(project, owner, count: int, name="Animals"):
    dataset = Dataset.objects.create(project=project, name=name, created_by=owner)
    return write_version(dataset=dataset, author=owner, roles=ROLES, records=records(count))


def partition_exists(version_id: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [search_index.partition(version_id)])
        return cursor.fetchone()[0]


def found(version, q: str) -> list[str]:
    rows, after = [], None
    while True:
        page, after = selectors.version_rows(version=version, q=q, after=after, limit=50)
        rows += [row.ext_id for row in page]
        if after is None:
            return rows


QUERIES = ["llama", "woolly friend", "LLAMA number", "alpaca hums", "nothing-here", "b woolly", "14"]


def test_a_small_version_is_searchable_through_its_own_index_at_once_with_the_same_answers(project, owner):
    version = make_version(project, owner, 300)
    assert version.search_indexed_at is not None and partition_exists(version.pk)
    indexed = {q: found(version, q) for q in QUERIES}
    assert indexed["llama"] == [f"r{i}" for i in range(0, 300, 7)]
    assert indexed["woolly friend"] == [f"r{i}" for i in range(0, 300, 3)]
    assert indexed["14"] == ["r14"]
    assert indexed["nothing-here"] == []
    # The scan a version gets before its index exists answers the same.
    search_index.drop(version.pk)
    version.refresh_from_db()
    assert version.search_indexed_at is None and not partition_exists(version.pk)
    assert {q: found(version, q) for q in QUERIES} == indexed


def test_a_search_reads_only_its_own_versions_index(project, owner):
    first = make_version(project, owner, 50, name="A")
    second = make_version(project, owner, 50, name="B")
    assert found(first, "llama") == found(second, "llama") == [f"r{i}" for i in range(0, 50, 7)]
    rows, _ = selectors.version_rows(version=first, q="llama")
    assert {row.version_id for row in rows} == {first.pk}
    with connection.cursor() as cursor:
        sql, params = selectors.search(first.rows.all(), "llama", first).order_by("position").query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(line for (line,) in cursor.fetchall())
    assert search_index.partition(first.pk) in plan and search_index.partition(second.pk) not in plan


@pytest.mark.slow
def test_a_large_version_is_indexed_by_a_worker_and_searches_scan_until_then(project, owner, celery_worker,
                                                                             monkeypatch):
    monkeypatch.setattr(search_index, "INLINE_ROWS", 100)
    version = make_version(project, owner, 500)  # over INLINE_ROWS: queued for the worker
    assert found(version, "llama") == [f"r{i}" for i in range(0, 500, 7)]  # meanwhile: a scan, same rows
    wait_for(lambda: DatasetVersion.objects.get(pk=version.pk).search_indexed_at is not None, timeout=60,
             what="the worker to index the version")
    version.refresh_from_db()
    assert partition_exists(version.pk)
    assert found(version, "llama") == [f"r{i}" for i in range(0, 500, 7)]
    build = SearchIndexJob.objects.get(pk=version.pk)  # the worker's build ran under the jobs lease, once
    assert (build.state, build.runs) == ("succeeded", 1) and build.worker and build.finished_at is not None


@pytest.mark.slow
def test_a_version_made_before_search_indexes_is_indexed_after_its_first_search(project, owner, celery_worker):
    version = make_version(project, owner, 60)
    search_index.drop(version.pk)  # as a version made before this existed, or whose build was lost
    version.refresh_from_db()
    assert found(version, "alpaca hums")
    wait_for(lambda: DatasetVersion.objects.get(pk=version.pk).search_indexed_at is not None, timeout=60,
             what="the first search to have the version indexed")


def test_a_scan_that_takes_too_long_is_stopped_with_a_clear_error_naming_the_field(project, owner, monkeypatch,
                                                                                     client):
    version = make_version(project, owner, 20_000)
    search_index.drop(version.pk)
    monkeypatch.setattr(selectors, "UNINDEXED_SEARCH_TIMEOUT_MS", 1)
    monkeypatch.setattr(search_index, "queue", lambda version_id: None)  # no worker here: stays unindexed
    client.force_login(owner)
    answer = client.get(f"/api/datasets/{version.dataset_id}/versions/{version.number}/rows/",
                        {"q": "absentword"})
    assert answer.status_code == 400, answer.content
    assert answer.json()["field"] == "q" and "index is still being built" in answer.json()["detail"]
    # The timeout was the scan's own: the next query on the connection runs unbounded.
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "0"
    page = client.get(f"/projects/{project.pk}/datasets/{version.dataset_id}/versions/{version.number}/",
                      {"q": "absentword"})
    assert page.status_code == 200
    assert b"index is still being built" in page.content


def test_building_twice_does_nothing_and_a_version_not_ready_is_not_indexed(project, owner):
    version = make_version(project, owner, 20)
    assert search_index.build(version.pk) is False
    version.status = DatasetVersion.Status.BUILDING
    version.search_indexed_at = None
    version.save()
    search_index.drop(version.pk)
    assert search_index.build(version.pk) is False and not partition_exists(version.pk)


@pytest.mark.slow
def test_a_purge_and_a_deleted_version_take_their_index_with_them(project, owner, celery_worker):
    purged = make_version(project, owner, 30, name="Purged")
    deleted = make_version(project, owner, 30, name="Deleted")
    assert partition_exists(purged.pk) and partition_exists(deleted.pk)
    job = services.version_purge_start(user=owner, version=purged)
    wait_for(lambda: DeriveJob.objects.get(pk=job.pk).state == DeriveJob.State.SUCCEEDED, timeout=60,
             what="the worker to purge the version")
    assert not partition_exists(purged.pk)
    version_id = deleted.pk
    deleted.delete()
    assert not partition_exists(version_id)
