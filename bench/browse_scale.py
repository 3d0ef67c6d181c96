"""Browsing and searching a version's rows at 1,000,000 rows, against the same at 10,000.

Four requests to `/api/datasets/<id>/versions/<n>/rows/` (in-process client, a project
scientist logged in, PostgreSQL): the first page; a deep keyset page (`after` = the middle
position); a full-text search for a word that 1 row in 100 holds (`q=needle`); and a label
filter (`label=neutral`, 1 row in 4). 50 requests each, p50 and p99. Also a search for a word
that no row holds (`q=zzqqxx`, a typo's case), 5 requests each: it is the slowest search there is.

Baseline, same run: the same requests against a 10,000-row version, in a database that holds
only that version. The large database is a copy of the small one (CREATE DATABASE ...
TEMPLATE, so users, session and ids are the same) plus a second version of 1,000,000 rows;
requests alternate between the two databases, so load on the machine falls on both sides
alike. p99 must stay within 2x. For each request the SQL query count is recorded (it must not
grow), the same request against the 10,000-row version inside the large database is timed
too (what other versions' rows cost a small one), and EXPLAIN (ANALYZE, BUFFERS) of the rows
query at both sizes is kept in the result JSON (`plan`, `baseline_plan`).

Rows are written with COPY (the same generated rows as import_jsonl: ~200 bytes, words from
a 4,000-word vocabulary); the full-text GIN index (migration 0003) is dropped during the
COPY and built again from that migration's own statement, then VACUUM ANALYZE, the state
autovacuum leaves a table in after an import.

PostgreSQL and Redis as bench/stack.py sets them up (`live_stack` and its `copy_database`: the
databases `bench_browse_10k` and `bench_browse_1m`, fresh, dropped at the end). BENCH_BROWSE_ROWS changes the large size.
"""

import gc
import hashlib
import os
import time

from bench.import_jsonl import COPY_COLUMNS, NEEDLE, records
from bench.stack import PG_URL, django_already_set_up, live_stack, rerun_in_child, seed_dataset, use_database

SMALL_ROWS = 10_000
LARGE_ROWS = int(os.environ.get("BENCH_BROWSE_ROWS", "1000000"))
REQUESTS = 50
SLOW_REQUESTS = 5  # the search for a word in no row: seconds a request at 1,000,000 rows
TARGET_RATIO = 2.0
SMALL_DB = "bench_browse_10k"
LARGE_DB = "bench_browse_1m"
LABEL = "neutral"
ABSENT = "zzqqxx"  # in no row: the vocabulary's words are at most 9 letters, chosen at random


def _copy_rows(version_id: int, count: int) -> float:
    """COPY `count` generated rows into the (READY) version, then build its search index as a
    worker does once a version is ready (apps.datasets.search_index)."""
    import psycopg
    from django.db import connection

    from apps.datasets import search_index

    connection.close()
    started = time.perf_counter()
    with psycopg.connect(f"{PG_URL}/{connection.settings_dict['NAME']}", autocommit=True) as conn:
        with conn.transaction(), conn.cursor() as cursor, \
                cursor.copy(f"COPY datasets_datasetrow ({COPY_COLUMNS}) FROM STDIN") as copy:
            for position, (ext_id, prompt, response, label, source) in enumerate(records(count)):
                copy.write_row((version_id, position, hashlib.sha256(prompt.encode()).hexdigest(), ext_id, prompt,
                                response, label, f'{{"source": "{source}"}}', ""))
    assert search_index.build(version_id)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE datasets_datasetrow")
        cursor.execute("ANALYZE datasets_rowsearch")
    connection.close()
    return time.perf_counter() - started


def _ready_version(dataset, owner, number: int, rows: int):
    from apps.datasets.models import DatasetVersion

    version = DatasetVersion.objects.create(dataset=dataset, number=number, author=owner, row_count=rows,
                                            status=DatasetVersion.Status.READY, content_hash="0" * 64,
                                            schema={"roles": {}, "metadata_keys": ["source"]})
    return version.pk


def _capture(client, url: str) -> tuple[int, str, list]:
    """SQL query count of one request, and the rows query (the one ordered by position)."""
    from django.db import connection

    queries = []

    def record(execute, sql, params, many, context):
        queries.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code, response.content[:300])
    rows_sql, rows_params = next((sql, params) for sql, params in queries
                                 if "datasets_datasetrow" in sql and "ORDER BY" in sql and "position" in sql)
    return len(queries), rows_sql, rows_params


