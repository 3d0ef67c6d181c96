"""Judge runs over a dataset version's responses, end to end: a scripted judge
(tests/evaluation/fixed_answer_server.py, its own process, the real OpenAI protocol) registered as a
provider, a real `inference` Celery worker running the job, every figure checked against values
worked out by hand; a cancelled run; every bad input refused naming its field; who may."""

import json

import pytest

from apps.datasets.models import Dataset, DatasetRow, DatasetVersion
from apps.evaluation.models import JudgeRun, Verdict
from tests.conftest import wait_for
from tests.evaluation.test_judge_runs import PAIRWISE, POINTWISE, make_judge, post, shown, winner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

# (prompt, response, metadata): "answer_b" is the second response a pairwise judge compares.
ROWS = [
    ("capital of France?", "Paris.", {"answer_b": "The capital of France is Paris.", "score": 1}),
    ("capital of Germany?", "Berlin is the capital.", {"answer_b": "Bonn.", "score": 2}),
    ("capital of Italy?", "Rome.", {"answer_b": "Madrid is the capital of Spain.", "score": 3}),
    ("two plus two?", "Four.", {"answer_b": "Five.", "score": 4}),
    ("left out: no response", None, {"answer_b": "Nothing.", "score": 5}),
]


def make_version(project, owner, rows=ROWS, name="Answers") -> DatasetVersion:
    """A ready version as an import writes it: prompt and response roles, two metadata keys (one
    of text, one of numbers), and a chat column."""
    dataset = Dataset.objects.create(project=project, name=name, created_by=owner)
    version = DatasetVersion.objects.create(
        dataset=dataset, number=1, status="ready", author=owner, row_count=len(rows), content_hash="d" * 64,
        schema={"roles": {"question": "prompt", "answer": "response", "chat": "messages"},
                "metadata_keys": ["answer_b", "score"]})
    DatasetRow.objects.bulk_create([
        DatasetRow(version=version, position=i, row_hash=f"{i:064d}", prompt=p, response=r, metadata=m,
                   messages=[{"role": "user", "content": p}]) for i, (p, r, m) in enumerate(rows)])
    return version


def body(version, **fields) -> dict:
    return {"version": version.pk, "prompt_column": "prompt", "response_column": "response", **fields}


def launch_and_wait(client, project, judge, payload, timeout=120) -> tuple[dict, dict]:
    url = f"/api/projects/{project.pk}/judges/{judge['id']}/"
    estimate = post(client, url + "estimate/", payload)
    assert estimate.status_code == 200, estimate.content
    launched = post(client, url + "runs/", payload)
    assert launched.status_code == 201, launched.content
    run_url = f"/api/projects/{project.pk}/judge-runs/{launched.json()['id']}/"
    return estimate.json(), wait_for(lambda: (r := client.get(run_url).json())["state"] in (
        "succeeded", "failed", "cancelled") and r, timeout=timeout, interval=0.3, what="the judge run to end")


