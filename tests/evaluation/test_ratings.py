"""People's pointwise ratings of a comparison's outputs on a judge's rubric: served blind, the
least-rated first; checked against the rubric's answer schema (every refusal naming its place,
nothing stored); one per person and output, a second replacing the first; and the judge's scores
set against them, per criterion, beside the raters' agreement with each other, which also decides
whether the judge is calibrated (and so may gate)."""

import json

import pytest

from apps.comparison.models import Output
from apps.evaluation import selectors
from apps.evaluation.models import Judge, Rating
from tests.comparison.factories import make_comparison, placeholder_model
from tests.evaluation.fixtures import judge_all, point_answer, scored_run
from tests.factories import MembershipFactory, UserFactory
from workers.judging.stats import kendall, spearman

pytestmark = pytest.mark.django_db

RUBRIC = {"kind": "pointwise", "instructions": "",
          "criteria": [{"name": "correct", "description": "Is it right?", "scale": "pass_fail"},
                       {"name": "clarity", "description": "Is it clear?", "scale": "1-5"}]}


def post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


@pytest.fixture
def comparison(project, owner):
    return make_comparison(project, owner, models=[placeholder_model(project, "Alpha"), placeholder_model(project, "Beta")])


@pytest.fixture
def judge(project, comparison):
    return Judge.objects.create(project=project, name="Points", rubric=RUBRIC,
                                local_model=comparison.contestants.first().model)


def urls(project, judge, comparison):
    base = f"/api/projects/{project.pk}/judges/{judge.pk}/comparisons/{comparison.pk}/ratings/"
    return base + "next/", base


def rate_all(client, judge, comparison, scores: dict) -> int:
    """Rate through the API whatever it serves until nothing is left: scores[output text] =
    (correct, clarity). Returns how many were rated."""
    served = judge_all(client, *urls(judge.project, judge, comparison), key="output", counted="rated", body=lambda o: {
        "output": o["id"], "answer": point_answer(correct=scores[o["text"]][0], clarity=scores[o["text"]][1])})
    for output in served:  # blind: the prompt and the text, never the model
        assert set(output) == {"id", "prompt", "text", "prompt_html", "text_html"}
    return len(served)


# The judge's scores and the people's, on the six outputs (prompt position, column): (correct, clarity).
JUDGE = {(0, 0): ("pass", 4), (0, 1): ("fail", 2), (1, 0): ("pass", 5), (1, 1): ("fail", 1), (2, 0): ("pass", 3),
         (2, 1): ("pass", 3)}
ANNA = {"Alpha says 0": ("pass", 5), "Beta says 0": ("fail", 2), "Alpha says 1": ("pass", 4),
        "Beta says 1": ("fail", 1), "Alpha says 2": ("fail", 3), "Beta says 2": ("pass", 2)}
BEN = {"Alpha says 0": ("pass", 4), "Beta says 0": ("fail", 1)}


