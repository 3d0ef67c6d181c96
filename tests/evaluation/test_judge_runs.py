"""Judge runs end to end: a scripted judge (tests/evaluation/fixed_answer_server.py, its own
process, the real OpenAI protocol) registered as a provider, a real `inference` Celery worker
running the job, and every figure checked against values worked out by hand."""

import json
import re

import pytest

from apps.comparison.models import Comparison, Output
from apps.evaluation.models import JudgeRun, Verdict
from apps.providers.models import Provider
from tests.comparison.factories import make_comparison, placeholder_model
from tests.conftest import wait_for
from tests.evaluation.fixtures import vote
from tests.factories import MembershipFactory, UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

PAIRWISE = {"kind": "pairwise", "criteria": [{"name": "helpfulness", "description": "answers the question"}]}
POINTWISE = {"kind": "pointwise", "criteria": [{"name": "correct", "scale": "pass_fail"},
                                               {"name": "clarity", "scale": "1-5"}]}
PAIR_TEXTS = [("Paris.", "The capital of France is Paris."), ("Berlin is the capital.", "Bonn."),
              ("Rome.", "Madrid is the capital of Spain."), ("Four.", "Five.")]


def post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


def shown(a: str, b: str) -> str:
    return re.escape(f"[Response A]\n{a}\n\n[Response B]\n{b}") + "$"


def winner(w: str) -> dict:
    return {"content": json.dumps({"winner": w, "reason": "scripted"})}


def pair_comparison(project, owner) -> Comparison:
    comparison = make_comparison(project, owner, models=[placeholder_model(project, "Alpha"),
                                                         placeholder_model(project, "Beta")],
                                 prompts=[f"question {i}" for i in range(len(PAIR_TEXTS))])
    for i, (alpha, beta) in enumerate(PAIR_TEXTS):
        Output.objects.filter(comparison=comparison, prompt__position=i, contestant__position=0).update(text=alpha)
        Output.objects.filter(comparison=comparison, prompt__position=i, contestant__position=1).update(text=beta)
    return comparison


def make_judge(client, project, rubric, name="Scripted judge"):
    made = post(client, f"/api/projects/{project.pk}/judges/", {"name": name, "rubric": rubric,
                                                                 "provider_model": "Scripted/judge-1",
                                                                 "max_tokens": 64})
    assert made.status_code == 201, made.content
    return made.json()


def launch_and_wait(client, project, judge, comparison, timeout=120):
    url = f"/api/projects/{project.pk}/judges/{judge['id']}/"
    estimate = post(client, url + "estimate/", {"comparison": comparison.pk})
    assert estimate.status_code == 200, estimate.content
    launched = post(client, url + "runs/", {"comparison": comparison.pk})
    assert launched.status_code == 201, launched.content
    run_url = f"/api/projects/{project.pk}/judge-runs/{launched.json()['id']}/"
    return estimate.json(), wait_for(lambda: (r := client.get(run_url).json())["state"] in ("succeeded", "failed",
                                                                                          "cancelled") and r,
                                     timeout=timeout, interval=0.3, what="the judge run to end")


