"""People's ratings of a dataset version's responses on a pointwise judge's rubric: served blind
(the prompt and the response, read in the columns a run of the judge reads), the least-rated
first; checked as comparison ratings are (every refusal naming its field, nothing stored); one per
person, row and columns; and the judge's run over that version set against them, per criterion,
which decides whether the judge is calibrated exactly as ratings of a comparison's outputs do.
Who may: what voters need, and dataset.view on the version's dataset."""

import json

import pytest

from apps.evaluation import selectors
from apps.evaluation.models import Judge, Rating
from tests.comparison.factories import placeholder_model
from tests.evaluation.fixtures import BAD_POSITIONS, check_who_may_judge_rows, judge_all, point_answer
from tests.evaluation.test_judge_dataset_runs import ROWS, body, launch_and_wait, make_version
from tests.evaluation.test_judge_runs import PAIRWISE, POINTWISE, make_judge, post
from workers.judging.stats import spearman

GOOD = point_answer(correct="pass", clarity=3)


def urls(project, judge_id: int, version) -> tuple[str, str]:
    base = f"/api/projects/{project.pk}/judges/{judge_id}/versions/{version.pk}/ratings/"
    return base + "next/", base


def rate_all(client, project, judge_id: int, version, scores: dict) -> int:
    """Rate through the API whatever it serves until nothing is left: scores[response text] =
    (correct, clarity). Returns how many were rated."""
    served = judge_all(client, *urls(project, judge_id, version), key="row", counted="rated", body=lambda row: {
        "position": row["position"], "answer": point_answer(correct=scores[row["text"]][0],
                                                            clarity=scores[row["text"]][1])})
    for row in served:  # blind: the prompt and the response in the run's columns, nothing else of the row
        assert set(row) == {"position", "prompt", "text", "prompt_html", "text_html"}
        assert ROWS[row["position"]][:2] == (row["prompt"], row["text"])
    return len(served)


def scores(correct, clarity) -> dict:
    return {"content": json.dumps({"correct": {"score": correct, "reason": "r"},
                                   "clarity": {"score": clarity, "reason": "r"}})}


# The people's scores of the four rows with a response (the fifth has none: never served).
SCIENTIST = {"Paris.": ("pass", 5), "Berlin is the capital.": ("pass", 4), "Rome.": ("fail", 3),
             "Four.": ("fail", 1)}
