"""A site admin opens the monitoring page and sees the real test worker online with its queues,
a failed job with its error, and the alert it raised; the tiles follow what happens on the server
without a reload, and an alert is acknowledged from the page; a project member gets 404."""

import os
import re
import socket

import pytest
from playwright.sync_api import expect

from apps.monitoring import http_metrics
from apps.monitoring.models import Alert
from apps.monitoring.worker_report import worker_reports
from tests.conftest import browser_login, wait_for
from tests.monitoring.conftest import failed_import_job, failed_training_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_site_admin_sees_the_worker_its_queues_a_failed_job_and_its_alert(page, site_admin, project, owner,
                                                                         celery_worker):
    hostname = f"test-worker-{os.getpid()}@{socket.gethostname()}"
    job = failed_training_job(project, owner, name="Overnight LoRA",
                              error="CUDA out of memory. Tried to allocate 2.00 GiB\nTraceback (most recent call last)")
    wait_for(lambda: hostname in worker_reports(), timeout=15, what="the worker's first resource report")

    browser_login(page, "root")
    page.goto("/monitoring/")
    expect(page.get_by_role("heading", name="Monitoring")).to_be_visible()

    worker = page.get_by_test_id("workers").locator(f'[data-hostname="{hostname}"]')
    expect(worker).to_contain_text("online")
    expect(worker.get_by_test_id("worker-queues")).to_have_text(re.compile(r"\bdefault\b.*\bgpu\b"))
    expect(worker).to_contain_text("% CPU")
    expect(worker.get_by_test_id("worker-gpu")).to_have_text("no GPU")

    failure = page.get_by_test_id("failures").get_by_role("row").filter(has_text="Overnight LoRA")
    expect(failure).to_contain_text("Alpha")
    expect(failure).to_contain_text("CUDA out of memory. Tried to allocate 2.00 GiB")
    expect(failure).not_to_contain_text("Traceback")
    failure.get_by_role("link", name="Overnight LoRA").click()
    expect(page).to_have_url(re.compile(rf"/projects/{project.pk}/jobs/{job.pk}/$"))
    page.go_back()

    alert = page.get_by_test_id("open-alerts").get_by_test_id("alert").filter(has_text="Job failed")
    expect(alert).to_contain_text("1 job failed in the last 60 min, in 1 project (1 fine-tune). "
                                  "Latest: Fine-tune “Overnight LoRA” in Alpha: CUDA out of memory")