def test_a_pointwise_judge_scores_each_rows_response_and_counts_unparseable_answers(
        client, scientist, owner, project, judge_provider, scripted_judge, inference_worker):
    version = make_version(project, owner)

    def scores(correct, clarity):
        return {"content": json.dumps({"correct": {"score": correct, "reason": "r"},
                                       "clarity": {"score": clarity, "reason": "r"}})}

    scripted_judge.script([
        {"pattern": r"\[Response\]\nParis\.$", **scores("pass", 4)},
        {"pattern": r"\[Response\]\nBerlin is the capital\.$", **scores("pass", 5)},
        {"pattern": r"\[Response\]\nRome\.$", **scores("fail", 3)},
        {"pattern": r"\[Response\]\nFour\.$", "content": "Looks right to me."},  # not JSON: counted
    ])
    client.force_login(scientist)
    judge = make_judge(client, project, POINTWISE)
    estimate, run = launch_and_wait(client, project, judge, body(version))
    # The row without a response is left out: 4 items, one call each.
    assert estimate["calls"] == 4 and estimate["items"] == 4 and estimate["kind"] == "pointwise"
    assert estimate["max_completion_tokens"] == 4 * 64
    assert run["state"] == "succeeded", run["error"]
    assert run["calls_done"] == run["calls_total"] == 4
    assert run["comparison"] is None and run["dataset_version"] == version.pk
    assert run["columns"] == {"prompt_column": "prompt", "response_column": "response",
                              "second_response_column": None}
    assert run["source"] == "Answers v1 (prompt → response)"
    summary = run["summary"]
    assert summary["calls"] == 4 and summary["unparseable"] == 1 and summary["models"] == {"0": "response"}
    assert summary["prompt_tokens"] == 40 and summary["completion_tokens"] == 20  # 10 + 5 a call
    assert summary["columns"]["0"] == {"judged": 3, "unparseable": 1, "criteria": {
        "correct": {"pass_rate": 0.6667, "n": 3}, "clarity": {"mean": 4.0, "n": 3}}}
    # People vote on comparisons' outputs, not on a version's rows; they rate them (test_row_ratings.py).
    assert run["agreement"]["judge_vs_people"] is None and run["agreement"]["ratings"]["ratings"] == 0
    verdicts = {v.position: v for v in Verdict.objects.filter(run_id=run["id"])}
    assert sorted(verdicts) == [0, 1, 2, 3]
    assert all(v.prompt_id is None and v.first_id is None for v in verdicts.values())
    assert verdicts[3].answer is None and verdicts[3].raw == "Looks right to me." and verdicts[3].parse_error
    # The prompt and response the judge saw came from the row.
    assert any(r["user"].endswith("capital of France?\n\n[Response]\nParis.") for r in scripted_judge.requests())
    listed = client.get(f"/api/projects/{project.pk}/judge-runs/").json()["results"]
    assert [r["id"] for r in listed] == [run["id"]] and listed[0]["comparison_name"] is None


def test_a_pairwise_judge_compares_two_response_columns_in_both_orders_with_win_rate_and_verbosity(
        client, scientist, owner, project, judge_provider, scripted_judge, inference_worker):
    version = make_version(project, owner)
    (a0, b0), (a1, b1), (a2, b2), (a3, b3) = [(r, m["answer_b"]) for _, r, m in ROWS[:4]]
    scripted_judge.script([
        {"pattern": shown(a0, b0), **winner("B")}, {"pattern": shown(b0, a0), **winner("A")},  # answer_b twice
        {"pattern": shown(a1, b1), **winner("A")}, {"pattern": shown(b1, a1), **winner("A")},  # position only
        {"pattern": shown(a2, b2), **winner("A")}, {"pattern": shown(b2, a2), **winner("B")},  # response twice
        {"pattern": shown(a3, b3), "content": "A."},  # not JSON
        {"pattern": shown(b3, a3), **winner("B")},
    ])
    client.force_login(scientist)
    judge = make_judge(client, project, PAIRWISE)
    estimate, run = launch_and_wait(client, project, judge, body(version, second_response_column="answer_b"))
    assert estimate["calls"] == 8 and estimate["items"] == 4 and estimate["kind"] == "pairwise"
    assert run["state"] == "succeeded", run["error"]
    assert run["calls_done"] == run["calls_total"] == 8 and len(scripted_judge.requests()) == 8
    summary = run["summary"]
    assert summary["models"] == {"0": "response", "1": "answer_b"}
    assert summary["calls"] == 8 and summary["unparseable"] == 1 and summary["unparseable_answers"] == 1
    # Pairs: 0 second, 1 inconsistent, 2 first, 3 unreadable (left out).
    assert summary["judged"] == 3 and summary["consistent"] == 2 and summary["position_consistency"] == 0.6667
    assert summary["a_rate"] == 0.5714  # decisive answers B, A, A, A, A, B, B: 4 of 7 picked A
    assert summary["matchups"] == [{"first": 0, "second": 1, "first_wins": 1, "second_wins": 1, "ties": 0,
                                    "inconsistent": 1, "unparseable": 1}]
    # The response column's win rate over answer_b: a win 1, a loss 0, the inconsistent pair 0.5: 1.5 / 3.
    assert summary["win_rate"] == 0.5
    # Verbosity: pair 0 went to the longer (31 − 6 = +25), pair 2 to the shorter (5 − 31 = −26).
    assert summary["verbosity"] == {"decisive": 2, "with_length_difference": 2, "longer_won": 1,
                                    "longer_won_rate": 0.5, "mean_length_difference": -0.5}
    stored = {}
    for position, swapped in Verdict.objects.filter(run_id=run["id"]).values_list("position", "swapped"):
        stored.setdefault(position, []).append(swapped)
    assert {p: sorted(s) for p, s in stored.items()} == {p: [False, True] for p in range(4)}