def test_people_rate_blind_and_the_judge_is_measured_against_them(client, owner, annotator, project, comparison,
                                                                  judge):
    run = scored_run(judge, comparison, {key: point_answer(correct=c, clarity=s) for key, (c, s) in JUDGE.items()})
    ben = UserFactory(username="ben")
    MembershipFactory(project=project, user=ben, role="annotator")

    client.force_login(annotator)  # an annotator votes blind; the same permission rates
    assert rate_all(client, judge, comparison, ANNA) == 6
    client.force_login(ben)
    next_url, rate_url = urls(project, judge, comparison)
    for text, (correct, clarity) in BEN.items():  # Ben rates two, then is served the four others
        made = post(client, rate_url, {"output": Output.objects.get(text=text).pk,
                                       "answer": point_answer(correct=correct, clarity=clarity)})
        assert made.status_code == 201, made.content
    served = client.get(next_url).json()
    assert (served["rated"], served["remaining"]) == (2, 4) and served["output"]["text"] not in BEN
    assert Rating.objects.count() == 8
    cleo = UserFactory(username="cleo")
    MembershipFactory(project=project, user=cleo, role="annotator")
    client.force_login(cleo)  # the least-rated first: the four rated once, never the two rated twice
    assert {client.get(next_url).json()["output"]["text"] for _ in range(12)} <= set(ANNA) - set(BEN)
    client.force_login(ben)

    # Rating again replaces: still one rating of Ben's on that output, with the new answer.
    output = Output.objects.get(text="Alpha says 0")
    again = post(client, rate_url, {"output": output.pk, "answer": point_answer(correct="fail", clarity=2)})
    assert again.status_code == 200 and again.json()["answer"]["clarity"]["score"] == 2
    assert Rating.objects.filter(rater=ben).count() == 2
    post(client, rate_url, {"output": output.pk, "answer": point_answer(correct="pass", clarity=4)})

    client.force_login(owner)
    agreement = client.get(f"/api/projects/{project.pk}/judge-runs/{run.pk}/").json()["agreement"]
    ratings = agreement["ratings"]
    assert (ratings["ratings"], ratings["outputs_rated"], ratings["raters"]) == (8, 6, 2)
    correct, clarity = ratings["criteria"]
    # clarity, (person, judge): Anna's six then Ben's two. MAE = (1+0+1+0+0+1 + 0+1)/8 = 0.5.
    items = [(5, 4), (2, 2), (4, 5), (1, 1), (3, 3), (2, 3), (4, 4), (1, 2)]
    judge_side = clarity["judge_vs_people"]
    assert (judge_side["items"], judge_side["mae"]) == (8, 0.5)
    assert (judge_side["rho"], judge_side["tau"]) == (spearman(items), kendall(items)) == (0.9012, 0.8)
    for name in ("rho", "tau", "mae"):
        low, high = judge_side[f"{name}_ci"]
        assert low <= judge_side[name] <= high
    # the people with each other: (Anna, Ben) on two outputs, (5, 4) and (2, 1): rho 1, MAE 1.
    assert {k: clarity["people_vs_people"][k] for k in ("items", "rho", "mae")} == {"items": 2, "rho": 1.0, "mae": 1.0}
    # correct: 7 of 8 agree; people pass 4 / fail 4, judge pass 5 / fail 3: expected (4·5 + 4·3)/64 = 0.5,
    # kappa (0.875 − 0.5)/0.5 = 0.75; TPR: the judge passes all 4 the people pass; TNR: fails 3 of their 4.
    assert {k: correct["judge_vs_people"][k] for k in ("items", "kappa", "tpr", "tnr")} == {
        "items": 8, "kappa": 0.75, "tpr": 1.0, "tnr": 0.75}
    assert {k: correct["people_vs_people"][k] for k in ("items", "kappa", "tpr", "tnr")} == {
        "items": 2, "kappa": 1.0, "tpr": 1.0, "tnr": 1.0}

    # Calibration: with the default 20 items no figure counts; with 8, every figure that has 8
    # items must pass (the votes, with none, are not counted).
    assert agreement["calibration"] == {
        "calibrated": False, "min_kappa": 0.6, "min_correlation": 0.6, "min_items": 20,
        "reason": "0 items judged and voted on; 8 items judged and rated on correct; 8 items judged and rated "
                  "on clarity; the project asks for at least 20"}
    assert selectors.judge_calibration(judge)["calibrated"] is False  # what gating asks
    settings_url = f"/api/projects/{project.pk}/judge-calibration/"
    assert client.patch(settings_url, {"min_items": 8}, content_type="application/json").status_code == 200
    assert selectors.judge_calibration(judge) == {"calibrated": True, "reason": "", "min_kappa": 0.6,
                                                  "min_correlation": 0.6, "min_items": 8}
    client.patch(settings_url, {"min_correlation": 0.95}, content_type="application/json")
    assert selectors.judge_calibration(judge)["reason"] == \
        "clarity Spearman rho 0.9012 is below the project's threshold 0.95"


def test_a_rater_is_not_served_an_output_that_failed_nor_may_rate_it(client, annotator, project, comparison, judge):
    Output.objects.exclude(text="Alpha says 0").update(error="out of memory")
    client.force_login(annotator)
    next_url, rate_url = urls(project, judge, comparison)
    served = client.get(next_url).json()
    assert served["output"]["text"] == "Alpha says 0" and served["remaining"] == 1
    failed = Output.objects.get(text="Beta says 0")
    refused = post(client, rate_url, {"output": failed.pk, "answer": point_answer(correct="pass", clarity=3)})
    assert refused.status_code == 404 and not Rating.objects.exists()


GOOD = point_answer(correct="pass", clarity=3)


@pytest.mark.parametrize("answer, field", [
    ({**GOOD, "bogus": {"score": 3, "reason": ""}}, "answer"),  # a criterion the rubric does not have
    ({"correct": GOOD["correct"]}, "answer"),  # one missing
    ({**GOOD, "clarity": {"score": 6, "reason": ""}}, "answer.clarity.score"),  # off the scale
    ({**GOOD, "clarity": {"score": 0, "reason": ""}}, "answer.clarity.score"),
    ({**GOOD, "clarity": {"score": 3.5, "reason": ""}}, "answer.clarity.score"),
    ({**GOOD, "clarity": {"score": "4", "reason": ""}}, "answer.clarity.score"),  # wrong type
    ({**GOOD, "correct": {"score": "yes", "reason": ""}}, "answer.correct.score"),
    ({**GOOD, "correct": {"score": True, "reason": ""}}, "answer.correct.score"),
    ({**GOOD, "clarity": {"score": 3}}, "answer.clarity"),  # no reason
    ({**GOOD, "clarity": {"score": 3, "reason": 7}}, "answer.clarity.reason"),
    ({**GOOD, "clarity": {"score": 3, "reason": "x" * 2001}}, "answer.clarity.reason"),  # oversized
    ("good", "answer"),
    ([GOOD], "answer"),
])
def test_a_bad_rating_is_refused_naming_its_place_and_nothing_is_stored(client, annotator, project, comparison,
                                                                        judge, answer, field):
    client.force_login(annotator)
    _, rate_url = urls(project, judge, comparison)
    output = comparison.outputs.first()
    refused = post(client, rate_url, {"output": output.pk, "answer": answer})
    assert refused.status_code == 400, refused.content
    assert refused.json()["field"] == field, refused.json()
    assert refused.json()["detail"]
    assert not Rating.objects.exists()


