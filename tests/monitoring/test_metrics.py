"""/metrics in the Prometheus text format: the request histogram by route pattern, and figures
computed from the database at scrape time."""

import pytest
from django.test import Client
from django.urls import path
from prometheus_client.parser import text_string_to_metric_families

from apps.monitoring import http_metrics
from tests.monitoring.conftest import failed_training_job
from tests.training.fixtures import make_job

pytestmark = pytest.mark.django_db


def boom(request):
    raise RuntimeError("a bug in a view")


# For the test that needs a view answering 500.
urlpatterns = [path("boom/<int:n>/", boom)]


TOKEN = "scrape-" + "t0ken" * 8


def scrape() -> dict[tuple[str, tuple], float]:
    """Every sample of a scrape (as Prometheus makes it: bearer token, no session), keyed by
    (sample name, sorted labels)."""
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.content.decode()) for s in family.samples}


def request_count(samples, route: str, status: str = "2xx", method: str = "GET") -> float:
    return samples.get(("workbench_http_request_duration_seconds_count",
                        (("method", method), ("route", route), ("status", status))), 0)


@pytest.fixture(autouse=True)
def metrics_token(settings, no_workers):
    settings.METRICS_TOKEN = TOKEN


def test_a_page_request_increases_the_histogram_count_of_its_route_pattern(client, project, owner):
    before = scrape()
    client.force_login(owner)
    assert client.get(f"/projects/{project.pk}/").status_code == 200
    client.get(f"/projects/{project.pk}/")
    client.get("/projects/999999/")  # 404 from the policy: same route, other status class
    after = scrape()
    route = "/projects/<int:project_id>/"
    assert request_count(after, route) - request_count(before, route) == 2
    assert request_count(after, route, "4xx") - request_count(before, route, "4xx") == 1
    # Labels are route patterns: no raw path, so no object id, ever becomes a label value.
    routes = {dict(labels)["route"] for (name, labels) in after if "route" in dict(labels)}
    assert not any("/999999/" in route or f"/{project.pk}/" in route for route in routes)


def test_unknown_paths_share_one_label_value(client):
    before = scrape()
    client.get("/no/such/page/1/")
    client.get("/no/such/page/2/")
    after = scrape()
    assert request_count(after, "[unmatched]", "4xx") - request_count(before, "[unmatched]", "4xx") == 2


@pytest.mark.urls("tests.monitoring.test_metrics")
def test_a_view_that_raises_is_counted_as_5xx_under_its_route():
    client = Client(raise_request_exception=False)
    before = http_metrics.route_stats()
    assert client.get("/boom/1/").status_code == 500
    assert client.get("/boom/2/").status_code == 500
    stats = {s.route: s for s in http_metrics.route_stats()}["/boom/<int:n>/"]
    previous = {s.route: s for s in before}.get("/boom/<int:n>/")
    assert stats.server_errors - (previous.server_errors if previous else 0) == 2
    assert stats.error_rate == 1.0


def test_job_count_gauges_reflect_the_database_rows(project, owner):
    for state in ("queued", "running", "running", "succeeded"):
        make_job(project, owner, state=state)
    failed_training_job(project, owner)
    samples = scrape()
    gauge = {state: samples[("workbench_training_jobs", (("state", state),))]
             for state in ("queued", "running", "succeeded", "failed", "cancelled")}
    assert gauge == {"queued": 1, "running": 2, "succeeded": 1, "failed": 1, "cancelled": 0}
    assert samples[("workbench_import_jobs", (("state", "draft"),))] == 0


def test_tokens_trained_is_the_sum_over_jobs(project, owner):
    make_job(project, owner, state="succeeded", tokens_trained=1200)
    make_job(project, owner, state="running", tokens_trained=34)
    assert scrape()[("workbench_training_tokens_trained", ())] == 1234


def test_workers_online_and_queue_depths_are_scraped_from_the_broker():
    samples = scrape()
    assert samples[("workbench_broker_up", ())] == 1
    assert samples[("workbench_celery_workers_online", ())] == 0  # the no_workers fixture
    assert ("workbench_celery_queue_messages", (("queue", "gpu"),)) in samples


def test_several_web_processes_share_one_request_histogram(tmp_path):
    """`manage.py up` starts several web processes on PostgreSQL: the monitoring page and /metrics
    read every process's requests (prometheus_client's multiprocess mode), not only their own."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
           "DJANGO_SETTINGS_MODULE": "workbench.settings", "WORKBENCH_DATA_DIR": str(tmp_path / "data")}
    (tmp_path / "prometheus").mkdir()
    record = ("import django; django.setup(); from apps.monitoring import http_metrics; "
              "http_metrics.REQUEST_DURATION.labels(route='api/things/', method='GET', status='{status}')"
              ".observe(0.05)")
    for status in ("2xx", "5xx"):  # two processes, one request each
        subprocess.run([sys.executable, "-c", record.format(status=status)], env=env, check=True, timeout=60)
    read = ("import django; django.setup(); from apps.monitoring import http_metrics; "
            "stats = [r for r in http_metrics.route_stats() if r.route == 'api/things/'][0]; "
            "print(stats.requests, stats.server_errors, round(stats.seconds_total, 2))")
    merged = subprocess.run([sys.executable, "-c", read], env=env, capture_output=True, text=True, timeout=60)
    assert merged.stdout.split() == ["2", "1", "0.1"], merged.stderr