def _explain(sql: str, params) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def run() -> list[dict]:
    names = [f"browse_{kind}_p99" for kind in ("first_page", "deep_page", "search", "label", "search_absent")]
    if django_already_set_up():
        return rerun_in_child("bench.browse_scale", names)
    with live_stack(SMALL_DB, prefix="bench-browse-", pool=False) as stack:
        from django.contrib.auth import get_user_model
        from django.db import connection
        from django.test import Client
        from django.test.utils import setup_test_environment

        from apps.projects.services import member_add
        from bench.report import percentile, publish, result

        setup_test_environment()  # the in-process client's host, "testserver", allowed
        owner, project, dataset = seed_dataset()
        scientist = get_user_model().objects.create_user("bench-scientist", password="x" * 12)
        member_add(actor=owner, project=project, username=scientist.username, role="scientist")
        client = Client()
        client.force_login(scientist)  # before the copy: the session is in both databases

        _copy_rows(_ready_version(dataset, owner, 1, SMALL_ROWS), SMALL_ROWS)
        large_db = stack.copy_database(LARGE_DB)
        use_database(large_db)
        large_pk = _ready_version(dataset, owner, 2, LARGE_ROWS)
        seed_s = _copy_rows(large_pk, LARGE_ROWS)
        print(f"browse_scale: {LARGE_ROWS:,} rows written, indexed and analyzed in {seed_s:.1f} s", flush=True)

        base = f"/api/datasets/{dataset.pk}/versions"
        # kind -> (query string for a version of `rows` rows, rows per page expected, requests)
        kinds = {
            "first_page": (lambda rows: "", 50, REQUESTS),
            "deep_page": (lambda rows: f"?after={rows // 2}", 50, REQUESTS),
            "search": (lambda rows: f"?q={NEEDLE}", 50, REQUESTS),
            "label": (lambda rows: f"?label={LABEL}", 50, REQUESTS),
            "search_absent": (lambda rows: f"?q={ABSENT}", 0, SLOW_REQUESTS),
        }
        # side -> (database, version number, row count)
        sides = {"small": (stack.database, 1, SMALL_ROWS), "large": (large_db, 2, LARGE_ROWS),
                 "small_in_large": (large_db, 1, SMALL_ROWS)}
        measured = {}
        for kind, (query, expected, requests) in kinds.items():
            urls = {side: f"{base}/{number}/rows/{query(rows)}" for side, (_, number, rows) in sides.items()}
            info = {}
            for side, (database, _, _) in sides.items():
                use_database(database)
                for _ in range(5 if requests == REQUESTS else 1):  # warm caches, serializer, buffers
                    body = client.get(urls[side]).json()
                assert len(body["results"]) == expected, (kind, side, len(body["results"]))
                count, sql, params = _capture(client, urls[side])
                info[side] = {"queries": count, "plan": _explain(sql, params), "sql": sql % tuple(
                    repr(p) for p in params) if params else sql}
            samples = {side: [] for side in sides}
            order = list(sides)
            gc.collect()
            for i in range(requests):
                for side in order if i % 2 else reversed(order):
                    use_database(sides[side][0])
                    started = time.perf_counter()
                    response = client.get(urls[side])
                    samples[side].append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 200
            measured[kind] = (samples, info, requests)
        use_database(stack.database)
        connection.close()

    what = {"first_page": "the first page", "deep_page": "a keyset page at the middle position",
            "search": f"a full-text search for a word in 1% of rows (q={NEEDLE})",
            "label": f"a label filter (label={LABEL}, 25% of rows)",
            "search_absent": f"a full-text search for a word in no row (q={ABSENT})"}
    results = []
    for kind, (samples, info, requests) in measured.items():
        large, small, mixed = samples["large"], samples["small"], samples["small_in_large"]
        ratio = percentile(large, 99) / percentile(small, 99)
        results.append(result(
            name=f"browse_{kind}_p99", metric=f"p99 latency of {what[kind]}, {LARGE_ROWS:,}-row version",
            unit="ms", value=percentile(large, 99), baseline_what=f"same request, {SMALL_ROWS:,}-row version "
                                                                 "alone in its database",
            baseline_value=percentile(small, 99), target=f"ratio <= {TARGET_RATIO:g}",
            passed=ratio <= TARGET_RATIO and info["large"]["queries"] == info["small"]["queries"],
            extra={"p50_ms": round(percentile(large, 50), 3), "baseline_p50_ms": round(percentile(small, 50), 3),
                   "small_version_in_large_db_p50_ms": round(percentile(mixed, 50), 3),
                   "small_version_in_large_db_p99_ms": round(percentile(mixed, 99), 3),
                   "queries": info["large"]["queries"], "baseline_queries": info["small"]["queries"],
                   "requests": requests, "rows": LARGE_ROWS, "seed_s": round(seed_s, 1),
                   "sql": info["large"]["sql"], "plan": info["large"]["plan"],
                   "baseline_plan": info["small"]["plan"], "small_in_large_plan": info["small_in_large"]["plan"]}))
    return publish(results)


if __name__ == "__main__":
    run()