def test_the_tiles_follow_the_server_live_and_an_alert_is_acknowledged(page, site_admin, project, owner,
                                                                      celery_worker, settings):
    settings.MONITORING_LIVE_INTERVAL_S = 1.0  # the live server runs in this process
    for i in range(150):  # a busy site's route table: collapsed, it costs the page no height
        http_metrics.observe(route=f"/e2e/route-{i:03d}/", method="GET", status=200, seconds=0.001 * (i % 7 + 1))
    http_metrics.observe(route="/e2e/busiest/", method="GET", status=200, seconds=0.002)
    # Busier than any route the tests before this one used in this process (its metrics are the process's).
    for _ in range(20_000):
        http_metrics.observe(route="/e2e/busiest/", method="GET", status=200, seconds=0.002)

    browser_login(page, "root")
    page.goto("/monitoring/")
    expect(page.get_by_test_id("live-badge")).to_be_visible()  # the socket is open
    page.evaluate("window.loadedOnce = true")  # gone if the page reloads
    expect(page.locator("[data-tile=failures]")).to_have_text("0")
    expect(page.locator("[data-tile=workers_online]")).not_to_have_text("0")  # the real test worker
    assert page.evaluate("document.documentElement.scrollHeight") < 3000
    expect(page.get_by_test_id("http-routes")).to_be_hidden()

    failed_import_job(project, owner, error="Line 7 is not JSON")  # something happens on the server
    expect(page.locator("[data-tile=failures]")).to_have_text("1")
    expect(page.locator("[data-tile=open_alerts]")).to_have_text("1")
    alert = page.get_by_test_id("open-alerts").get_by_test_id("alert")
    expect(alert).to_contain_text("Latest: Import “rows.jsonl into Imported 0” in Alpha: Line 7 is not JSON")
    expect(page.get_by_test_id("chart-queues").locator(".main-svg").first).to_be_attached()  # Plotly drew it

    alert.get_by_role("button", name="Acknowledge").click()
    expect(alert.locator("[data-field=acknowledged]")).to_contain_text("by root at")
    expect(alert.get_by_role("button", name="Acknowledge")).to_have_count(0)
    expect(page.locator("[data-tile=unacknowledged_alerts]")).to_have_text("0")
    expect(page.locator("[data-tile=open_alerts]")).to_have_text("1")  # acknowledged, still open
    assert Alert.objects.get().acknowledged_by == site_admin

    failed_import_job(project, owner, error="Line 9 is not JSON")
    expect(page.locator("[data-tile=failures]")).to_have_text("2")
    expect(alert).to_contain_text("2 jobs failed")  # the same alert, not a second one
    assert page.evaluate("window.loadedOnce") is True

    page.get_by_text("Requests by route").click()
    routes = page.get_by_test_id("http-routes")
    expect(routes).to_be_visible()
    expect(routes.get_by_test_id("route").first).to_contain_text("/e2e/busiest/")  # busiest first
    routes.get_by_role("button", name="Route").click()
    first_route = routes.get_by_test_id("route").first.locator("td").first.inner_text()
    routes.get_by_role("button", name="Route").click()
    expect(routes.get_by_test_id("route").first).not_to_have_text(first_route)
    expect(routes.locator("th[aria-sort=descending]")).to_contain_text("Route")


def test_a_project_member_gets_404_on_the_monitoring_page(page, owner, project):
    browser_login(page, "olivia")
    response = page.goto("/monitoring/")
    assert response.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Page not found")


@pytest.mark.timeout(180)
def test_the_serving_engine_figures_follow_generations_live(page, site_admin, project, owner, tiny_model,
                                                           inference_worker, live_asgi, settings):
    import openai

    from tests.serving.test_openai_api import project_token

    settings.MONITORING_LIVE_INTERVAL_S = 1.0  # the live server runs in this process
    api = openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=project_token(owner, project), max_retries=0, timeout=60)
    browser_login(page, "root")
    page.goto("/monitoring/")
    expect(page.get_by_test_id("live-badge")).to_be_visible()
    page.evaluate("window.loadedOnce = true")  # gone if the page reloads
    line = page.get_by_test_id("inference").locator(f'[data-model="{tiny_model.name}"][data-adapter=""]')
    expect(line).to_have_count(0)  # this model has not been served yet

    api.completions.create(model=tiny_model.name, prompt="what is paris ?", max_tokens=5)
    expect(line.locator("[data-field=requests]")).to_have_text("1")
    expect(line).to_contain_text("(base)")
    for field in ("ttft_p50", "ttft_p99", "inter_token_p50", "queue_wait_p50"):
        expect(line.locator(f"[data-field={field}]")).to_have_text(re.compile(r"^[\d.]+ m?s$"))
    for field in ("tokens_per_s", "stream_tokens_per_s"):
        expect(line.locator(f"[data-field={field}]")).to_have_text(re.compile(r"^[\d.]+$"))
    expect(line.locator("[data-field=occupancy]")).to_have_text(re.compile(r"^\d+%$"))
    expect(line.locator("[data-field=memory]")).to_have_text(re.compile(r"^[\d.]+ [KMG]?B$"))

    api.chat.completions.create(model=tiny_model.name, messages=[{"role": "user", "content": "hello"}], max_tokens=4)
    expect(line.locator("[data-field=requests]")).to_have_text("2")  # the next snapshot, no reload
    assert page.evaluate("window.loadedOnce") is True
