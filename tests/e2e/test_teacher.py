"""A scientist opens a dataset version, asks a teacher model for its answers: sees what the run
will take (rows, tokens, the most it can cost), launches it, watches it end and follows the link
to the version it made. The teacher is a scripted OpenAI-compatible server in its own process,
registered as a priced provider; the run is a job in a real inference worker, its import a job in
a real default worker."""

import re

import pytest
from playwright.sync_api import expect

from apps.providers import services as provider_services
from tests.conftest import browser_login
from tests.evaluation.fixtures import judge_provider_fixture, scripted_judge_fixture  # noqa: F401
from tests.training.fixtures import make_version

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]


def test_scientist_sees_a_teacher_runs_cost_launches_it_and_opens_the_version_it_made(
        page, live_asgi, site_admin, scientist, owner, project, judge_provider, scripted_judge, celery_worker,
        inference_worker):
    provider_services.provider_update(user=site_admin, provider=judge_provider, prices={
        "judge-1": {"input_price_per_1k": "0.5", "output_price_per_1k": "1.5"}})
    version = make_version(project, owner)
    version.schema = {"roles": {"prompt": "prompt", "response": "response"}, "metadata_keys": []}
    version.save(update_fields=["schema"])
    scripted_judge.script([], default={"content": "Paris."})
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/datasets/{version.dataset_id}/versions/1/")

    form = page.get_by_test_id("teacher-form")
    form.get_by_label("Teacher").select_option(label="Scripted/judge-1 (provider)")
    form.get_by_label("Max tokens").fill("5000")
    form.get_by_test_id("teacher-estimate").click()
    expect(page.get_by_test_id("teacher-error")).to_contain_text("max_tokens")

    form.get_by_label("Max tokens").fill("32")
    form.get_by_test_id("teacher-estimate").click()
    expect(form.get_by_test_id("teacher-estimate-text")).to_contain_text("30 rows")
    expect(form.get_by_test_id("teacher-estimate-text")).to_contain_text("at most 960 answered")
    form.get_by_test_id("teacher-launch").click()

    run = page.get_by_test_id("teacher-run")
    expect(run).to_have_attribute("data-state", "succeeded", timeout=60_000)
    expect(run.locator("[data-field=done]")).to_have_text("30")
    expect(run.locator("[data-field=tokens]")).to_have_text("450")  # 30 calls of 10 + 5 tokens
    expect(run.locator("[data-field=cost]")).to_have_text("0.375000")
    run.locator("[data-field=version]").click()
    expect(page).to_have_url(re.compile(rf"/projects/{project.pk}/datasets/{version.dataset_id}/versions/2/$"))
    expect(page.get_by_text("Paris.").first).to_be_visible()
