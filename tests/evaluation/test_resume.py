"""A judge run whose worker was lost is taken over and goes on with the items not yet stored:
the scripted judge is asked only for those, and the summary covers every item."""

import json

import pytest

from apps.evaluation import services
from apps.evaluation.models import JudgeRun, Verdict
from apps.evaluation.runner import run_judge_job
from tests.comparison.factories import make_comparison, placeholder_model

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_a_run_taken_over_after_its_worker_died_judges_only_what_is_missing(
        settings, scientist, owner, project, judge_provider, scripted_judge):
    settings.JUDGE_CONCURRENCY = 1  # the test's own transaction: calls from this thread only
    comparison = make_comparison(project, owner, models=[placeholder_model(project, "Alpha"),
                                                         placeholder_model(project, "Beta")])
    scripted_judge.script([], default={"content": json.dumps({"winner": "tie", "reason": "alike"})})
    judge = services.judge_create(user=scientist, project=project, name="Scripted",
                                  rubric={"kind": "pairwise", "criteria": [{"name": "helpfulness"}]},
                                  provider_model="Scripted/judge-1", max_tokens=32)
    run = services.judge_run_start(user=scientist, judge=judge, comparison=comparison.pk)  # not sent: no commit
    first_prompt = comparison.prompts.get(position=0)
    alpha, beta = comparison.contestants.order_by("position")
    for swapped in (False, True):  # what the lost worker had stored: pair 0 in both orders
        Verdict.objects.create(run=run, item=f"p{first_prompt.pk}:c{alpha.pk}:c{beta.pk}", swapped=swapped,
                               prompt=first_prompt, first=alpha, second=beta, raw="stored",
                               answer={"winner": "A" if swapped else "B", "reason": "stored before the loss"})
    JudgeRun.objects.filter(pk=run.pk).update(state="running", runs=1, worker="lost@host", heartbeat_at=None)

    run_judge_job(run.pk, worker="b@host")

    run.refresh_from_db()
    assert (run.state, run.runs, run.worker) == ("succeeded", 2, "b@host")
    assert len(scripted_judge.requests()) == 4  # pairs 1 and 2, both orders; pair 0 not asked again
    assert not any(f"[Prompt]\n{first_prompt.text}\n" in r["user"] for r in scripted_judge.requests())
    assert run.calls_done == run.calls_total == 6
    assert run.summary["matchups"] == [{"first": 0, "second": 1, "first_wins": 0, "second_wins": 1, "ties": 2,
                                        "inconsistent": 0, "unparseable": 0}]


def test_a_run_over_a_version_taken_over_judges_only_the_rows_not_stored(
        settings, scientist, owner, project, judge_provider, scripted_judge):
    from tests.evaluation.test_judge_dataset_runs import make_version

    settings.JUDGE_CONCURRENCY = 1
    version = make_version(project, owner)  # 4 rows with a response and answer_b
    scripted_judge.script([], default={"content": json.dumps({"winner": "tie", "reason": "alike"})})
    judge = services.judge_create(user=scientist, project=project, name="Scripted",
                                  rubric={"kind": "pairwise", "criteria": [{"name": "helpfulness"}]},
                                  provider_model="Scripted/judge-1", max_tokens=32)
    run = services.judge_run_start(user=scientist, judge=judge, version=version.pk, prompt_column="prompt",
                                   response_column="response", second_response_column="answer_b")
    for swapped in (False, True):  # what the lost worker had stored: row 0 in both orders
        Verdict.objects.create(run=run, item="r0", swapped=swapped, position=0, raw="stored",
                               answer={"winner": "A" if swapped else "B", "reason": "stored before the loss"})
    JudgeRun.objects.filter(pk=run.pk).update(state="running", runs=1, worker="lost@host", heartbeat_at=None)

    run_judge_job(run.pk, worker="b@host")

    run.refresh_from_db()
    assert (run.state, run.runs) == ("succeeded", 2)
    assert len(scripted_judge.requests()) == 6  # rows 1 to 3, both orders; row 0 not asked again
    assert not any("capital of France?" in r["user"] for r in scripted_judge.requests())
    assert run.calls_done == run.calls_total == 8
    assert run.summary["matchups"] == [{"first": 0, "second": 1, "first_wins": 0, "second_wins": 1, "ties": 3,
                                        "inconsistent": 0, "unparseable": 0}]
    assert run.summary["win_rate"] == 0.375  # (0 + 0.5 × 3) / 4
