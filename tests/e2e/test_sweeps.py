"""A scientist finds a sweep from the jobs list, reads its parallel-coordinates chart and the jobs ranked by
eval loss, opens the best's adapter and overlays the runs in one click, and cancels the sweep's last job."""

import re

import pytest
from playwright.sync_api import expect

from apps.registry.models import RegisteredModel
from apps.training.models import Sweep, TrainingJob
from tests.conftest import browser_login
from tests.training.fixtures import FAST

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_scientist_reads_a_sweeps_ranking_opens_the_best_and_cancels_the_rest(page, scientist, project, tiny_model,
                                                                            qa_version):
    # The rows a launch writes, without its messages: a worker the session started must not run them.
    sweep = Sweep.objects.create(project=project, name="LR <i>sweep</i>", strategy="grid",
                                 space={"learning_rate": [1e-3, 1e-2, 1e-1]}, max_jobs=3, base_model=tiny_model,
                                 dataset_version=qa_version, train_split="train", eval_split="validation",
                                 base_config=dict(FAST), created_by=scientist)
    slow, best, pending = [
        TrainingJob.objects.create(project=project, name=f"LR <i>sweep</i> · learning_rate={lr:g}", sweep=sweep,
                                   base_model=tiny_model, dataset_version=qa_version, train_split="train",
                                   eval_split="validation", config={**FAST, "learning_rate": lr}, created_by=scientist)
        for lr in (1e-3, 1e-2, 1e-1)]
    adapter = RegisteredModel.objects.create(project=project, name="Best adapter", kind="adapter",
                                             base_model=tiny_model, format="peft_lora", source_path="/nonexistent",
                                             weights_path="/nonexistent", status="ready", info={})
    TrainingJob.objects.filter(pk=slow.pk).update(state="succeeded", metrics={"eval_loss": 2.25})
    TrainingJob.objects.filter(pk=best.pk).update(state="succeeded", metrics={"eval_loss": 0.75}, adapter=adapter)

    browser_login(page, scientist.username)
    page.goto(f"/projects/{project.pk}/jobs/")
    page.get_by_role("link", name="Sweeps").click()
    page.get_by_test_id("sweeps").get_by_role("link", name="LR <i>sweep</i>").click()  # text, not markup

    expect(page.get_by_test_id("sweep-state")).to_have_text("running")
    # Plotly drew the parallel coordinates (WebGL; without it, a scatter of the loss per option): an axis
    # for each swept option and one for the loss.
    chart = page.locator("#chart-sweep")
    expect(chart).to_have_attribute("data-chart", re.compile("parcoords|scatter"))
    expect(chart).to_contain_text("learning_rate")
    expect(chart).to_contain_text("eval loss")
    expect(chart).not_to_contain_text("WebGL is not supported")
    rows = page.get_by_test_id("sweep-trials").locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("0.01")
    expect(rows.nth(0)).to_contain_text("0.7500")
    expect(rows.nth(0)).to_have_attribute("data-best", "true")
    expect(rows.nth(1)).to_contain_text("2.2500")
    expect(rows.nth(2)).to_contain_text("queued")

    actions = page.get_by_test_id("best-actions")
    expect(actions.get_by_role("button", name="Compare the best with its base")).to_be_visible()
    actions.get_by_role("link", name="The best's adapter (registered)").click()
    expect(page).to_have_url(f"/projects/{project.pk}/models/{adapter.pk}/")
    page.go_back()
    page.get_by_test_id("best-actions").get_by_role("link", name="Compare the runs").click()
    expect(page.get_by_test_id("config-diff")).to_contain_text("learning_rate")
    page.go_back()

    page.get_by_role("button", name="Cancel the sweep").click()
    expect(page.get_by_test_id("sweep-state")).to_have_text("cancelled")
    expect(page.get_by_role("button", name="Cancel the sweep")).to_have_count(0)
    assert TrainingJob.objects.get(pk=pending.pk).state == "cancelled"
    assert TrainingJob.objects.get(pk=best.pk).state == "succeeded"


def test_a_classifier_sweep_is_ranked_and_charted_by_eval_macro_f1(page, scientist, project, tiny_model, qa_version):
    sweep = Sweep.objects.create(project=project, name="Classifier sweep", strategy="grid",
                                 space={"lora_r": [4, 8]}, max_jobs=2, base_model=tiny_model,
                                 dataset_version=qa_version, train_split="train", eval_split="validation",
                                 base_config={**FAST, "method": "classify", "class_labels": ["no", "yes"]},
                                 created_by=scientist)
    low_loss, high_f1 = [
        TrainingJob.objects.create(project=project, name=f"Classifier sweep · lora_r={r}", sweep=sweep,
                                   base_model=tiny_model, dataset_version=qa_version, train_split="train",
                                   eval_split="validation", config={**FAST, "method": "classify", "lora_r": r},
                                   created_by=scientist) for r in (4, 8)]
    TrainingJob.objects.filter(pk=low_loss.pk).update(state="succeeded",
                                                      metrics={"eval_loss": 0.25, "eval_macro_f1": 0.5})
    TrainingJob.objects.filter(pk=high_f1.pk).update(state="succeeded",
                                                     metrics={"eval_loss": 0.5, "eval_macro_f1": 0.875})

    browser_login(page, scientist.username)
    page.goto(f"/projects/{project.pk}/sweeps/{sweep.pk}/")
    expect(page.get_by_role("heading", name="Ranked by eval macro-F1")).to_be_visible()
    chart = page.locator("#chart-sweep")
    expect(chart).to_have_attribute("data-chart", re.compile("parcoords|scatter"))
    expect(chart).to_contain_text("eval macro-F1")
    rows = page.get_by_test_id("sweep-trials").locator("tbody tr")
    expect(rows.nth(0)).to_contain_text("lora_r=8")
    expect(rows.nth(0).get_by_test_id("trial-score")).to_have_text("0.8750")
    expect(rows.nth(0)).to_have_attribute("data-best", "true")
    expect(rows.nth(1).get_by_test_id("trial-score")).to_have_text("0.5000")
    link = page.get_by_test_id("best-actions").get_by_role("link", name="Compare the runs")
    expect(link).to_have_attribute("href", re.compile("metric=eval_macro_f1"))
    link.click()
    expect(page.get_by_test_id("config-diff")).to_contain_text("lora_r")
