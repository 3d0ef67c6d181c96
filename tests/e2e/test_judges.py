"""A scientist defines a judge in the browser (a rubric with no criteria is refused next to the
form), sees what a run would cost, launches it over a comparison, watches it end, and reads the
position consistency, the verbosity and the scores; once people vote, the judge's agreement with
them, the confusion table and 'not calibrated'; the judge's own board apart on the leaderboard;
and what its calls cost the project. The judge is a scripted OpenAI-compatible server in its own
process, registered as a provider; the run is a job in a real inference worker."""

import json
import re

import pytest
from playwright.sync_api import expect

from apps.providers import services as provider_services
from tests.comparison.factories import make_comparison, placeholder_model
from tests.conftest import browser_login
from tests.evaluation.fixtures import judge_provider_fixture, scripted_judge_fixture, vote  # noqa: F401
from tests.factories import MembershipFactory, UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]


def test_scientist_defines_a_pairwise_judge_sees_the_cost_launches_it_and_reads_the_results(
        page, live_asgi, site_admin, scientist, owner, project, judge_provider, scripted_judge, inference_worker):
    # Site staff price the judge's model per 1,000 tokens: each call's cost is recorded (item 6).
    provider_services.provider_update(user=site_admin, provider=judge_provider, prices={
        "judge-1": {"input_price_per_1k": "0.5", "output_price_per_1k": "1.5"}})
    comparison = make_comparison(project, owner, models=[placeholder_model(project, "Alpha"),
                                                         placeholder_model(project, "Beta")])
    # Beta in both orders for every prompt: fully consistent.
    scripted_judge.script([
        {"pattern": r"\[Response A\]\nAlpha says \d+\n\n\[Response B\]\nBeta",
         "content": json.dumps({"winner": "B", "reason": "Beta"})},
        {"pattern": r"\[Response A\]\nBeta says \d+\n\n\[Response B\]\nAlpha",
         "content": json.dumps({"winner": "A", "reason": "Beta"})},
    ])
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/comparisons/{comparison.pk}/")
    page.get_by_test_id("judges-link").click()

    form = page.get_by_test_id("judge-form")
    form.get_by_label("Name", exact=True).fill("Scripted pairwise")
    form.get_by_label("Kind").select_option("pairwise")
    form.get_by_label("Model").select_option(label="Scripted/judge-1 (provider)")
    form.get_by_role("button", name="Create judge").click()
    expect(form.get_by_test_id("judge-error")).to_contain_text("rubric.criteria")
    expect(form.get_by_test_id("judge-error")).to_contain_text("at least one criterion")

    form.get_by_label(re.compile("Criteria")).fill("helpfulness | 1-5 | Does it answer the question?")
    form.get_by_role("button", name="Create judge").click()
    expect(page.get_by_test_id("launch-judge")).to_contain_text("Scripted pairwise (pairwise, Scripted/judge-1)")

    page.get_by_test_id("estimate").click()
    expect(page.get_by_test_id("estimate-text")).to_contain_text("6 calls (3 items)")
    page.get_by_test_id("launch").click()

    run = page.get_by_test_id("judge-run")
    expect(run).to_have_attribute("data-state", "succeeded", timeout=60_000)
    expect(run.locator("[data-field=done]")).to_have_text("6")
    expect(run.get_by_test_id("position-consistency")).to_contain_text("Position consistency: 100.0% (3 of 3 pairs")
    expect(run.get_by_test_id("matchups")).to_contain_text("Alpha")
    expect(run.get_by_test_id("matchups").locator("tr").nth(1)).to_contain_text("AlphaBeta0300")
    # "Beta says n" is one character shorter than "Alpha says n": the shorter one won all three.
    expect(run.get_by_test_id("verbosity")).to_contain_text(
        "the longer response won 0 of 3 decisive verdicts (0.0%); mean length difference winner − loser -1 characters")
    expect(run.get_by_test_id("agreement")).to_contain_text("over 0 items")
    expect(run.get_by_test_id("calibration")).to_have_text(
        "Not calibrated: 0 items judged and voted on; the project asks for at least 20. It cannot gate anything.")
    assert len(scripted_judge.requests()) == 6

    # People vote blind on the same pairs: the judge's agreement with them, beside theirs with each
    # other, and the confusion of their labels against the judge's (always Beta, "second").
    u1, u2 = (UserFactory(username=name) for name in ("ursula", "victor"))
    for user in (u1, u2):
        MembershipFactory(project=project, user=user, role="annotator")
    for voter, prompt, choice in [(u1, 0, "second"), (u1, 1, "second"), (u1, 2, "first"), (u2, 0, "second")]:
        vote(comparison, voter, prompt, choice)
    page.reload()
    run = page.get_by_test_id("judge-run")
    # 3 of 4 agree; the judge always says second, so chance is the people's share of second (3/4): κ 0.
    expect(run.get_by_test_id("agreement")).to_contain_text("Agreement with blind votes: κ 0.000")
    expect(run.get_by_test_id("agreement")).to_contain_text("75.0% over 4 items · people with each other: κ —, "
                                                            "100.0% over 1 items")
    expect(run.get_by_test_id("confusion").locator("tr").nth(1)).to_have_text("first010")
    expect(run.get_by_test_id("confusion").locator("tr").nth(2)).to_have_text("second030")
    expect(run.get_by_test_id("calibration")).to_contain_text("Not calibrated: 4 items judged and voted on")
    expect(run.get_by_test_id("calibration")).to_have_attribute("data-calibrated", "false")

    # The leaderboard: the people's board from their 4 votes, and the judge's own apart from it.
    page.goto(f"/projects/{project.pk}/comparisons/{comparison.pk}/leaderboard/")
    expect(page.get_by_test_id("total-votes")).to_have_text("4")
    board = page.get_by_test_id("judge-board")
    expect(board).to_have_count(1)
    expect(board).to_have_attribute("data-calibrated", "false")
    expect(board.locator("h3")).to_contain_text("Scripted pairwise")
    expect(board.locator("[data-field=calibration]")).to_have_text("not calibrated")
    expect(board.locator("[data-field=agreement]")).to_contain_text("κ with people 0.0")
    expect(board.locator("[data-field=agreement]")).to_contain_text("over 4 items")
    expect(board.locator("tbody tr").first).to_contain_text("Beta")
    expect(board.locator("tbody tr").first.locator("[data-field=wins]")).to_have_text("3")

    # What the judge's calls cost the project: 6 calls of 10 prompt and 5 completion tokens (the
    # scripted server's usage): 60 × 0.5 / 1000 + 30 × 1.5 / 1000 = 0.03 + 0.045.
    page.goto(f"/projects/{project.pk}/")
    page.get_by_role("link", name="Provider costs").click()
    total = page.get_by_test_id("costs-total")
    expect(total.locator("[data-field=calls]")).to_have_text("6")
    expect(total.locator("[data-field=prompt-tokens]")).to_have_text("60")
    expect(total.locator("[data-field=completion-tokens]")).to_have_text("30")
    expect(total.locator("[data-field=cost]")).to_have_text("0.075000")
    expect(page.get_by_test_id("costs").locator("tr[data-model='Scripted/judge-1'] [data-field=cost]")).to_have_text(
        "0.075000")
    expect(page.get_by_test_id("calls").locator("tbody tr")).to_have_count(6)
