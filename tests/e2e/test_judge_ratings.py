"""An annotator rates a comparison's outputs blind on a pointwise judge's rubric, one after the
other (a reason with HTML in it shown back as text), until none is left; a scientist then reads,
on the judges page, the judge's scores against the people's per criterion (ρ, τ, MAE; κ, TPR,
TNR, with intervals and counts) beside the raters' agreement with each other, and why the judge
is not calibrated yet. The judge's run is stored as a worker stores it (its run is tested with
a worker in tests/e2e/test_judges.py); the other rater's two ratings go through the service."""

import re

import pytest
from playwright.sync_api import expect

from apps.comparison.models import Output
from apps.evaluation import services
from apps.evaluation.models import Judge, Rating
from tests.comparison.factories import make_comparison, placeholder_model
from tests.conftest import browser_login
from tests.evaluation.fixtures import point_answer, scored_run, scored_version_run
from tests.evaluation.test_ratings import ANNA, BEN, JUDGE, RUBRIC
from tests.factories import MembershipFactory, UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]


def interval(value: str) -> re.Pattern:
    return re.compile(rf"^{re.escape(value)} \[-?\d\.\d\d, -?\d\.\d\d\]$")


def test_an_annotator_rates_outputs_blind_and_the_scientist_reads_the_judge_against_them(
        page, live_asgi, owner, scientist, annotator, project):
    comparison = make_comparison(project, owner, models=[placeholder_model(project, "Alpha"),
                                                         placeholder_model(project, "Beta")])
    judge = Judge.objects.create(project=project, name="Points", rubric=RUBRIC,
                                 local_model=comparison.contestants.first().model)
    scored_run(judge, comparison, {key: point_answer(correct=c, clarity=s) for key, (c, s) in JUDGE.items()})
    ben = UserFactory(username="ben")
    MembershipFactory(project=project, user=ben, role="annotator")
    for text, (correct, clarity) in BEN.items():
        services.rating_submit(user=ben, judge=judge, comparison=comparison, output=Output.objects.get(text=text).pk,
                               answer=point_answer(correct=correct, clarity=clarity))

    browser_login(page, "anna")
    page.goto(f"/projects/{project.pk}/comparisons/")  # an annotator reaches it as the blind votes
    page.get_by_test_id("rate-link").click()
    rate = page.get_by_test_id("rate")
    expect(rate.get_by_test_id("rate-judge")).to_have_value(str(judge.pk))
    for done in range(6):
        expect(rate.get_by_test_id("rate-progress")).to_have_text(f"{done} rated · {6 - done} left")
        text = rate.get_by_test_id("rate-output").inner_text().strip()
        expect(rate.get_by_test_id("rate-prompt")).to_contain_text("?")
        around = rate.inner_text().replace(text, "")  # blind: no model named but in its own output's text
        assert "Alpha" not in around and "Beta" not in around
        correct, clarity = ANNA[text]
        rate.locator("fieldset[data-criterion=correct]").get_by_label(correct, exact=True).check()
        rate.locator("fieldset[data-criterion=clarity]").get_by_label(str(clarity), exact=True).check()
        if done == 0:
            rate.locator("fieldset[data-criterion=clarity]").get_by_label("Reason").fill("<b>so</b> clear")
        rate.get_by_role("button", name="Save and next").click()
        if done == 0:  # what was saved is shown back as text, never as markup
            expect(rate.get_by_test_id("rate-saved")).to_have_text(
                f"Saved: correct {correct}, clarity {clarity} (<b>so</b> clear)")
            expect(rate.get_by_test_id("rate-saved").locator("b")).to_have_count(0)
    expect(rate.get_by_test_id("rate-done")).to_be_visible()
    expect(rate.get_by_test_id("rate-progress")).to_have_text("6 rated · 0 left")
    assert Rating.objects.filter(rater__username="anna").count() == 6

    # The data scientist, on the judges page.
    page.context.clear_cookies()
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/comparisons/{comparison.pk}/judges/")
    run = page.get_by_test_id("judge-run")
    expect(run).to_have_attribute("data-state", "succeeded")
    expect(run.get_by_test_id("ratings-totals")).to_have_text("People's ratings: 8 ratings of 6 outputs by 2 raters")
    rows = run.get_by_test_id("ratings-agreement").locator("tr")
    expect(rows).to_have_count(5)
    # correct: the judge against the people, κ 0.75 (7 of 8 agree, chance 1/2), TPR 4/4, TNR 3/4;
    # the two raters agree on both outputs they share (worked out in tests/evaluation/test_ratings.py).
    expected = [
        ["correct", "judge vs people", "8", "", "", "", "0.750", "1.000", "0.750"],
        ["correct", "people vs people", "2", "", "", "", "1.000", "1.000", "1.000"],
        ["clarity", "judge vs people", "8", "0.901", "0.800", "0.500", "", "", ""],
        ["clarity", "people vs people", "2", "1.000", "1.000", "1.000", "", "", ""],
    ]
    for i, cells in enumerate(expected, start=1):
        row = rows.nth(i).locator("td")
        for j, value in enumerate(cells):
            expect(row.nth(j)).to_have_text(interval(value) if j >= 3 and value else value)
    expect(run.get_by_test_id("calibration")).to_have_text(
        "Not calibrated: 0 items judged and voted on; 8 items judged and rated on correct; 8 items judged and rated "
        "on clarity; the project asks for at least 20. It cannot gate anything.")


