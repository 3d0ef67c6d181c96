"""People's blind preferences between a dataset version's row's two responses for a pairwise
judge: served with the responses as A and B in an order of each person's own (never which column
each is), the rows with fewest preferences first; a choice of A, B or tie mapped back to the
columns; checked as row ratings are (every refusal naming its field, nothing stored); one per
person, row and columns; and the judge's run over that version set against them (its label per
row from its two orders, an inconsistent pair a tie) beside people against each other, which
decides whether the judge is calibrated. Who may: as for row ratings."""

import pytest

from apps.evaluation import selectors
from apps.evaluation.models import Judge, Preference
from apps.evaluation.services import shown_swapped
from apps.projects.models import AuditEvent
from tests.comparison.factories import placeholder_model
from tests.evaluation.fixtures import BAD_POSITIONS, check_who_may_judge_rows, judge_all
from tests.evaluation.test_judge_dataset_runs import ROWS, body, launch_and_wait, make_version
from tests.evaluation.test_judge_runs import PAIRWISE, POINTWISE, make_judge, post, shown, winner

COLUMNS = {"prompt_column": "prompt", "response_column": "response", "second_response_column": "answer_b"}
QUERY = "?prompt_column=prompt&response_column=response&second_response_column=answer_b"


def urls(project, judge_id: int, version) -> tuple[str, str]:
    base = f"/api/projects/{project.pk}/judges/{judge_id}/versions/{version.pk}/preferences/"
    return base + "next/" + QUERY, base


def shown_as(row: dict, preferred: str) -> str:
    """What to press for `preferred` (first: the response column, second: answer_b, or tie) on a
    served row, whichever order it came in."""
    if preferred == "tie":
        return "tie"
    response, second = ROWS[row["position"]][1], ROWS[row["position"]][2]["answer_b"]
    wanted = response if preferred == "first" else second
    assert wanted in (row["a"], row["b"])
    return "a" if row["a"] == wanted else "b"


def choose_all(client, project, judge_id: int, version, preferred: dict) -> list[dict]:
    """Choose through the API on whatever it serves until nothing is left: preferred[position] =
    first/second/tie. Returns the rows served."""
    served = judge_all(client, *urls(project, judge_id, version), key="row", counted="chosen", body=lambda row: {
        "position": row["position"], "choice": shown_as(row, preferred[row["position"]]), **COLUMNS})
    for row in served:  # blind: the prompt and the two responses, never which column each is
        assert set(row) == {"position", "prompt", "a", "b", "prompt_html", "a_html", "b_html"}
        assert row["prompt"] == ROWS[row["position"]][0]
    return served