def test_a_pairwise_judge_records_position_consistency_verbosity_and_agreement_with_votes(
        client, scientist, owner, project, judge_provider, scripted_judge, inference_worker):
    comparison = pair_comparison(project, owner)
    (p0a, p0b), (p1a, p1b), (p2a, p2b), (p3a, p3b) = PAIR_TEXTS
    scripted_judge.script([
        {"pattern": shown(p0a, p0b), **winner("B")}, {"pattern": shown(p0b, p0a), **winner("A")},  # Beta both times
        {"pattern": shown(p1a, p1b), **winner("A")}, {"pattern": shown(p1b, p1a), **winner("A")},  # position only
        {"pattern": shown(p2a, p2b), **winner("tie")}, {"pattern": shown(p2b, p2a), **winner("tie")},
        {"pattern": shown(p3a, p3b), "content": "I think A is better."},  # not JSON
        {"pattern": shown(p3b, p3a), "content": json.dumps({"winner": "A"})},  # JSON, but no reason
    ])
    client.force_login(scientist)
    judge = make_judge(client, project, PAIRWISE)
    estimate, run = launch_and_wait(client, project, judge, comparison)
    assert estimate["calls"] == 8 and estimate["items"] == 4 and estimate["max_completion_tokens"] == 8 * 64
    assert run["state"] == "succeeded", run["error"]
    assert run["calls_done"] == run["calls_total"] == 8
    assert len(scripted_judge.requests()) == 8
    assert {r["model"] for r in scripted_judge.requests()} == {"judge-1"}

    summary = run["summary"]
    assert summary["calls"] == 8 and summary["unparseable"] == 2 and summary["unparseable_answers"] == 2
    assert summary["prompt_tokens"] == 80 and summary["completion_tokens"] == 40  # 10 + 5 a call
    assert summary["judged"] == 3 and summary["consistent"] == 2 and summary["position_consistency"] == 0.6667
    assert summary["a_rate"] == 0.75  # decisive answers: B, A, A, A
    assert summary["matchups"] == [{"first": 0, "second": 1, "first_wins": 0, "second_wins": 1, "ties": 1,
                                    "inconsistent": 1, "unparseable": 1}]
    assert summary["verbosity"] == {"decisive": 1, "with_length_difference": 1, "longer_won": 1,
                                    "longer_won_rate": 1.0, "mean_length_difference": 25.0}  # 31 − 6 characters
    unreadable = Verdict.objects.filter(run_id=run["id"], answer__isnull=True)
    assert sorted(v.raw for v in unreadable) == ['I think A is better.', '{"winner": "A"}']
    assert all(v.parse_error for v in unreadable)

    # Item 3: agreement with the people who voted blind on the same pairs (worked out in
    # tests/workers/test_judging.py::test_cohen_kappa_by_hand for the judge's side).
    u1, u2 = (UserFactory(username=name) for name in ("ursula", "victor"))
    for user in (u1, u2):
        MembershipFactory(project=project, user=user, role="annotator")
    for voter, prompt, choice in [(u1, 0, "second"), (u2, 0, "second"), (u1, 1, "first"), (u2, 1, "tie"),
                                  (u1, 2, "tie"), (u2, 2, "first"), (u1, 3, "first")]:
        vote(comparison, voter, prompt, choice)
    agreement = client.get(f"/api/projects/{project.pk}/judge-runs/{run['id']}/").json()["agreement"]
    for side in ("judge_vs_people", "people_vs_people"):  # a bootstrap interval around each kappa
        low, high = agreement[side].pop("kappa_ci")
        assert low <= agreement[side]["kappa"] <= high
    # judge: second, tie (inconsistent), tie; pair 3 unreadable is left out: 6 judge-vs-person items,
    # 4 agree; expected (2·2 + 4·2)/36 = 1/3; kappa (2/3 − 1/3)/(2/3) = 0.5.
    # Confusion: the people's label (row) against the judge's (column).
    assert agreement["judge_vs_people"] == {"items": 6, "kappa": 0.5, "agreement": 0.6667, "confusion": {
        "first": {"first": 0, "second": 0, "tie": 2}, "second": {"first": 0, "second": 2, "tie": 0},
        "tie": {"first": 0, "second": 0, "tie": 2}}}
    # people: (second, second), (first, tie), (tie, first): 1 of 3 agree, expected 1/3, kappa 0.
    assert agreement["people_vs_people"] == {"items": 3, "kappa": 0.0, "agreement": 0.3333, "confusion": {
        "first": {"first": 0, "second": 0, "tie": 1}, "second": {"first": 0, "second": 1, "tie": 0},
        "tie": {"first": 1, "second": 0, "tie": 0}}}
    assert agreement["pairs_with_votes"] == 4 and agreement["pairs_judged_and_voted"] == 3
    # The project's default threshold asks for 20 items: 6 are too few, so not calibrated.
    assert agreement["calibration"] == {"calibrated": False, "min_kappa": 0.6, "min_correlation": 0.6, "min_items": 20,
                                        "reason": "6 items judged and voted on; the project asks for at least 20"}
    assert agreement["ratings"] is None  # people rate outputs for pointwise judges only

    # On the comparison's leaderboard the judge is one more voter, apart from the people: its
    # verdicts second (Beta), tie (inconsistent), tie; the unreadable pair is no vote.
    board = client.get(f"/api/comparisons/{comparison.pk}/leaderboard/").json()
    assert board["total_votes"] == 7  # the people's board: their votes only
    (judge_board,) = board["judges"]
    assert judge_board["run"] == run["id"] and judge_board["name"] == "Scripted judge"
    assert judge_board["calibration"]["calibrated"] is False and judge_board["agreement"]["kappa"] == 0.5
    standings = {s["name"]: s for s in judge_board["board"]["standings"]}
    assert judge_board["board"]["total_votes"] == 3
    assert (standings["Beta"]["wins"], standings["Beta"]["losses"], standings["Beta"]["ties"]) == (1, 0, 2)
    assert (standings["Alpha"]["wins"], standings["Alpha"]["losses"], standings["Alpha"]["ties"]) == (0, 1, 2)
    assert standings["Beta"]["rank"] == 1

    # The project lowers its threshold (project.edit): 6 items and kappa 0.5 now pass.
    url = f"/api/projects/{project.pk}/judge-calibration/"
    assert client.patch(url, {"min_kappa": 0.5}, content_type="application/json").status_code == 403  # a scientist
    client.force_login(owner)
    changed = client.patch(url, {"min_kappa": 0.5, "min_items": 6}, content_type="application/json")
    assert changed.status_code == 200 and changed.json() == {"min_kappa": 0.5, "min_correlation": 0.6, "min_items": 6}
    agreement = client.get(f"/api/projects/{project.pk}/judge-runs/{run['id']}/").json()["agreement"]
    assert agreement["calibration"] == {"calibrated": True, "reason": "", "min_kappa": 0.5, "min_correlation": 0.6,
                                        "min_items": 6}