OWNER = {0: ("pass", 4), 2: ("pass", 2)}  # by position


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(180)
def test_people_rate_a_versions_responses_and_the_judges_run_over_it_is_measured_against_them(
        client, scientist, owner, project, judge_provider, scripted_judge, inference_worker):
    version = make_version(project, owner)
    scripted_judge.script([
        {"pattern": r"\[Response\]\nParis\.$", **scores("pass", 4)},
        {"pattern": r"\[Response\]\nBerlin is the capital\.$", **scores("pass", 5)},
        {"pattern": r"\[Response\]\nRome\.$", **scores("fail", 3)},
        {"pattern": r"\[Response\]\nFour\.$", "content": "Looks right to me."},  # unparseable: left out
    ])
    client.force_login(scientist)
    judge = make_judge(client, project, POINTWISE)
    _, run = launch_and_wait(client, project, judge, body(version))
    assert run["state"] == "succeeded", run["error"]
    # Before anyone rates: the figures are there with no items, and no votes are asked for.
    assert run["agreement"]["judge_vs_people"] is None and run["agreement"]["ratings"]["ratings"] == 0
    assert run["agreement"]["calibration"]["reason"] == (
        "0 items judged and rated on correct; 0 items judged and rated on clarity; the project asks for at least 20")

    assert rate_all(client, project, judge["id"], version, SCIENTIST) == 4
    # The same row read in other columns is another response: not this run's.
    other = post(client, urls(project, judge["id"], version)[1],
                 {"position": 0, "response_column": "answer_b", "answer": point_answer(correct="fail", clarity=1)})
    assert other.status_code == 201 and other.json()["response_column"] == "answer_b"
    client.force_login(owner)
    next_url, rate_url = urls(project, judge["id"], version)
    for position, (correct, clarity) in OWNER.items():
        made = post(client, rate_url, {"position": position, "prompt_column": "prompt", "response_column": "response",
                                       "answer": point_answer(correct=correct, clarity=clarity)})
        assert made.status_code == 201, made.content
    served = client.get(next_url).json()  # the two it has not rated
    assert (served["rated"], served["remaining"]) == (2, 2) and served["row"]["position"] in (1, 3)
    again = post(client, rate_url, {"position": 2, "answer": point_answer(correct="pass", clarity=2)})
    assert again.status_code == 200  # rating again replaces
    assert Rating.objects.filter(rater=owner).count() == 2

    agreement = client.get(f"/api/projects/{project.pk}/judge-runs/{run['id']}/").json()["agreement"]
    ratings = agreement["ratings"]
    assert (ratings["ratings"], ratings["outputs_rated"], ratings["raters"]) == (6, 4, 2)
    correct, clarity = ratings["criteria"]
    # clarity, (person, judge) on the three rows the judge scored: the scientist's (5, 4), (4, 5),
    # (3, 3), the owner's (4, 4), (2, 3); row 3 (the judge's answer unreadable) is left out.
    items = [(5, 4), (4, 5), (3, 3), (4, 4), (2, 3)]
    judge_side = clarity["judge_vs_people"]
    assert (judge_side["items"], judge_side["mae"]) == (5, 0.6)  # (1 + 1 + 0 + 0 + 1) / 5
    assert judge_side["rho"] == spearman(items) == 0.73  # 6.75 / sqrt(9.5 · 9); ranks (5 3.5 2 3.5 1) vs (3.5 5 1.5 3.5 1.5)
    low, high = judge_side["rho_ci"]
    assert low <= judge_side["rho"] <= high
    # the people with each other on rows 0 and 2: (5, 4) and (3, 2): rho 1, MAE 1.
    assert {k: clarity["people_vs_people"][k] for k in ("items", "rho", "mae")} == {"items": 2, "rho": 1.0, "mae": 1.0}
    # correct: 4 of 5 agree; people pass 4 / fail 1, judge pass 3 / fail 2: expected (4·3 + 1·2)/25 = 0.56,
    # kappa (0.8 − 0.56)/0.44 = 0.5455; TPR: the judge passes 3 of the people's 4; TNR: fails their one.
    assert {k: correct["judge_vs_people"][k] for k in ("items", "kappa", "tpr", "tnr")} == {
        "items": 5, "kappa": 0.5455, "tpr": 0.75, "tnr": 1.0}

    # Calibration, as with ratings of a comparison's outputs: 5 items a criterion are short of 20;
    # with 5 asked, correct's kappa is short of 0.6; at 0.5 the judge is calibrated (what gating asks).
    assert agreement["calibration"]["reason"] == (
        "5 items judged and rated on correct; 5 items judged and rated on clarity; the project asks for at least 20")
    judge_row = Judge.objects.get(pk=judge["id"])
    assert selectors.judge_calibration(judge_row)["calibrated"] is False
    settings_url = f"/api/projects/{project.pk}/judge-calibration/"
    assert client.patch(settings_url, {"min_items": 5}, content_type="application/json").status_code == 200
    assert selectors.judge_calibration(judge_row)["reason"] == "correct kappa 0.5455 is below the project's threshold 0.6"
    client.patch(settings_url, {"min_kappa": 0.5}, content_type="application/json")
    assert selectors.judge_calibration(judge_row) == {"calibrated": True, "reason": "", "min_kappa": 0.5,
                                                      "min_correlation": 0.6, "min_items": 5}
    shown = client.get(f"/api/projects/{project.pk}/judge-runs/{run['id']}/").json()["agreement"]
    assert shown["calibration"]["calibrated"] is True


# --- the fast checks: no run needed to rate ----------------------------------------------------------

@pytest.fixture
def version(project, owner):
    return make_version(project, owner)


@pytest.fixture
def judge(project):
    return Judge.objects.create(project=project, name="Points", rubric=POINTWISE, local_model=placeholder_model(project))


HOSTILE = "<script>alert(1)</script>'; DROP TABLE evaluation_rating; --"


