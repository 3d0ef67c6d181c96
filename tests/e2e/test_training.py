"""A scientist launches a LoRA fine-tune from the form and watches it succeed, live."""

import pytest
from playwright.sync_api import expect

from apps.training.models import TrainingJob
from tests.conftest import browser_login, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def fill_fast_config(page):
    for label, value in (("Max steps", "30"), ("Batch size", "4"), ("Max sequence length", "32"),
                         ("Learning rate", "0.01"), ("LoRA rank", "4"), ("LoRA alpha", "8"), ("LoRA dropout", "0"),
                         ("Evaluate every N steps", "10"), ("Checkpoint every N steps", "10")):
        page.get_by_label(label, exact=True).fill(value)


def test_scientist_launches_a_job_from_the_form_and_sees_it_succeed(page, scientist, project, tiny_model, qa_version,
                                                                   celery_worker):
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/")
    page.get_by_role("navigation", name="Project").get_by_role("link", name="Jobs").click()
    expect(page.get_by_test_id("jobs")).to_contain_text("No jobs yet")
    page.get_by_role("link", name="New fine-tune").click()

    page.get_by_label("Name", exact=True).fill("First <b>run</b>")
    page.get_by_label("Base model", exact=True).select_option(label=tiny_model.name)
    page.get_by_label("Dataset version").select_option(label="QA v1 (30 rows)")
    fill_fast_config(page)
    page.get_by_role("button", name="Estimate").click()
    estimate = page.get_by_test_id("estimate")
    expect(estimate.get_by_role("row", name="Training examples")).to_contain_text("24")
    expect(estimate.get_by_role("row", name="Optimizer steps")).to_contain_text("30")
    expect(estimate.get_by_role("row", name="Memory (fp32)")).to_contain_text("KB")
    expect(estimate.get_by_role("row", name="Trained LoRA parameters")).to_contain_text("1,792")  # what peft trains
    # The first job on this model: a worker times a few steps, then the estimate has a time.
    expect(page.get_by_test_id("time-estimate")).to_contain_text("measuring this machine's speed")
    from apps.training.models import SpeedMeasurement

    wait_for(lambda: SpeedMeasurement.objects.filter(state="done").exists(), timeout=120, what="the calibration")
    page.get_by_role("button", name="Estimate").click()
    expect(page.get_by_test_id("time-estimate")).to_contain_text("s of 30 steps")
    expect(page.get_by_test_id("time-estimate")).to_contain_text("a calibration run measured on cpu")

    page.get_by_label("Batch size").fill("0")
    page.get_by_role("button", name="Launch").click()
    expect(page.locator("#id_batch_size_error")).to_contain_text("batch_size")
    assert not TrainingJob.objects.exists()

    page.get_by_label("Batch size").fill("4")
    page.get_by_role("button", name="Launch").click()
    job = page.get_by_test_id("job")
    expect(job.get_by_role("heading")).to_contain_text("First <b>run</b>")  # shown as text, not markup
    page.evaluate("window.notReloaded = true")  # gone if the page reloads
    expect(page.get_by_test_id("job-state")).to_have_text("succeeded", timeout=120_000)
    expect(page.get_by_test_id("adapter")).to_contain_text("First <b>run</b> (job")
    expect(page.get_by_test_id("samples")).to_contain_text("what is the capital of france ?")
    expect(page.get_by_test_id("log")).to_contain_text("started")
    # The loss chart drew the train and eval lines from the backlog.
    expect(page.locator("#chart-loss .scatterlayer .trace")).to_have_count(2)
    expect(page.get_by_test_id("run-info")).to_contain_text("tokens_trained")
    adapter = TrainingJob.objects.get().adapter_id
    expect(page.get_by_role("link", name="try it in the playground")).to_have_attribute(
        "href", f"/projects/{project.pk}/playground/?model={adapter}")
    # The outcome was put in place when the job ended (or drawn with the page if it ended first).
    assert page.evaluate("window.notReloaded") is True
    expect(page.get_by_test_id("job-actions").get_by_role("button", name="Cancel")).to_have_count(0)