def test_a_pointwise_judge_scores_each_output_and_counts_unparseable_answers(
        client, scientist, owner, project, judge_provider, scripted_judge, inference_worker):
    comparison = make_comparison(project, owner, models=[placeholder_model(project, "Alpha"),
                                                         placeholder_model(project, "Beta")])

    def scores(correct, clarity):
        return {"content": json.dumps({"correct": {"score": correct, "reason": "r"},
                                       "clarity": {"score": clarity, "reason": "r"}})}

    fenced = "```json\n" + scores("pass", 3)["content"] + "\n```"
    scripted_judge.script([
        {"pattern": r"\[Response\]\nAlpha says 0$", **scores("pass", 4)},
        {"pattern": r"\[Response\]\nAlpha says 1$", **scores("fail", 2)},
        {"pattern": r"\[Response\]\nAlpha says 2$", **scores("pass", 5)},
        {"pattern": r"\[Response\]\nBeta says 0$", **scores("pass", 3)},
        {"pattern": r"\[Response\]\nBeta says 1$", "content": fenced},  # fenced: not read, counted
        {"pattern": r"\[Response\]\nBeta says 2$", **scores("fail", 1)},
    ])
    client.force_login(scientist)
    judge = make_judge(client, project, POINTWISE)
    estimate, run = launch_and_wait(client, project, judge, comparison)
    assert estimate["calls"] == 6
    assert run["state"] == "succeeded", run["error"]
    summary = run["summary"]
    assert summary["unparseable"] == 1 and summary["models"] == {"0": "Alpha", "1": "Beta"}
    alpha, beta = summary["columns"]["0"], summary["columns"]["1"]
    assert alpha == {"judged": 3, "unparseable": 0, "criteria": {"correct": {"pass_rate": 0.6667, "n": 3},
                                                                 "clarity": {"mean": 3.6667, "n": 3}}}
    assert beta == {"judged": 2, "unparseable": 1, "criteria": {"correct": {"pass_rate": 0.5, "n": 2},
                                                                "clarity": {"mean": 2.0, "n": 2}}}
    assert run["agreement"]["pairs_with_votes"] == 0 and run["agreement"]["judge_vs_people"]["items"] == 0

    # Agreement with blind votes: the judge prefers, of a voted pair, the output it scored higher
    # (each criterion on 0..1, averaged). Prompt 0: Alpha (pass, 4) 0.875 over Beta (pass, 3) 0.75;
    # prompt 1: Beta's answer unreadable, left out; prompt 2: Alpha 1.0 over Beta (fail, 1) 0.0.
    u1, u2 = (UserFactory(username=name) for name in ("ursula", "victor"))
    for user in (u1, u2):
        MembershipFactory(project=project, user=user, role="annotator")
    for voter, prompt, choice in [(u1, 0, "first"), (u2, 0, "second"), (u1, 1, "first"), (u1, 2, "first"),
                                  (u2, 2, "tie")]:
        vote(comparison, voter, prompt, choice)
    agreement = client.get(f"/api/projects/{project.pk}/judge-runs/{run['id']}/").json()["agreement"]
    # (people, judge): (first, first), (second, first), (first, first), (tie, first): 2 of 4 agree;
    # the judge always says first, so chance agreement is the people's share of first, 2/4: kappa 0.
    judge_side = agreement["judge_vs_people"]
    assert (judge_side["items"], judge_side["agreement"], judge_side["kappa"]) == (4, 0.5, 0.0)
    assert judge_side["confusion"] == {"first": {"first": 2, "second": 0, "tie": 0},
                                       "second": {"first": 1, "second": 0, "tie": 0},
                                       "tie": {"first": 1, "second": 0, "tie": 0}}
    # people: (first, second) on prompt 0, (first, tie) on prompt 2: none agree; expected 0: kappa 0.
    people = agreement["people_vs_people"]
    assert (people["items"], people["agreement"], people["kappa"]) == (2, 0.0, 0.0)
    assert agreement["pairs_with_votes"] == 3 and agreement["pairs_judged_and_voted"] == 2
    assert agreement["calibration"]["calibrated"] is False

    # On the leaderboard, apart: Alpha preferred on prompts 0 and 2, two verdicts.
    (judge_board,) = client.get(f"/api/comparisons/{comparison.pk}/leaderboard/").json()["judges"]
    assert judge_board["kind"] == "pointwise" and judge_board["board"]["total_votes"] == 2
    standings = {s["name"]: s for s in judge_board["board"]["standings"]}
    assert (standings["Alpha"]["wins"], standings["Beta"]["losses"], standings["Alpha"]["rank"]) == (2, 2, 1)


