"""A scientist judges a dataset version's responses in the browser: from the comparisons page to the
version judges page, a column the version lacks refused next to the form naming its field, the
cost seen before launch, the run watched to its end in a real inference worker, and the pairwise
figures read on the page (position consistency, the win rate of one column over the other,
verbosity). The judge is a scripted OpenAI-compatible server in its own process, as a provider."""

import json

import pytest
from playwright.sync_api import expect

from apps.evaluation import services
from tests.conftest import browser_login
from tests.evaluation.fixtures import judge_provider_fixture, scripted_judge_fixture  # noqa: F401
from tests.evaluation.test_judge_dataset_runs import make_version

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]


def test_scientist_judges_two_response_columns_of_a_version_and_reads_the_win_rate(
        page, live_asgi, scientist, owner, project, judge_provider, scripted_judge, inference_worker):
    make_version(project, owner, rows=[(f"question {i}", f"short {i}", {"answer_b": f"a longer answer {i}"})
                                       for i in range(3)])
    # The longer answer (answer_b) in both orders, every time: fully consistent.
    scripted_judge.script([
        {"pattern": r"\[Response A\]\nshort \d\n\n\[Response B\]\na longer",
         "content": json.dumps({"winner": "B", "reason": "longer"})},
        {"pattern": r"\[Response A\]\na longer answer \d\n\n\[Response B\]\nshort",
         "content": json.dumps({"winner": "A", "reason": "longer"})},
    ])
    services.judge_create(user=scientist, project=project, name="Pairs", provider_model="Scripted/judge-1",
                          rubric={"kind": "pairwise", "criteria": [{"name": "helpfulness"}]}, max_tokens=64)
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/comparisons/")
    page.get_by_test_id("version-judges-link").click()
    expect(page.get_by_test_id("launch-version")).to_contain_text("Answers v1")
    expect(page.get_by_test_id("launch-judge")).to_contain_text("Pairs (pairwise, Scripted/judge-1)")

    page.get_by_test_id("second-response-column").fill("answer_c")
    page.get_by_test_id("estimate").click()
    expect(page.get_by_test_id("launch-error")).to_contain_text("second_response_column")
    expect(page.get_by_test_id("launch-error")).to_contain_text("has no column 'answer_c'")

    page.get_by_test_id("second-response-column").fill("answer_b")
    page.get_by_test_id("estimate").click()
    expect(page.get_by_test_id("estimate-text")).to_contain_text("6 calls (3 items)")
    page.get_by_test_id("launch").click()

    run = page.get_by_test_id("judge-run")
    expect(run).to_have_attribute("data-state", "succeeded", timeout=60_000)
    expect(run.locator("h3")).to_contain_text("Pairs · Answers v1 (prompt → response vs answer_b)")
    expect(run.locator("[data-field=done]")).to_have_text("6")
    expect(run.get_by_test_id("position-consistency")).to_contain_text("Position consistency: 100.0% (3 of 3 pairs")
    expect(run.get_by_test_id("win-rate")).to_contain_text("Win rate of response over answer_b: 0.0%")
    expect(run.get_by_test_id("matchups").locator("tr").nth(1)).to_contain_text("responseanswer_b0300")
    expect(run.get_by_test_id("verbosity")).to_contain_text("the longer response won 3 of 3 decisive verdicts")
    expect(run.get_by_test_id("agreement")).to_have_count(0)  # no people's votes on a version's rows
    assert len(scripted_judge.requests()) == 6