# The scientist's preferences on the four rows with two responses; the owner's on two of them.
SCIENTIST = {0: "second", 1: "tie", 2: "first", 3: "first"}
OWNER = {0: "second", 2: "second"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(180)
def test_people_choose_between_a_versions_two_responses_and_the_pairwise_run_over_it_is_measured_against_them(
        client, scientist, owner, project, judge_provider, scripted_judge, inference_worker):
    version = make_version(project, owner)
    (a0, b0), (a1, b1), (a2, b2), (a3, b3) = [(r, m["answer_b"]) for _, r, m in ROWS[:4]]
    scripted_judge.script([
        {"pattern": shown(a0, b0), **winner("B")}, {"pattern": shown(b0, a0), **winner("A")},  # answer_b twice
        {"pattern": shown(a1, b1), **winner("A")}, {"pattern": shown(b1, a1), **winner("A")},  # inconsistent: tie
        {"pattern": shown(a2, b2), **winner("A")}, {"pattern": shown(b2, a2), **winner("B")},  # response twice
        {"pattern": shown(a3, b3), "content": "A."},  # not JSON: row 3 is left out
        {"pattern": shown(b3, a3), **winner("B")},
    ])
    client.force_login(scientist)
    judge = make_judge(client, project, PAIRWISE)
    _, run = launch_and_wait(client, project, judge, body(version, second_response_column="answer_b"))
    assert run["state"] == "succeeded", run["error"]
    run_url = f"/api/projects/{project.pk}/judge-runs/{run['id']}/"
    # Before anyone chooses: no items, and a run no one chose on does not count toward calibration.
    before = run["agreement"]
    assert (before["people"], before["preferences"], before["judge_vs_people"]["items"]) == ("chosen", 0, 0)
    assert before["calibration"]["reason"] == "0 items judged and chosen on; the project asks for at least 20"
    judge_row = Judge.objects.get(pk=judge["id"])
    assert "no finished run" in selectors.judge_calibration(judge_row)["reason"]

    served = choose_all(client, project, judge["id"], version, SCIENTIST)
    assert sorted(row["position"] for row in served) == [0, 1, 2, 3]  # the row without a response never comes
    # What was pressed maps back to the columns, whichever order each row was shown in.
    stored = {p.position: (p.choice, p.swapped) for p in Preference.objects.filter(rater=scientist)}
    assert {position: choice for position, (choice, _) in stored.items()} == SCIENTIST
    for position, (_, swapped) in stored.items():
        assert swapped == shown_swapped(scientist, judge_row, version, position, COLUMNS)
        assert served[[r["position"] for r in served].index(position)]["a"] == (
            ROWS[position][2]["answer_b"] if swapped else ROWS[position][1])
    event = AuditEvent.objects.filter(action="judge.prefer", actor=scientist).first()
    assert event.after == {"version": version.pk, "position": event.after["position"], **COLUMNS,
                           "choice": SCIENTIST[event.after["position"]], "replaced": False}

    client.force_login(owner)
    next_url, choose_url = urls(project, judge["id"], version)
    for position, preferred in OWNER.items():
        row = {"position": position, **dict(zip(("a", "b"), _order(owner, judge_row, version, position)))}
        made = post(client, choose_url, {"position": position, "choice": shown_as(row, preferred), **COLUMNS})
        assert made.status_code == 201, made.content
    left = client.get(next_url).json()  # the two it has not chosen on
    assert (left["chosen"], left["remaining"]) == (2, 2) and left["row"]["position"] in (1, 3)
    again = post(client, choose_url, {"position": 1, "choice": "tie", **COLUMNS})
    assert again.status_code == 201
    replaced = post(client, choose_url, {"position": 1, "choice": "a", **COLUMNS})
    assert replaced.status_code == 200 and Preference.objects.get(rater=owner, position=1).choice != "tie"
    post(client, choose_url, {"position": 1, "choice": "tie", **COLUMNS})  # back to tie: agreeing with both
    assert Preference.objects.filter(rater=owner).count() == 3

    agreement = client.get(run_url).json()["agreement"]
    assert (agreement["preferences"], agreement["rows_with_preferences"], agreement["raters"]) == (7, 4, 2)
    # Judge vs people, (person, judge) on rows 0-2 (row 3's verdict unreadable): the scientist's
    # (second, second), (tie, tie), (first, first); the owner's (second, second), (tie, tie),
    # (second, first). 5 of 6 agree; people first 1, second 3, tie 2; the judge first 2, second 2,
    # tie 2: chance (1·2 + 3·2 + 2·2)/36 = 1/3, kappa (5/6 − 1/3)/(2/3) = 0.75.
    judge_side = agreement["judge_vs_people"]
    assert (judge_side["items"], judge_side["agreement"], judge_side["kappa"]) == (6, 0.8333, 0.75)
    low, high = judge_side["kappa_ci"]
    assert low <= 0.75 <= high
    assert judge_side["confusion"]["second"] == {"first": 1, "second": 2, "tie": 0}
    # People with each other on rows 0-2: agree on 0 and 1, not on 2 (first, second): 2 of 3.
    people = agreement["people_vs_people"]
    assert (people["items"], people["agreement"]) == (3, 0.6667)

    # Calibration against the project's thresholds: 6 items are short of 20; with 6 asked, κ 0.75
    # passes 0.6, and a judge run only over versions is calibrated; at 0.8 it is not.
    assert agreement["calibration"]["reason"] == "6 items judged and chosen on; the project asks for at least 20"
    assert selectors.judge_calibration(judge_row)["calibrated"] is False
    settings_url = f"/api/projects/{project.pk}/judge-calibration/"
    assert client.patch(settings_url, {"min_items": 6}, content_type="application/json").status_code == 200
    assert selectors.judge_calibration(judge_row) == {"calibrated": True, "reason": "", "min_kappa": 0.6,
                                                      "min_correlation": 0.6, "min_items": 6}
    client.patch(settings_url, {"min_kappa": 0.8}, content_type="application/json")
    assert selectors.judge_calibration(judge_row)["reason"] == "kappa 0.75 is below the project's threshold 0.8"


def _order(user, judge, version, position) -> tuple[str, str]:
    """The row's two responses as this person is shown them (A, B)."""
    first, second = ROWS[position][1], ROWS[position][2]["answer_b"]
    return (second, first) if shown_swapped(user, judge, version, position, COLUMNS) else (first, second)


# --- the fast checks: no run needed to choose ----------------------------------------------------------

@pytest.fixture
def version(project, owner):
    return make_version(project, owner)


@pytest.fixture
def judge(project):
    return Judge.objects.create(project=project, name="Pairs", rubric=PAIRWISE, local_model=placeholder_model(project))


HOSTILE = "<script>alert(1)</script>'; DROP TABLE evaluation_preference; --"


@pytest.mark.django_db
@pytest.mark.parametrize(("change", "field"), [
    *BAD_POSITIONS,
    ({"choice": "first"}, "choice"),  # people press A, B or tie: never a column
    ({"choice": "A"}, "choice"),
    ({"choice": 1}, "choice"),
    ({"choice": ["a"]}, "choice"),
    ({"choice": None}, "choice"),
    ({"prompt_column": "nope"}, "prompt_column"),
    ({"second_response_column": HOSTILE}, "second_response_column"),
    ({"second_response_column": "score"}, "second_response_column"),  # numbers, not text
    ({"second_response_column": "response"}, "second_response_column"),  # the first response's column
    ({"second_response_column": "x" * 201}, "second_response_column"),
    ({"second_response_column": ""}, "second_response_column"),
    ({"response_column": {"a": 1}}, "response_column"),
    ({"rater": 1}, "rater"),  # unknown fields are refused, not ignored
    ({"swapped": True}, "swapped"),
    ({"x" * 5000: 1}, "x" * 80),
])
def test_a_bad_preference_is_refused_naming_its_field_and_nothing_is_stored(client, scientist, project, version,
                                                                           judge, change, field):
    client.force_login(scientist)
    refused = post(client, urls(project, judge.pk, version)[1], {"position": 0, "choice": "a", **COLUMNS, **change})
    assert refused.status_code == 400, refused.content
    found = refused.json()
    assert found.get("field") == field or field in found, found
    assert refused["Content-Type"] == "application/json"  # an echoed column name is data, never markup
    assert not Preference.objects.exists()


@pytest.mark.django_db
def test_a_preference_without_its_second_column_or_a_body_is_refused(client, scientist, project, version, judge):
    client.force_login(scientist)
    _, choose_url = urls(project, judge.pk, version)
    missing = post(client, choose_url, {"position": 0, "choice": "a"})
    assert missing.status_code == 400 and "second_response_column" in missing.json()
    assert post(client, choose_url, ["a"]).status_code == 400
    assert client.post(choose_url, "{not json", content_type="application/json").status_code == 400
    assert not Preference.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("query", "field"), [
    ("?second_response_column=nope", "second_response_column"),
    ("?second_response_column=messages", "second_response_column"),  # a chat, not text
    ("?second_response_column=" + "x" * 201, "second_response_column"),
    ("", "second_response_column"),
    ("?second_response_column=answer_b&prompt_column=answer_b", "second_response_column"),  # twice
])
def test_a_bad_column_to_serve_is_refused_naming_it(client, scientist, project, version, judge, query, field):
    client.force_login(scientist)
    refused = client.get(urls(project, judge.pk, version)[0].split("?")[0] + query)
    assert refused.status_code == 400, refused.content
    assert refused.json().get("field") == field or field in refused.json()