@pytest.mark.parametrize(("failure", "error"), [
    ({"status": 500, "message": "the judge model crashed"}, "Scripted answered 500: the judge model crashed"),
    ({**winner("A"), "delay_s": 3}, "Scripted did not answer within 1 s."),  # past the provider's timeout
], ids=["answers-500", "times-out"])
def test_a_provider_that_fails_is_retried_then_fails_the_run_with_its_message_keeping_no_half_item(
        client, scientist, owner, project, judge_provider, scripted_judge, inference_worker, failure, error):
    Provider.objects.filter(pk=judge_provider.pk).update(timeout_s=1)
    comparison = pair_comparison(project, owner)
    (p0a, p0b), (p1a, p1b) = PAIR_TEXTS[:2]
    scripted_judge.script([
        {"pattern": shown(p0a, p0b), **winner("B")}, {"pattern": shown(p0b, p0a), **winner("A")},
        {"pattern": shown(p1a, p1b), **winner("A")},
        {"pattern": shown(p1b, p1a), **failure},
    ])
    client.force_login(scientist)
    judge = make_judge(client, project, PAIRWISE)
    _, run = launch_and_wait(client, project, judge, comparison)
    assert run["state"] == "failed"
    assert run["error"] == error
    # The four pairs are asked together (JUDGE_CONCURRENCY): each in both orders, and pair 1's
    # swapped order three times (the client's two retries with backoff): 2 + (1 + 3) + 2 + 2.
    assert len(scripted_judge.requests()) == 10
    assert sum(r["user"].endswith(f"[Response A]\n{p1b}\n\n[Response B]\n{p1a}") for r in scripted_judge.requests()) == 3
    stored = {}
    for item, swapped in Verdict.objects.filter(run_id=run["id"]).values_list("item", "swapped"):
        stored.setdefault(item, []).append(swapped)
    failed_item = f"p{comparison.prompts.get(position=1).pk}:"
    assert len(stored) == 3 and not any(item.startswith(failed_item) for item in stored)  # nothing of pair 1
    assert all(sorted(orders) == [False, True] for orders in stored.values())  # the others whole
    assert run["summary"] == {}
    assert JudgeRun.objects.get(pk=run["id"]).summary == {}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_local_judge_answers_through_the_inference_worker_constrained_to_its_rubrics_schema(
        client, scientist, owner, project, demo_model, inference_worker):
    comparison = make_comparison(project, owner, models=[demo_model, placeholder_model(project, "Beta")],
                                 prompts=["What is the capital of France?"])
    client.force_login(scientist)
    made = post(client, f"/api/projects/{project.pk}/judges/", {"name": "Demo judge", "rubric": POINTWISE,
                                                                 "local_model": demo_model.pk, "max_tokens": 96})
    assert made.status_code == 201, made.content
    _, run = launch_and_wait(client, project, made.json(), comparison, timeout=400)
    assert run["state"] == "succeeded", run["error"]
    assert run["calls_done"] == 2 and run["summary"]["calls"] == 2
    verdicts = list(Verdict.objects.filter(run_id=run["id"]))
    assert all(v.raw and v.completion_tokens > 0 and v.prompt_tokens > 0 for v in verdicts)
    # A 135M model does not write the verdict's JSON by itself (tests/workers/test_constrained_decoding.py):
    # its answers are constrained to the rubric's schema as they are generated, so each one parses.
    assert all(v.answer is not None and not v.parse_error for v in verdicts), [v.raw for v in verdicts]
    assert all(v.answer["correct"]["score"] in ("pass", "fail") and 1 <= v.answer["clarity"]["score"] <= 5
               for v in verdicts)
    columns = run["summary"]["columns"]
    assert sum(c["judged"] for c in columns.values()) == 2 and run["summary"]["unparseable"] == 0


def test_a_local_model_run_fills_the_batchers_rows_and_a_provider_run_keeps_judge_concurrency_in_flight(settings):
    from apps.evaluation.runner import items_in_flight

    settings.INFERENCE_MAX_BATCH_SIZE, settings.JUDGE_CONCURRENCY = 32, 8
    assert items_in_flight({"local_model": 1}) == 32
    assert items_in_flight({"local_model": 1}, calls_per_item=2) == 16  # a pair is asked in both orders
    assert items_in_flight({"provider_model": 1}, calls_per_item=2) == 8  # the provider's requests in flight
    settings.INFERENCE_MAX_BATCH_SIZE = 1
    assert items_in_flight({"local_model": 1}, calls_per_item=2) == 1  # never none