def test_a_scientist_rates_a_versions_responses_blind_and_reads_the_judge_run_over_it_against_them(
        page, live_asgi, owner, scientist, project):
    from tests.evaluation.test_judge_dataset_runs import make_version
    from tests.evaluation.test_judge_runs import POINTWISE
    from tests.evaluation.test_row_ratings import OWNER, SCIENTIST

    version = make_version(project, owner)
    judge = Judge.objects.create(project=project, name="Points", rubric=POINTWISE, local_model=placeholder_model(project))
    # The judge's scores of rows 0-2; its answer on row 3 unreadable (as in tests/evaluation/test_row_ratings.py).
    scored_version_run(judge, version, {0: point_answer(correct="pass", clarity=4),
                                        1: point_answer(correct="pass", clarity=5),
                                        2: point_answer(correct="fail", clarity=3), 3: None})
    for position, (correct, clarity) in OWNER.items():
        services.row_rating_submit(user=owner, judge=judge, version=version.pk, position=position,
                                   answer=point_answer(correct=correct, clarity=clarity))

    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/judges/")
    run = page.get_by_test_id("judge-run")
    expect(run.get_by_test_id("ratings-totals")).to_have_text("People's ratings: 2 ratings of 2 outputs by 1 raters")
    run.get_by_test_id("rate-rows-link").click()
    rate = page.get_by_test_id("rate")
    expect(rate.get_by_test_id("rate-source")).to_have_text("Answers v1 (prompt → response)")
    for done in range(4):
        expect(rate.get_by_test_id("rate-progress")).to_have_text(f"{done} rated · {4 - done} left")
        text = rate.get_by_test_id("rate-output").inner_text().strip()
        expect(rate.get_by_test_id("rate-prompt")).to_contain_text("?")
        assert "answer_b" not in rate.inner_text() and "Bonn" not in rate.inner_text()  # only the run's columns
        correct, clarity = SCIENTIST[text]
        rate.locator("fieldset[data-criterion=correct]").get_by_label(correct, exact=True).check()
        rate.locator("fieldset[data-criterion=clarity]").get_by_label(str(clarity), exact=True).check()
        if done == 0:
            rate.locator("fieldset[data-criterion=clarity]").get_by_label("Reason").fill("<b>so</b> clear")
        rate.get_by_role("button", name="Save and next").click()
        if done == 0:  # shown back as text, never as markup
            expect(rate.get_by_test_id("rate-saved")).to_have_text(
                f"Saved: correct {correct}, clarity {clarity} (<b>so</b> clear)")
            expect(rate.get_by_test_id("rate-saved").locator("b")).to_have_count(0)
    expect(rate.get_by_test_id("rate-done")).to_be_visible()
    assert Rating.objects.filter(rater=scientist, dataset_version=version).count() == 4

    page.goto(f"/projects/{project.pk}/judges/")
    run = page.get_by_test_id("judge-run")
    expect(run.get_by_test_id("ratings-totals")).to_have_text("People's ratings: 6 ratings of 4 outputs by 2 raters")
    expect(run.get_by_test_id("agreement")).to_have_count(0)  # no votes on a version's rows
    rows = run.get_by_test_id("ratings-agreement").locator("tr")
    expect(rows).to_have_count(5)
    # clarity, the judge against the people over the 5 ratings of rows it scored: ρ 0.730, MAE 0.600;
    # the two raters on the rows they share: ρ 1, MAE 1 (worked out in tests/evaluation/test_row_ratings.py).
    judge_side, people_side = rows.nth(3).locator("td"), rows.nth(4).locator("td")
    for j, value in enumerate(["clarity", "judge vs people", "5", "0.730"]):
        expect(judge_side.nth(j)).to_have_text(interval(value) if j >= 3 else value)
    expect(judge_side.nth(5)).to_have_text(interval("0.600"))
    for j, value in enumerate(["clarity", "people vs people", "2", "1.000"]):
        expect(people_side.nth(j)).to_have_text(interval(value) if j >= 3 else value)
    expect(run.get_by_test_id("calibration")).to_have_text(
        "Not calibrated: 5 items judged and rated on correct; 5 items judged and rated on clarity; the project asks "
        "for at least 20. It cannot gate anything.")


