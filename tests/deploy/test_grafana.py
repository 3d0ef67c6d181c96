"""deploy/grafana/workbench.json, the dashboard for the metrics /metrics exports: importable
(its data source an input, every panel placed on the grid with a query), and every series it
queries is one a scrape of this product really returns."""

import json
import re

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.entry_points import DEPLOY
from tests.training.fixtures import make_job

DASHBOARD = DEPLOY / "grafana" / "workbench.json"
TOKEN = "scrape-" + "t0ken" * 8


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queried_series() -> set[str]:
    return {name for panel in dashboard()["panels"] for target in panel["targets"]
            for name in re.findall(r"\bworkbench_[a-z_]+", target["expr"])}


@pytest.mark.timeout(60)
def test_the_dashboard_imports_with_its_data_source_as_an_input_and_every_panel_placed():
    board = dashboard()
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}" and panel["targets"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        covered = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not covered & cells, f"{panel['title']} overlaps another panel"
        cells |= covered
        assert all(t["expr"].count("(") == t["expr"].count(")") for t in panel["targets"]), panel["title"]


@pytest.mark.django_db
@pytest.mark.timeout(180)  # the test database is made first
def test_every_series_the_dashboard_queries_is_in_a_real_scrape(settings, project, owner):
    settings.METRICS_TOKEN = TOKEN
    make_job(project, owner, state="running", tokens_trained=10)
    Client().get("/healthz")  # at least one request in the histogram
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    exported = {sample.name for family in text_string_to_metric_families(response.content.decode())
                for sample in family.samples}
    missing = sorted(queried_series() - exported)
    assert not missing, f"the dashboard queries series /metrics does not export: {missing}"
    assert {"workbench_http_request_duration_seconds_bucket", "workbench_celery_queue_messages"} <= queried_series()
