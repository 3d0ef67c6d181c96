"""Project dashboard and project list with 1,000 projects: p50/p99 latency and SQL per request.

Baseline, same run: the same pages with 10 projects in the database. The query count must
be equal (constant, not growing with data) and p99 should stay within 1.5x.
"""

import time

REQUESTS = 200
TARGET_RATIO = 1.5


def _measure(client, url: str) -> tuple[list[float], int]:
    from django.db import connection

    for _ in range(5):  # warm caches and template loading
        client.get(url)
    queries = []

    def count(execute, sql, params, many, context):
        queries.append(sql)
        return execute(sql, params, many, context)

    # An execute wrapper survives the reconnect each request makes (CONN_MAX_AGE=0).
    with connection.execute_wrapper(count):
        assert client.get(url).status_code == 200
    samples = []
    for _ in range(REQUESTS):
        started = time.perf_counter()
        response = client.get(url)
        samples.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    return samples, len(queries)


def _seed(user, count: int, start: int = 0):
    from apps.projects.models import Membership, Project

    projects = Project.objects.bulk_create([Project(name=f"Project {i:05}") for i in range(start, start + count)])
    Membership.objects.bulk_create([Membership(project=p, user=user, role="viewer") for p in projects])
    return projects


def run() -> list[dict]:
    from bench.stack import embedded_stack

    with embedded_stack(prefix="bench-dashboard-"):
        from django.contrib.auth import get_user_model
        from django.test import Client

        from apps.projects.services import project_create

        user = get_user_model().objects.create_user("bench", password="x" * 12)
        home = project_create(user=user, name="Home")
        client = Client()
        client.force_login(user)
        pages = {"project_dashboard": f"/projects/{home.pk}/", "project_list": "/projects/"}

        _seed(user, 9)
        small = {name: _measure(client, url) for name, url in pages.items()}
        _seed(user, 990, start=100)
        large = {name: _measure(client, url) for name, url in pages.items()}

    from bench.report import percentile, publish, result

    results = []
    for name in pages:
        (small_ms, small_q), (large_ms, large_q) = small[name], large[name]
        p99_ratio = percentile(large_ms, 99) / percentile(small_ms, 99)
        results.append(result(
            name=f"{name}_p99", metric=f"p99 latency of {name} with 1,000 projects", unit="ms",
            value=percentile(large_ms, 99), baseline_what="same page with 10 projects",
            baseline_value=percentile(small_ms, 99), target=f"ratio <= {TARGET_RATIO:g}",
            passed=p99_ratio <= TARGET_RATIO,
            extra={"p50_ms": round(percentile(large_ms, 50), 3),
                   "baseline_p50_ms": round(percentile(small_ms, 50), 3)}))
        results.append(result(
            name=f"{name}_queries", metric=f"SQL queries per request of {name} with 1,000 projects",
            unit="count", value=large_q, baseline_what="same page with 10 projects", baseline_value=small_q,
            target="equal (ratio 1)", passed=large_q == small_q))
    return publish(results)


if __name__ == "__main__":
    run()