def test_a_running_run_cancelled_stops_after_the_item_in_hand(
        client, scientist, owner, project, judge_provider, scripted_judge, inference_worker):
    version = make_version(project, owner, rows=[(f"question {i}", f"answer {i}", {}) for i in range(40)])
    scripted_judge.script([], default={"content": "slowly", "delay_s": 0.4})
    client.force_login(scientist)
    judge = make_judge(client, project, POINTWISE)
    launched = post(client, f"/api/projects/{project.pk}/judges/{judge['id']}/runs/", body(version))
    assert launched.status_code == 201, launched.content
    url = f"/api/projects/{project.pk}/judge-runs/{launched.json()['id']}/"
    wait_for(lambda: client.get(url).json()["calls_done"] > 0, timeout=60, interval=0.05, what="a first verdict")
    assert client.post(url + "cancel/").status_code == 200
    run = wait_for(lambda: (r := client.get(url).json())["state"] in ("succeeded", "failed", "cancelled") and r,
                   timeout=60, interval=0.2, what="the run to stop")
    assert run["state"] == "cancelled" and 0 < run["calls_done"] < 40 and run["summary"] == {}
    assert 0 < Verdict.objects.filter(run_id=run["id"]).count() < 40
    assert client.post(url + "cancel/").status_code == 409


HOSTILE = "<script>alert(1)</script>'; DROP TABLE evaluation_verdict; --"


@pytest.mark.parametrize(("change", "field", "says"), [
    ({"prompt_column": "nope"}, "prompt_column", "has no column 'nope'"),
    ({"response_column": HOSTILE}, "response_column", "has no column"),
    ({"response_column": "messages"}, "response_column", "other than text"),  # a chat, not text
    ({"response_column": "score"}, "response_column", "other than text"),  # numbers
    ({"response_column": "prompt"}, "response_column", "reads already"),
    ({"response_column": ""}, "response_column", ""),
    ({"response_column": 7}, "response_column", "has no column '7'"),
    ({"response_column": "x" * 201}, "response_column", ""),
    ({"second_response_column": "answer_b"}, "second_response_column", "scores one response"),
    ({"version": "abc"}, "version", ""),
    ({"version": 10**30}, "version", ""),
    ({"version": None}, "comparison", "exactly one"),
    ({"comparison": 1}, "version", "exactly one"),
])
def test_bad_input_is_refused_naming_its_field(client, scientist, owner, project, judge_provider, change, field, says):
    version = make_version(project, owner)
    client.force_login(scientist)
    judge = make_judge(client, project, POINTWISE)
    for route in ("estimate/", "runs/"):
        refused = post(client, f"/api/projects/{project.pk}/judges/{judge['id']}/{route}", {**body(version), **change})
        assert refused.status_code == 400, refused.content
        assert field in json.dumps(refused.json()), refused.json()
        assert says in json.dumps(refused.json()).replace('\\"', '"'), refused.json()
    assert JudgeRun.objects.count() == 0