@pytest.mark.parametrize("body, field", [
    ({"output": "first", "answer": GOOD}, "output"),
    ({"output": 0, "answer": GOOD}, "output"),
    ({"answer": GOOD}, "output"),
    ({"output": 1}, "answer"),
])
def test_a_malformed_rating_request_is_refused_by_its_field(client, annotator, project, comparison, judge, body,
                                                            field):
    client.force_login(annotator)
    refused = post(client, urls(project, judge, comparison)[1], body)
    assert refused.status_code == 400 and field in refused.json(), refused.content
    assert not Rating.objects.exists()


def test_a_reason_with_html_is_kept_as_written(client, annotator, project, comparison, judge):
    client.force_login(annotator)
    hostile = "<script>alert(1)</script><b>bold</b>"
    made = post(client, urls(project, judge, comparison)[1], {"output": comparison.outputs.first().pk, "answer": {
        **GOOD, "clarity": {"score": 3, "reason": hostile}}})
    assert made.status_code == 201 and made.json()["answer"]["clarity"]["reason"] == hostile
    assert Rating.objects.get().answer["clarity"]["reason"] == hostile  # shown as text by the page


def test_other_projects_ids_answer_404_and_only_voters_may_rate(client, owner, annotator, viewer, outsider, project,
                                                                other_project, comparison, judge):
    theirs = make_comparison(other_project, outsider)
    their_judge = Judge.objects.create(project=other_project, name="Theirs", rubric=RUBRIC,
                                       local_model=theirs.contestants.first().model)
    body = {"output": comparison.outputs.first().pk, "answer": GOOD}
    client.force_login(annotator)
    for scope in [(other_project, their_judge, theirs), (project, their_judge, comparison),
                  (project, judge, theirs), (other_project, judge, comparison)]:
        next_url, rate_url = urls(*scope)
        assert client.get(next_url).status_code == 404
        assert post(client, rate_url, body).status_code == 404
    # An output of another comparison of the same project is not this comparison's.
    second = make_comparison(project, owner, name="Second")
    refused = post(client, urls(project, judge, comparison)[1], {"output": second.outputs.first().pk, "answer": GOOD})
    assert refused.status_code == 404
    client.force_login(outsider)
    assert client.get(urls(project, judge, comparison)[0]).status_code == 404
    client.force_login(viewer)  # sees comparisons but does not vote
    denied = post(client, urls(project, judge, comparison)[1], body)
    assert denied.status_code == 403 and "compare.vote" in denied.json()["detail"]
    assert not Rating.objects.exists()


def test_only_a_pointwise_judge_on_a_finished_comparison_is_rated(client, owner, annotator, project, comparison,
                                                                  judge):
    pairwise = Judge.objects.create(project=project, name="Pairs", rubric={**RUBRIC, "kind": "pairwise"},
                                    local_model=judge.local_model)
    running = make_comparison(project, owner, name="Running", state="running")
    client.force_login(annotator)
    for scope in [(project, pairwise, comparison), (project, judge, running)]:
        next_url, rate_url = urls(*scope)
        assert client.get(next_url).status_code == 409
        refused = post(client, rate_url, {"output": scope[2].outputs.first().pk, "answer": GOOD})
        assert refused.status_code == 409, refused.content
    assert not Rating.objects.exists()


def test_a_judge_calibrated_by_ratings_may_gate_and_one_they_show_short_may_not(client, owner, annotator, project,
                                                                               comparison, judge):
    from tests.evaluation.test_eval_suites import suite_body
    from tests.training.fixtures import make_version

    scored_run(judge, comparison, {key: point_answer(correct=c, clarity=s) for key, (c, s) in JUDGE.items()})
    client.force_login(annotator)
    rate_all(client, judge, comparison, ANNA)  # 6 items a criterion: correct kappa 0.6667, clarity rho 0.8971
    client.force_login(owner)
    settings_url = f"/api/projects/{project.pk}/judge-calibration/"
    suites_url = f"/api/projects/{project.pk}/eval-suites/"
    metrics = [{"metric": "rouge_l", "threshold": 0.1},
               {"metric": "judge", "judge": judge.pk, "criterion": "clarity", "threshold": 0.5}]
    version = make_version(project, owner)

    client.patch(settings_url, {"min_items": 6, "min_correlation": 0.9}, content_type="application/json")
    refused = post(client, suites_url, suite_body(version, name="Gated", metrics=metrics, gate_alias="production"))
    assert refused.status_code == 400 and refused.json()["field"] == "metrics[1].threshold"
    assert "not calibrated (clarity Spearman rho 0.8971 is below the project's threshold 0.9)" in \
        refused.json()["detail"]

    client.patch(settings_url, {"min_correlation": 0.6}, content_type="application/json")
    made = post(client, suites_url, suite_body(version, name="Gated", metrics=metrics, gate_alias="production"))
    assert made.status_code == 201, made.content