def test_a_scientist_chooses_between_a_versions_two_responses_blind_and_reads_the_pairwise_run_against_them(
        page, live_asgi, owner, scientist, project):
    from apps.evaluation.models import Preference
    from apps.evaluation.services import shown_swapped
    from tests.evaluation.test_judge_dataset_runs import ROWS, make_version
    from tests.evaluation.test_judge_runs import PAIRWISE
    from tests.evaluation.test_row_preferences import COLUMNS, OWNER, SCIENTIST

    hostile = ("<b>bold</b>?", "<script>x()</script>", {"answer_b": "<img src=x onerror=alert(1)>", "score": 9})
    rows = [*ROWS[:4], hostile, ROWS[4]]  # the row without a response last: never served
    version = make_version(project, owner, rows=rows)
    responses = {position: (response, meta["answer_b"]) for position, (_, response, meta) in enumerate(rows[:5])}
    judge = Judge.objects.create(project=project, name="Pairs", rubric=PAIRWISE, local_model=placeholder_model(project))

    def said(winner):
        return {"winner": winner, "reason": "stored"}

    # The judge on rows 0-3 in both orders: 0 second, 1 inconsistent (a tie), 2 first, 3 unreadable;
    # row 4 first (as in tests/evaluation/test_row_preferences.py, which runs it through a worker).
    scored_version_run(judge, version, {(0, False): said("B"), (0, True): said("A"), (1, False): said("A"),
                                        (1, True): said("A"), (2, False): said("A"), (2, True): said("B"),
                                        (3, False): None, (3, True): said("B"), (4, False): said("A"),
                                        (4, True): said("B")}, second_response_column="answer_b")
    for position, preferred in {**OWNER, 1: "tie"}.items():
        swapped = shown_swapped(owner, judge, version, position, COLUMNS)
        choice = {"first": "b" if swapped else "a", "second": "a" if swapped else "b", "tie": "tie"}[preferred]
        services.row_preference_submit(user=owner, judge=judge, version=version.pk, position=position, choice=choice,
                                       **COLUMNS)

    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/judges/")
    run = page.get_by_test_id("judge-run")
    expect(run.get_by_test_id("preferences-totals")).to_have_text("People's choices: 3 choices on 3 rows by 1 person")
    run.get_by_test_id("prefer-rows-link").click()
    prefer = page.get_by_test_id("prefer")
    wanted = {**SCIENTIST, 4: "second"}
    for done in range(5):
        expect(prefer.get_by_test_id("prefer-progress")).to_have_text(f"{done} chosen · {5 - done} left")
        a = prefer.get_by_test_id("prefer-a").inner_text().strip()
        position = next(p for p, pair in responses.items() if a in pair)
        assert "answer_b" not in prefer.inner_text()  # blind: never which column a response is in
        if position == 4:  # markup in a prompt or a response is shown as text, never run
            expect(prefer.get_by_test_id("prefer-b")).to_contain_text("<")
            expect(prefer.locator("img, [data-testid=prefer-prompt] b")).to_have_count(0)
        first = responses[position][0]
        preferred = wanted[position]
        key = "t" if preferred == "tie" else ("a" if (a == first) == (preferred == "first") else "b")
        if done % 2:
            prefer.get_by_role("button", name={"a": "A is better (a)", "b": "B is better (b)",
                                               "t": "Tie (t)"}[key]).click()
        else:
            page.keyboard.press(key)
    expect(prefer.get_by_test_id("prefer-done")).to_be_visible()
    expect(prefer.get_by_test_id("prefer-progress")).to_have_text("5 chosen · 0 left")
    chosen = dict(Preference.objects.filter(rater=scientist).values_list("position", "choice"))
    assert chosen == wanted

    page.goto(f"/projects/{project.pk}/judges/")
    run = page.get_by_test_id("judge-run")
    expect(run.get_by_test_id("preferences-totals")).to_have_text("People's choices: 8 choices on 5 rows by 2 people")
    # The judge against the people on rows 0-2 and 4 (worked out in tests/evaluation/test_row_preferences.py,
    # plus row 4: the scientist's second against the judge's first): 5 of 7 agree; people with each other
    # on rows 0-2: 2 of 3.
    expect(run.get_by_test_id("agreement")).to_contain_text("Agreement with people's choices: κ ")
    expect(run.get_by_test_id("agreement")).to_contain_text("71.4% over 7 items · people with each other: κ ")
    expect(run.get_by_test_id("agreement")).to_contain_text("66.7% over 3 items")
    expect(run.get_by_test_id("calibration")).to_have_text(
        "Not calibrated: 7 items judged and chosen on; the project asks for at least 20. It cannot gate anything.")
    expect(run.get_by_test_id("confusion")).to_be_visible()