@pytest.mark.django_db
def test_responses_are_served_blind_in_an_order_of_each_persons_own_with_html_shown_as_text(
        client, owner, scientist, project, judge):
    rows = [(f"question {i}", f"<script>alert({i})</script> first", {"answer_b": f"second {i}", "score": i})
            for i in range(16)]
    version = make_version(project, owner, rows=rows)
    next_url, _ = urls(project, judge.pk, version)
    orders = {}
    for user in (scientist, owner):
        client.force_login(user)
        row = client.get(next_url).json()["row"]
        assert "<script>" not in row["a_html"] + row["b_html"] and "&lt;script&gt;" in row["a_html"] + row["b_html"]
        assert "answer_b" not in str(row) and "response" not in str(row)
        orders[user.pk] = [shown_swapped(user, judge, version, p, COLUMNS) for p in range(16)]
        # The same person sees a row in the same order each time it is served.
        assert client.get(next_url).json()["row"]["position"] is not None
        assert orders[user.pk] == [shown_swapped(user, judge, version, p, COLUMNS) for p in range(16)]
    # Random to each person: sixteen rows are not all in one order, nor the same for two people.
    assert len(set(orders[scientist.pk])) == 2 and orders[scientist.pk] != orders[owner.pk]


@pytest.mark.django_db
def test_the_rows_with_fewest_preferences_come_first(client, owner, scientist, admin, project, version, judge):
    for user, positions in ((owner, (0, 1, 2)), (admin, (0, 1))):
        client.force_login(user)
        for position in positions:
            assert post(client, urls(project, judge.pk, version)[1],
                        {"position": position, "choice": "tie", **COLUMNS}).status_code == 201
    client.force_login(scientist)
    served = choose_all(client, project, judge.pk, version, {p: "tie" for p in range(4)})
    order = [row["position"] for row in served]
    assert order[:2] == [3, 2] and sorted(order[2:]) == [0, 1]  # none, one, then the two with two each


