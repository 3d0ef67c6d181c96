"""Fixtures of judge tests, also imported by the browser test (tests/e2e/test_judges.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from apps.comparison.models import Pair, Vote
from apps.evaluation.models import CalibrationPolicy, JudgeRun, Verdict
from apps.evaluation.selectors import summarize
from apps.providers import services as provider_services
from tests.comparison.factories import make_comparison, placeholder_model
from tests.conftest import die_with_the_test_run
from tests.factories import UserFactory


class ScriptedJudge:
    """The fixed-answer server (tests/evaluation/fixed_answer_server.py) in its own process."""

    def __init__(self, directory: Path) -> None:
        self.script_path = directory / "script.json"
        self.script([], default={"content": ""})
        self.process = subprocess.Popen([sys.executable, "-m", "tests.evaluation.fixed_answer_server",
                                         str(self.script_path)], stdout=subprocess.PIPE, text=True,
                                        cwd=settings.BASE_DIR, preexec_fn=die_with_the_test_run)
        self.port = int(self.process.stdout.readline())
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def script(self, rules: list[dict], default: dict | None = None) -> None:
        self.script_path.write_text(json.dumps({"rules": rules, "default": default or {"content": ""}}))

    def requests(self) -> list[dict]:
        log = Path(str(self.script_path) + ".log")
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)


@pytest.fixture(name="scripted_judge")
def scripted_judge_fixture(tmp_path):
    server = ScriptedJudge(tmp_path)
    yield server
    server.stop()


@pytest.fixture(name="judge_provider")
def judge_provider_fixture(site_admin, project, scripted_judge):
    """The scripted judge registered by site staff as a provider (loopback allowlisted), enabled
    for `project`: two retries, as the client's backoff goes."""
    provider_services.allowlist_add(user=site_admin, network="127.0.0.0/8", note="tests")
    provider = provider_services.provider_create(user=site_admin, name="Scripted", base_url=scripted_judge.base_url,
                                                 api_key="sk-scripted-judge-key", models=["judge-1"], max_retries=2,
                                                 timeout_s=10)
    provider_services.provider_enable(user=site_admin, provider=provider, project_id=project.pk)
    return provider


def vote(comparison, voter, prompt_position, choice):
    """A blind vote on the pair of the first two columns of a prompt: choice first/second/tie."""
    first, second = comparison.contestants.order_by("position")[:2]
    prompt = comparison.prompts.get(position=prompt_position)
    pair = Pair.objects.create(comparison=comparison, voter=voter, prompt=prompt, first=first, second=second,
                               first_on_left=True)
    winner_, loser = {"first": (first, second), "second": (second, first), "tie": (None, None)}[choice]
    Vote.objects.create(pair=pair, comparison=comparison, voter=voter, client_id=f"{voter.pk}-{prompt_position}",
                        choice={"first": "a", "second": "b", "tie": "tie"}[choice], winner=winner_, loser=loser)


def calibrate(judge, owner) -> None:
    """A finished run of the judge on a comparison people voted on, agreeing with them on every
    pair (kappa 1 over 4 items), and a project threshold of 4 items: the judge is calibrated."""
    project = judge.project
    comparison = make_comparison(project, owner, models=[placeholder_model(project, f"A {judge.pk}"),
                                                         placeholder_model(project, f"B {judge.pk}")],
                                 prompts=["q0", "q1", "q2", "q3"], name=f"Calibration {judge.pk}")
    run = JudgeRun.objects.create(project=project, judge=judge, comparison=comparison, state="succeeded",
                                  config={"rubric": judge.rubric, "max_tokens": 64}, finished_at=timezone.now())
    first, second = comparison.contestants.order_by("position")
    voter = UserFactory(username=f"voter-{judge.pk}")
    for prompt in comparison.prompts.order_by("position"):
        for contestant, score in ((first, "pass"), (second, "fail" if prompt.position < 3 else "pass")):
            Verdict.objects.create(run=run, item=f"p{prompt.pk}:c{contestant.pk}", prompt=prompt, first=contestant,
                                   answer={"correct": {"score": score, "reason": "set"}})
        vote(comparison, voter, prompt.position, "first" if prompt.position < 3 else "tie")
    CalibrationPolicy.objects.update_or_create(project=project, defaults={"min_kappa": 0.6, "min_items": 4})


def point_answer(**scores) -> dict:
    """A pointwise answer: criterion=score each, with an empty reason."""
    return {name: {"score": score, "reason": ""} for name, score in scores.items()}