def test_a_viewer_sees_jobs_but_cannot_launch(page, viewer, project):
    browser_login(page, viewer.username)
    response = page.goto(f"/projects/{project.pk}/jobs/new/")
    assert response.status == 403
    page.goto(f"/projects/{project.pk}/jobs/")
    expect(page.get_by_role("link", name="New fine-tune")).to_have_count(0)


def test_scientist_overlays_two_runs_and_sees_where_their_configs_differ(page, scientist, owner, project):
    from apps.training.models import MetricPoint
    from tests.training.fixtures import make_job

    runs = []
    for name, lr, slope in (("Slow lr", 1e-4, 0.1), ("Fast lr", 1e-3, 0.3)):
        job = make_job(project, owner, state="succeeded", config={"learning_rate": lr, "lora_r": 8})
        job.name = name
        job.save()
        MetricPoint.objects.bulk_create([
            MetricPoint(job=job, kind="train", step=s, values={"step": s, "loss": 3 - slope * s, "tokens_seen": 100 * s,
                                                               "elapsed_s": s / 2}) for s in range(1, 6)])
        runs.append(job)

    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/jobs/")
    page.get_by_label("Compare Slow lr").check()
    page.get_by_label("Compare Fast lr").check()
    page.get_by_role("button", name="Compare selected").click()
    expect(page.locator("#chart-compare .scatterlayer .trace")).to_have_count(2)
    expect(page.locator("#chart-compare")).to_contain_text("step")
    table = page.get_by_test_id("config-diff")
    expect(table.get_by_role("row", name="learning_rate")).to_have_attribute("data-differs", "true")
    expect(table.get_by_role("row", name="lora_r")).not_to_have_attribute("data-differs", "true")
    page.get_by_label("X axis").select_option("tokens")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#chart-compare")).to_contain_text("tokens seen")


def test_every_live_field_of_a_running_job_moves_without_a_reload(page, client, scientist, project, tiny_model,
                                                                  qa_version, celery_worker):
    from tests.training.fixtures import launch_body

    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    client.force_login(scientist)
    body = launch_body(tiny_model, qa_version, max_steps=3000, eval_every=1000, checkpoint_every=40)
    launched = client.post(f"/api/projects/{project.pk}/jobs/", body, content_type="application/json")
    assert launched.status_code == 201, launched.content
    job = TrainingJob.objects.get(pk=launched.json()["id"])
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/jobs/{job.pk}/")
    page.evaluate("window.__loadedOnce = true")  # gone if the page reloads
    expect(page.get_by_test_id("job-state")).to_have_text("running", timeout=60_000)

    step = page.get_by_test_id("job-step")
    expect(step).not_to_have_text("0", timeout=30_000)
    first = int(step.inner_text())
    wait_for(lambda: int(step.inner_text()) > first + 20, timeout=30, what="the step count to move on the page")
    assert page.get_by_test_id("job-progress").evaluate("bar => bar.value") > first
    assert page.get_by_test_id("job-progress").evaluate("bar => bar.max") == 3000
    expect(page.get_by_test_id("job-checkpoint")).to_be_visible(timeout=30_000)
    expect(page.get_by_test_id("log")).to_contain_text("started: 3000 steps")
    assert page.evaluate("window.__loadedOnce") is True  # all of it live, no reload
    assert errors == []

    asked = []
    page.once("dialog", lambda dialog: asked.append(dialog.message) or dialog.dismiss())
    page.get_by_role("button", name="Cancel").click()  # declined: it goes on
    assert asked and asked[0].startswith("Cancel this fine-tune?")
    assert TrainingJob.objects.get(pk=job.pk).cancel_requested is False
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_test_id("job-state")).to_have_text("cancelled", timeout=60_000)
    expect(page.get_by_test_id("log")).to_contain_text("cancelled at step")
