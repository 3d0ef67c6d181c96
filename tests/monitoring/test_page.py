"""What site staff read on the monitoring page, rendered from real rows (the broker is stood in
for here; tests/e2e/test_monitoring.py runs it against a real worker)."""

import pytest
from django.utils import timezone

from apps.monitoring import broker
from tests.monitoring.conftest import failed_derive_job, failed_import_job, failed_training_job, training_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client, staff):
    client.force_login(staff)
    return client


def test_recent_failures_list_each_kind_with_project_error_line_and_link(staff_client, project, owner, no_workers):
    job = failed_training_job(project, owner, name="Night run")
    upload = failed_import_job(project, owner)
    failed_derive_job(project, owner)
    html = staff_client.get("/monitoring/").content.decode()
    assert "Night run" in html and f"/projects/{project.pk}/jobs/{job.pk}/" in html
    assert "CUDA out of memory. Tried to allocate 2.00 GiB" in html and "Traceback" not in html
    assert f"/imports/{upload.pk}/" in html and "Line 3 is not JSON" in html
    assert "No rows left for the test split" in html


def test_only_the_twenty_latest_failures_are_listed(staff_client, project, owner, no_workers):
    now = timezone.now()
    for i in range(22):
        failed_training_job(project, owner, name=f"run-{i:02d}", finished_at=now - timezone.timedelta(minutes=i))
    html = staff_client.get("/monitoring/").content.decode()
    failures = html.split('data-testid="failures"')[1].split("</table>")[0]
    assert "run-00" in failures and "run-19" in failures and "run-20" not in failures


def test_the_page_opens_alerts_when_it_evaluates_the_rules(staff_client, project, owner, no_workers):
    failed_training_job(project, owner, name="Night run")
    html = staff_client.get("/monitoring/").content.decode()
    alerts = html.split('data-testid="open-alerts"')[1].split("</table>")[0]
    assert "1 job failed in the last" in alerts and "Night run" in alerts


def test_job_names_and_errors_are_shown_as_text(staff_client, project, owner, no_workers):
    failed_training_job(project, owner, name="<script>alert(1)</script>", error="<img src=x onerror=alert(2)>")
    html = staff_client.get("/monitoring/").content.decode()
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_a_worker_that_stopped_answering_is_listed_with_its_running_job(staff_client, project, owner, no_workers):
    training_job(project, owner, state="running", name="Orphan", worker="gpu-7@lost-node",
             heartbeat_at=timezone.now() - timezone.timedelta(minutes=5))
    html = staff_client.get("/monitoring/").content.decode()
    assert "Not answering" in html and "gpu-7@lost-node" in html and "Orphan" in html and "stale" in html
    assert "No worker answered" in html


def test_an_unreachable_broker_is_said_plainly(staff_client, monkeypatch):
    monkeypatch.setattr(broker, "inspect_workers", lambda: broker.Inspection(
        reachable=False, error="the broker did not answer in time"))
    monkeypatch.setattr(broker, "queue_depths", lambda queues: broker.QueueDepths(
        reachable=False, error="broker error: ConnectionError"))
    response = staff_client.get("/monitoring/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Could not ask the workers: the broker did not answer in time." in html
    assert "Could not read the queues: broker error: ConnectionError." in html


def test_queue_depths_and_web_traffic_are_shown(staff_client, no_workers, clean_request_window):
    staff_client.get("/monitoring/")
    html = staff_client.get("/monitoring/").content.decode()
    assert 'data-testid="queues"' in html and "<th scope=\"row\">gpu</th>" in html
    assert "/monitoring/" in html  # its own route in the per-route table
    assert "every web process: 1 request" in html  # the first view, flushed before the second read the window


def test_the_route_table_is_collapsed_and_the_tiles_lead_the_page(staff_client, no_workers, project, owner):
    failed_training_job(project, owner)
    html = staff_client.get("/monitoring/").content.decode()
    assert '<details data-testid="http-routes-details">' in html  # no `open`: collapsed until asked
    assert html.index('data-testid="tiles"') < html.index('data-testid="open-alerts"') < html.index(
        'data-testid="http-routes"')
    tiles = html.split('data-testid="tiles"')[1].split("</section>")[0]
    assert 'data-tile="failures">1<' in tiles and 'data-tile="open_alerts">1<' in tiles
    assert 'data-tile="workers_online">0<' in tiles
    assert 'id="monitoring-snapshot"' in html and "vendor/plotly/plotly.min.js" in html