@pytest.mark.django_db
def test_who_may_choose_between_a_versions_responses(client, owner, admin, scientist, annotator, viewer, outsider,
                                                     project, version, judge):
    next_url, submit_url = urls(project, judge.pk, version)
    check_who_may_judge_rows(client, owner=owner, admin=admin, scientist=scientist, annotator=annotator, viewer=viewer,
                             outsider=outsider, version=version, next_url=next_url, submit_url=submit_url,
                             body={"position": 0, "choice": "b", **COLUMNS})
    assert Preference.objects.count() == 4


@pytest.mark.django_db
def test_another_projects_version_or_judge_answers_404_and_a_pointwise_judge_is_refused(
        client, scientist, outsider, project, other_project, version, judge):
    theirs = make_version(other_project, outsider, name="Theirs")
    their_judge = Judge.objects.create(project=other_project, name="Theirs", rubric=PAIRWISE,
                                       local_model=placeholder_model(other_project))
    client.force_login(scientist)
    for scope in [(project, judge.pk, theirs), (project, their_judge.pk, version),
                  (other_project, their_judge.pk, theirs), (other_project, judge.pk, version)]:
        next_url, choose_url = urls(*scope)
        assert client.get(next_url).status_code == 404
        missing = post(client, choose_url, {"position": 0, "choice": "a", **COLUMNS})
        assert missing.status_code == 404 and b"Theirs" not in missing.content
    pointwise = Judge.objects.create(project=project, name="Points", rubric=POINTWISE, local_model=judge.local_model)
    next_url, choose_url = urls(project, pointwise.pk, version)
    for refused in (client.get(next_url), post(client, choose_url, {"position": 0, "choice": "a", **COLUMNS})):
        assert refused.status_code == 409
        assert refused.json()["detail"] == ("“Points” scores one response; people choose between two responses for "
                                            "a pairwise judge.")
    assert not Preference.objects.exists()


@pytest.mark.django_db
def test_the_choosing_page_asks_the_same_policy(client, scientist, annotator, outsider, project, other_project,
                                                version, judge):
    page = f"/projects/{project.pk}/judges/{judge.pk}/versions/{version.pk}/prefer/{QUERY}"
    client.force_login(scientist)
    shown_page = client.get(page)
    assert shown_page.status_code == 200 and b'data-second-response-column="answer_b"' in shown_page.content
    hostile = client.get(page.replace("answer_b", "%3Cscript%3Ealert(1)%3C/script%3E"))
    assert b"<script>alert(1)" not in hostile.content and b"&lt;script&gt;alert(1)" in hostile.content
    theirs = make_version(other_project, outsider, name="Theirs")
    missing = client.get(f"/projects/{project.pk}/judges/{judge.pk}/versions/{theirs.pk}/prefer/")
    assert missing.status_code == 404 and b"Theirs" not in missing.content
    client.force_login(annotator)  # votes, but may not read the dataset
    assert client.get(page).status_code == 403
    client.force_login(outsider)
    assert client.get(page).status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize(("change", "constraint"), [
    # the same person, row, columns and judge twice (SQLite names the columns, PostgreSQL the constraint)
    ({}, "preference_unique_rater|UNIQUE constraint failed: evaluation_preference.judge_id"),
    ({"position": 1, "choice": "both"}, "preference_choice"),
    ({"position": 1, "second_response_column": "response"}, "preference_two_columns"),
    ({"position": 1, "prompt_column": ""}, "preference_two_columns"),
])
def test_the_database_keeps_one_sane_preference_per_person_row_and_columns(scientist, version, judge, change,
                                                                           constraint):
    from django.db import IntegrityError, transaction

    row = {"judge": judge, "dataset_version": version, "position": 0, "rater": scientist, "choice": "first",
           "swapped": False, **COLUMNS}
    Preference.objects.create(**row)
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        Preference.objects.create(**{**row, **change})
    assert Preference.objects.count() == 1
