"""A site admin opens the monitoring page and sees the real test worker online with its queues,
a failed job with its error, and the alert it raised; a project member gets 404."""

import os
import re
import socket

import pytest
from playwright.sync_api import expect

from apps.monitoring.worker_report import worker_reports
from tests.conftest import browser_login, wait_for
from tests.monitoring.conftest import failed_training_job

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

    alert = page.get_by_test_id("open-alerts").get_by_role("row").filter(has_text=f"training-job:{job.pk}")
    expect(alert).to_contain_text("Job failed")
    expect(alert).to_contain_text("Fine-tune “Overnight LoRA” in Alpha failed: CUDA out of memory")


def test_a_project_member_gets_404_on_the_monitoring_page(page, owner, project):
    browser_login(page, "olivia")
    response = page.goto("/monitoring/")
    assert response.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Page not found")