@pytest.mark.django_db
@pytest.mark.parametrize(("change", "field"), [
    *BAD_POSITIONS,
    ({"answer": {**GOOD, "clarity": {"score": 6, "reason": ""}}}, "answer.clarity.score"),
    ({"answer": {**GOOD, "correct": {"score": True, "reason": ""}}}, "answer.correct.score"),
    ({"answer": {"correct": GOOD["correct"]}}, "answer"),
    ({"answer": {**GOOD, "clarity": {"score": 3, "reason": "x" * 2001}}}, "answer.clarity.reason"),
    ({"answer": "good"}, "answer"),
    ({"prompt_column": "nope"}, "prompt_column"),
    ({"response_column": HOSTILE}, "response_column"),
    ({"response_column": "score"}, "response_column"),  # numbers, not text
    ({"response_column": "prompt"}, "response_column"),  # the prompt's column
    ({"response_column": "x" * 201}, "response_column"),
    ({"response_column": 7}, "response_column"),
])
def test_a_bad_row_rating_is_refused_naming_its_field_and_nothing_is_stored(client, scientist, project, version,
                                                                           judge, change, field):
    client.force_login(scientist)
    refused = post(client, urls(project, judge.pk, version)[1], {"position": 0, "answer": GOOD, **change})
    assert refused.status_code == 400, refused.content
    found = refused.json()
    assert found.get("field") == field or field in found, found
    assert refused["Content-Type"] == "application/json"  # an echoed column name is data, never markup
    assert not Rating.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("query", "field"), [
    ("?prompt_column=nope", "prompt_column"),
    ("?response_column=messages", "response_column"),  # a chat, not text
    ("?response_column=" + "x" * 201, "response_column"),
])
def test_a_bad_column_to_serve_is_refused_naming_it(client, scientist, project, version, judge, query, field):
    client.force_login(scientist)
    refused = client.get(urls(project, judge.pk, version)[0] + query)
    assert refused.status_code == 400, refused.content
    assert refused.json().get("field") == field or field in refused.json()


@pytest.mark.django_db
def test_a_reason_with_html_is_kept_as_written(client, scientist, project, version, judge):
    client.force_login(scientist)
    hostile = "<script>alert(1)</script><b>bold</b>"
    made = post(client, urls(project, judge.pk, version)[1],
                {"position": 1, "answer": {**GOOD, "clarity": {"score": 3, "reason": hostile}}})
    assert made.status_code == 201 and made.json()["answer"]["clarity"]["reason"] == hostile
    rating = Rating.objects.get()
    assert (rating.dataset_version_id, rating.position, rating.output_id) == (version.pk, 1, None)
    assert (rating.prompt_column, rating.response_column) == ("prompt", "response")


@pytest.mark.django_db
def test_who_may_rate_a_versions_responses(client, owner, admin, scientist, annotator, viewer, outsider, project,
                                           version, judge):
    next_url, submit_url = urls(project, judge.pk, version)
    check_who_may_judge_rows(client, owner=owner, admin=admin, scientist=scientist, annotator=annotator, viewer=viewer,
                             outsider=outsider, version=version, next_url=next_url, submit_url=submit_url,
                             body={"position": 0, "answer": GOOD})
    assert Rating.objects.count() == 4


@pytest.mark.django_db
def test_another_projects_version_or_judge_answers_404_and_a_pairwise_judge_is_not_rated(
        client, owner, scientist, outsider, project, other_project, version, judge):
    theirs = make_version(other_project, outsider, name="Theirs")
    their_judge = Judge.objects.create(project=other_project, name="Theirs", rubric=POINTWISE,
                                       local_model=placeholder_model(other_project))
    client.force_login(scientist)
    for scope in [(project, judge.pk, theirs), (project, their_judge.pk, version),
                  (other_project, their_judge.pk, theirs), (other_project, judge.pk, version)]:
        next_url, rate_url = urls(*scope)
        assert client.get(next_url).status_code == 404
        missing = post(client, rate_url, {"position": 0, "answer": GOOD})
        assert missing.status_code == 404 and b"Theirs" not in missing.content
    pairwise = Judge.objects.create(project=project, name="Pairs", rubric=PAIRWISE, local_model=judge.local_model)
    next_url, rate_url = urls(project, pairwise.pk, version)
    assert client.get(next_url).status_code == 409
    assert post(client, rate_url, {"position": 0, "answer": {"helpfulness": {"score": 3, "reason": ""}}}
                ).status_code == 409
    assert not Rating.objects.exists()


@pytest.mark.django_db
def test_the_rating_page_asks_the_same_policy(client, owner, scientist, annotator, outsider, project, other_project,
                                              version, judge):
    page = f"/projects/{project.pk}/judges/{judge.pk}/versions/{version.pk}/rate/?response_column=answer_b"
    client.force_login(scientist)
    shown = client.get(page)
    assert shown.status_code == 200 and b'data-response-column="answer_b"' in shown.content
    hostile = client.get(page.replace("answer_b", "%3Cscript%3Ealert(1)%3C/script%3E"))
    assert b"<script>alert(1)" not in hostile.content and b"&lt;script&gt;alert(1)" in hostile.content
    theirs = make_version(other_project, outsider, name="Theirs")
    missing = client.get(f"/projects/{project.pk}/judges/{judge.pk}/versions/{theirs.pk}/rate/")
    assert missing.status_code == 404 and b"Theirs" not in missing.content
    client.force_login(annotator)  # votes, but may not read the dataset
    assert client.get(page).status_code == 403
    client.force_login(outsider)
    assert client.get(page).status_code == 404