def test_a_pairwise_judge_needs_a_second_column_and_an_empty_version_has_nothing_to_judge(
        client, scientist, owner, project, judge_provider):
    client.force_login(scientist)
    pairwise = make_judge(client, project, PAIRWISE, name="Pairs")
    pointwise = make_judge(client, project, POINTWISE, name="Points")
    version = make_version(project, owner)
    refused = post(client, f"/api/projects/{project.pk}/judges/{pairwise['id']}/runs/", body(version))
    assert refused.status_code == 400 and "second_response_column" in json.dumps(refused.json())
    refused = post(client, f"/api/projects/{project.pk}/judges/{pairwise['id']}/runs/",
                   body(version, second_response_column="response"))
    assert refused.status_code == 400 and "second_response_column" in json.dumps(refused.json())
    empty = make_version(project, owner, rows=[], name="Empty")
    refused = post(client, f"/api/projects/{project.pk}/judges/{pointwise['id']}/runs/", body(empty))
    assert refused.status_code == 400 and "nothing to judge" in json.dumps(refused.json())
    assert "version" in json.dumps(refused.json())
    assert JudgeRun.objects.count() == 0


def test_who_may_estimate_and_launch_a_run_over_a_version(
        client, owner, admin, scientist, annotator, viewer, outsider, project, other_project, judge_provider):
    version = make_version(project, owner)
    client.force_login(scientist)
    judge = make_judge(client, project, POINTWISE)
    url = f"/api/projects/{project.pk}/judges/{judge['id']}/"
    for user, estimate_status, launch_status in [(owner, 200, 201), (admin, 200, 201), (scientist, 200, 201),
                                                 (viewer, 200, 403), (annotator, 403, 403), (outsider, 404, 404)]:
        client.force_login(user)
        assert post(client, url + "estimate/", body(version)).status_code == estimate_status, user
        launched = post(client, url + "runs/", body(version))
        assert launched.status_code == launch_status, (user, launched.content)
        if launch_status == 201:  # not run here: cancelled while queued
            assert client.post(f"/api/projects/{project.pk}/judge-runs/{launched.json()['id']}/cancel/").status_code \
                == 200
    # Another project's version (even one its owner may read) is not found, naming nothing of it.
    theirs = make_version(other_project, outsider, name="Theirs")
    client.force_login(scientist)
    for route in ("estimate/", "runs/"):
        missing = post(client, url + route, body(theirs))
        assert missing.status_code == 404 and b"Theirs" not in missing.content
    assert JudgeRun.objects.filter(dataset_version=theirs).count() == 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_local_judge_scores_a_versions_responses_through_the_inference_worker(
        client, scientist, owner, project, demo_model, inference_worker):
    version = make_version(project, owner, rows=[("What is the capital of France?", "Paris.", {})])
    client.force_login(scientist)
    made = post(client, f"/api/projects/{project.pk}/judges/", {"name": "Demo judge", "rubric": POINTWISE,
                                                                 "local_model": demo_model.pk, "max_tokens": 24})
    assert made.status_code == 201, made.content
    _, run = launch_and_wait(client, project, made.json(), body(version), timeout=400)
    assert run["state"] == "succeeded", run["error"]
    assert run["calls_done"] == 1 and run["summary"]["calls"] == 1
    (verdict,) = Verdict.objects.filter(run_id=run["id"])
    assert verdict.position == 0 and verdict.raw and verdict.completion_tokens > 0 and verdict.prompt_tokens > 0
    # Whatever the small model wrote, its answer is either read whole or counted, never guessed.
    assert (verdict.answer is None) == bool(verdict.parse_error)
    column = run["summary"]["columns"]["0"]
    assert column["judged"] + column["unparseable"] == 1 and run["summary"]["unparseable"] == column["unparseable"]
