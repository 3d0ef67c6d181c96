"""A scientist creates an eval suite in the browser (an unknown split refused next to the form),
runs it on a model, and sees the run's figures appear as a real `inference` worker finishes it."""

import re

import pytest
from playwright.sync_api import expect

from apps.evaluation.models import EvalRun
from tests.conftest import browser_login
from tests.training.fixtures import make_version

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]


def test_scientist_creates_a_suite_runs_it_and_sees_the_result_appear(page, live_asgi, scientist, owner, project,
                                                                      tiny_model, inference_worker):
    make_version(project, owner)
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/comparisons/")
    page.get_by_test_id("eval-suites-link").click()

    form = page.get_by_test_id("suite-form")
    form.get_by_label("Name", exact=True).fill("QA exact")
    form.get_by_label("Split").fill("test")
    form.get_by_label("Exact match (normalised words)").check()
    form.get_by_label("threshold (at least)").first.fill("0.5")
    form.get_by_label("ROUGE-L F1").check()
    form.get_by_label("Gates the alias").fill("production")
    form.get_by_role("button", name="Create suite").click()
    expect(form.get_by_test_id("suite-error")).to_contain_text("split: Version 1 has no “test” split.")

    form.get_by_label("Split").fill("validation")
    form.get_by_role("button", name="Create suite").click()
    suite = page.get_by_test_id("eval-suite")
    expect(suite).to_contain_text("QA exact")
    expect(suite).to_contain_text("exact_match (≥ 0.5), rouge_l")
    expect(suite).to_contain_text("gates @production")

    suite.get_by_label("Model").select_option(label=tiny_model.name)
    suite.get_by_role("button", name="Run").click()
    run = page.get_by_test_id("eval-run")
    expect(run).to_have_attribute("data-state", "succeeded", timeout=120_000)
    expect(run).to_contain_text(f"QA exact on {tiny_model.name}")
    stored = EvalRun.objects.get()
    expect(run.locator("tr[data-metric=rouge_l] [data-field=value]")).to_have_text(str(stored.aggregates["rouge_l"]))
    expect(run.locator("tr[data-metric=exact_match] [data-field=value]")).to_have_text(
        re.compile(rf"^{stored.aggregates['exact_match']:g}"))
    expect(run.locator("[data-field=gate]")).to_have_text("passed" if stored.passed else "failed")
    for failure in stored.failures:  # the gate's reasons, as an alias move would give them
        expect(run.locator("[data-field=failure]")).to_contain_text(failure["reason"])


@pytest.mark.timeout(120)
def test_scientist_builds_a_suite_from_judges_criteria_and_a_pairwise_win_rate(page, scientist, owner, project,
                                                                                tiny_model):
    from apps.evaluation import services
    from apps.evaluation.models import EvalSuite

    make_version(project, owner)
    point = services.judge_create(user=scientist, project=project, name="Grader", local_model=tiny_model.pk,
                                  rubric={"kind": "pointwise", "criteria": [{"name": "helpfulness", "scale": "1-5"},
                                                                            {"name": "safety", "scale": "pass_fail"}]})
    pair = services.judge_create(user=scientist, project=project, name="Referee", local_model=tiny_model.pk,
                                 rubric={"kind": "pairwise", "criteria": [{"name": "overall"}]})
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/eval-suites/")
    form = page.get_by_test_id("suite-form")
    form.get_by_label("Name", exact=True).fill("Judged")
    form.get_by_label("Split").fill("validation")
    form.get_by_label("Grader: safety", exact=True).check()
    form.get_by_label("threshold for Grader: safety").fill("0.75")
    form.get_by_label("Win rate against the baseline (Referee)", exact=True).check()
    form.get_by_role("button", name="Create suite").click()
    # A win rate needs a baseline to play against: refused next to the form, nothing made.
    expect(form.get_by_test_id("suite-error")).to_contain_text("baseline_model: A win rate is against the suite's baseline")
    assert not EvalSuite.objects.exists()

    form.get_by_label("Baseline model").select_option(label=tiny_model.name)
    form.get_by_role("button", name="Create suite").click()
    suite = page.get_by_test_id("eval-suite")
    expect(suite).to_contain_text(f"judge:{point.pk}:safety (≥ 0.75), win_rate:{pair.pk}")
    stored = EvalSuite.objects.get()
    assert stored.metrics == [
        {"metric": "judge", "threshold": 0.75, "judge": point.pk, "criterion": "safety", "key": f"judge:{point.pk}:safety"},
        {"metric": "win_rate", "threshold": None, "judge": pair.pk, "key": f"win_rate:{pair.pk}"}]