def scored_run(judge, comparison, answers: dict) -> JudgeRun:
    """A succeeded run of a pointwise judge over the comparison, its verdicts as given (the run
    itself is tested with a worker in test_judge_runs.py): answers[(prompt position, column)] =
    the judge's answer, or None for an unparseable one."""
    run = JudgeRun.objects.create(project=judge.project, judge=judge, comparison=comparison, state="succeeded",
                                  config={"rubric": judge.rubric, "model": judge.model_label})
    columns = {c.position: c for c in comparison.contestants.all()}
    prompts = {p.position: p for p in comparison.prompts.all()}
    Verdict.objects.bulk_create([
        Verdict(run=run, item=f"p{prompts[p].pk}:c{columns[c].pk}", prompt=prompts[p], first=columns[c], answer=answer,
                parse_error="" if answer else "not JSON") for (p, c), answer in answers.items()])
    run.summary = summarize(run)  # as the worker writes it when a run succeeds
    run.save(update_fields=["summary"])
    return run


def scored_version_run(judge, version, answers: dict, prompt_column="prompt", response_column="response",
                       second_response_column: str | None = None) -> JudgeRun:
    """A succeeded run of the judge over a version's rows, its verdicts as given (the run itself is
    tested with a worker in test_judge_dataset_runs.py): answers[row position] = the judge's
    answer, or None for an unparseable one; a pairwise judge's (reading second_response_column
    too) answers[(row position, swapped)]."""
    columns = {"prompt_column": prompt_column, "response_column": response_column}
    if second_response_column:
        columns["second_response_column"] = second_response_column
    run = JudgeRun.objects.create(project=judge.project, judge=judge, dataset_version=version, state="succeeded",
                                  finished_at=timezone.now(),
                                  config={"rubric": judge.rubric, "model": judge.model_label, **columns})
    Verdict.objects.bulk_create([
        Verdict(run=run, item=f"r{position}", position=position, swapped=swapped, answer=answer,
                parse_error="" if answer else "not JSON")
        for key, answer in answers.items() for position, swapped in [key if isinstance(key, tuple) else (key, False)]])
    run.summary = summarize(run)  # as the worker writes it when a run succeeds
    run.save(update_fields=["summary"])
    return run


# Positions no row of tests.evaluation.test_judge_dataset_runs.ROWS answers to, for people rating or
# choosing on it: (the request's change, the field refused).
BAD_POSITIONS = [
    ({"position": 4}, "position"),  # the row without a response
    ({"position": 99}, "position"),  # past the last row
    ({"position": -1}, "position"),
    ({"position": 2**40}, "position"),
    ({"position": "first"}, "position"),
    ({"position": None}, "position"),
]


def judge_all(client, next_url: str, submit_url: str, *, key: str, counted: str, body) -> list[dict]:
    """Rate (or choose on) through the API whatever `next_url` serves until nothing is left, each
    served item as body(item) gives it (a POST to `submit_url`, created: 201). key: where the
    response holds the item ("output", "row"); counted: where it counts what this person did
    ("rated", "chosen"), checked to go up by one each time. Returns the items served, in order."""
    served = []
    while True:
        found = client.get(next_url)
        assert found.status_code == 200, found.content
        found = found.json()
        assert found[counted] == len(served)
        if found[key] is None:
            assert found["remaining"] == 0
            return served
        made = client.post(submit_url, json.dumps(body(found[key])), content_type="application/json")
        assert made.status_code == 201, made.content
        served.append(found[key])


def check_who_may_judge_rows(client, *, owner, admin, scientist, annotator, viewer, outsider, version, next_url: str,
                             submit_url: str, body: dict) -> None:
    """Who may rate (or choose on) a version's rows, through the API: what voters need and
    dataset.view on the version's dataset. The owner, an admin and a scientist may (201); a viewer
    sees the version but does not vote, an annotator votes but may not read the dataset until
    granted that one dataset (403 naming the permission); an outsider does not see the project (404)."""
    from apps.projects import services as project_services

    for user, expected in [(owner, 201), (admin, 201), (scientist, 201), (viewer, 403), (annotator, 403),
                           (outsider, 404)]:
        client.force_login(user)
        assert client.get(next_url).status_code == (200 if expected == 201 else expected), user
        made = client.post(submit_url, json.dumps(body), content_type="application/json")
        assert made.status_code == expected, (user, made.content)
    client.force_login(viewer)
    assert "compare.vote" in client.post(submit_url, json.dumps(body), content_type="application/json").json()["detail"]
    client.force_login(annotator)
    refused = client.post(submit_url, json.dumps(body), content_type="application/json")
    assert refused.json()["missing_permission"] == "dataset.view"
    project_services.grant_create(actor=owner, obj=version.dataset, username=annotator.username,
                                  permission="dataset.view")
    assert client.post(submit_url, json.dumps(body), content_type="application/json").status_code == 201
