"""Eval suites: defined through the API (each bad input refused naming its field), run by a real
`inference` worker on the tiny model and an adapter of it, and gating an alias's moves."""

import json

import pytest

from apps.evaluation.models import EvalItem, EvalRun, EvalSuite
from tests.comparison.factories import placeholder_model
from tests.conftest import wait_for
from tests.training.fixtures import QA, make_version


def post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


def suite_body(version, **fields) -> dict:
    return {"name": "QA check", "dataset_version": version.pk, "split": "validation",
            "metrics": [{"metric": "exact_match", "threshold": 0.5}, {"metric": "rouge_l"}], **fields}


@pytest.mark.django_db
@pytest.mark.timeout(60)
def test_a_suite_is_created_listed_and_read(client, scientist, viewer, project, owner):
    version = make_version(project, owner)
    baseline = placeholder_model(project, "Base")
    client.force_login(scientist)
    made = post(client, f"/api/projects/{project.pk}/eval-suites/",
                suite_body(version, baseline_model=baseline.pk, gate_alias="production"))
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["metrics"] == [{"metric": "exact_match", "key": "exact_match", "threshold": 0.5},
                               {"metric": "rouge_l", "key": "rouge_l", "threshold": None}]
    assert (body["split"], body["gate_alias"], body["baseline_model"]) == ("validation", "production", baseline.pk)
    client.force_login(viewer)
    assert client.get(f"/api/projects/{project.pk}/eval-suites/").json()["results"][0]["id"] == body["id"]
    assert client.get(f"/api/projects/{project.pk}/eval-suites/{body['id']}/").json()["name"] == "QA check"


@pytest.mark.django_db
@pytest.mark.timeout(60)
@pytest.mark.parametrize("change, field", [
    ({"metrics": [{"metric": "bleu"}]}, "metrics[0].metric"),
    ({"metrics": []}, "metrics"),
    ({"metrics": "exact_match"}, "metrics"),
    ({"metrics": [{"metric": "exact_match", "threshold": 2}]}, "metrics[0].threshold"),
    ({"metrics": [{"metric": "perplexity", "threshold": -1}]}, "metrics[0].threshold"),
    ({"metrics": [{"metric": "rouge_l", "threshold": "<script>"}]}, "metrics[0].threshold"),
    ({"split": "test"}, "split"),
    ({"split": "x" * 65}, "split"),
    ({"name": ""}, "name"),
    ({"name": "n" * 121}, "name"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"max_new_tokens": "many"}, "max_new_tokens"),
    ({"gate_alias": "Prod uction!"}, "gate_alias"),
    ({"gate_alias": "production", "metrics": [{"metric": "rouge_l"}]}, "metrics"),
    ({"baseline_model": 10 ** 9}, "baseline_model"),
    ({"auto_run": "sometimes"}, "auto_run"),
    ({"dataset_version": "one"}, "dataset_version"),
])
def test_bad_suites_are_refused_with_400_naming_the_field(client, scientist, project, owner, change, field):
    version = make_version(project, owner)
    client.force_login(scientist)
    refused = post(client, f"/api/projects/{project.pk}/eval-suites/", {**suite_body(version), **change})
    assert refused.status_code == 400, refused.content
    assert field in json.dumps(refused.json()), refused.json()
    assert not EvalSuite.objects.exists()


@pytest.mark.django_db
@pytest.mark.timeout(60)
def test_a_dataset_version_or_model_of_another_project_is_not_found(client, scientist, project, other_project,
                                                                    owner):
    foreign = make_version(other_project, owner)
    client.force_login(scientist)
    refused = post(client, f"/api/projects/{project.pk}/eval-suites/", suite_body(foreign))
    assert refused.status_code == 404
    version = make_version(project, owner, name="Mine")
    refused = post(client, f"/api/projects/{project.pk}/eval-suites/",
                   suite_body(version, baseline_model=placeholder_model(other_project).pk))
    assert refused.status_code == 400 and refused.json()["field"] == "baseline_model"
    suite = post(client, f"/api/projects/{project.pk}/eval-suites/", suite_body(version)).json()
    launched = post(client, f"/api/projects/{project.pk}/eval-suites/{suite['id']}/runs/",
                    {"model": placeholder_model(other_project).pk})
    assert launched.status_code == 400 and launched.json()["field"] == "model"
    assert post(client, f"/api/projects/{other_project.pk}/eval-suites/{suite['id']}/runs/",
                {"model": 1}).status_code == 404


def ended(client, project, run_id, timeout=180) -> dict:
    def check():
        body = client.get(f"/api/projects/{project.pk}/eval-runs/{run_id}/").json()
        return body if body["state"] in ("succeeded", "failed", "cancelled") else None
    return wait_for(check, timeout=timeout, interval=0.2, what=f"eval run {run_id} to end")


def run_suite(client, project, suite_id, model_id) -> dict:
    launched = post(client, f"/api/projects/{project.pk}/eval-suites/{suite_id}/runs/", {"model": model_id})
    assert launched.status_code == 201, launched.content
    run = ended(client, project, launched.json()["id"])
    assert run["state"] == "succeeded", run["error"]
    return run


def move(client, model, alias, version):
    return client.put(f"/api/models/{model.pk}/aliases/{alias}/", json.dumps({"version": version.pk}),
                      content_type="application/json")


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_runs_score_every_item_beside_the_baseline_and_gate_alias_moves(client, scientist, project, owner,
                                                                        tiny_model, adapter_model, inference_worker):
    version = make_version(project, owner)
    client.force_login(scientist)
    loose = post(client, f"/api/projects/{project.pk}/eval-suites/", {
        "name": "Loose", "dataset_version": version.pk, "split": "validation", "baseline_model": tiny_model.pk,
        "max_new_tokens": 6, "gate_alias": "staging",
        "metrics": [{"metric": "exact_match"}, {"metric": "rouge_l"}, {"metric": "perplexity", "threshold": 1e6}]})
    strict = post(client, f"/api/projects/{project.pk}/eval-suites/", {
        "name": "Strict", "dataset_version": version.pk, "split": "validation", "max_new_tokens": 6,
        "gate_alias": "production", "metrics": [{"metric": "exact_match", "threshold": 1}]})
    assert loose.status_code == strict.status_code == 201, (loose.content, strict.content)
    loose, strict = loose.json(), strict.json()

    # No run of the gating suite yet: the move is refused, saying why.
    refused = move(client, tiny_model, "staging", adapter_model)
    assert refused.status_code == 409, refused.content
    assert "“Loose” gates @staging and this version has no finished run of it" in refused.json()["detail"]

    run = run_suite(client, project, loose["id"], adapter_model.pk)
    rows = [(p, r) for p, r in QA]  # the validation split: QA once
    assert run["items_done"] == run["items_total"] == 2 * len(rows)  # the adapter's and the baseline's
    items = EvalItem.objects.filter(run_id=run["id"])
    assert items.filter(baseline=False).count() == items.filter(baseline=True).count() == len(rows)
    assert all(set(i.scores) >= {"exact_match", "rouge_l", "perplexity"} and i.reference for i in items)
    adapter_ppl = sum(i.scores["perplexity"] for i in items.filter(baseline=False)) / len(rows)
    base_ppl = sum(i.scores["perplexity"] for i in items.filter(baseline=True)) / len(rows)
    assert run["aggregates"]["perplexity"] == pytest.approx(adapter_ppl, abs=1e-3)
    assert run["baseline_aggregates"]["perplexity"] == pytest.approx(base_ppl, abs=1e-3)
    assert run["delta"]["perplexity"] == pytest.approx(adapter_ppl - base_ppl, abs=1e-3)
    assert run["passed"] is True and run["failures"] == []

    # Passing now: the alias moves.
    assert move(client, tiny_model, "staging", adapter_model).status_code == 200

    # A second run reuses the baseline's figures: only the adapter is generated.
    again = run_suite(client, project, loose["id"], adapter_model.pk)
    assert again["items_total"] == len(rows) and not EvalItem.objects.filter(run_id=again["id"], baseline=True)
    assert again["baseline_aggregates"] == run["baseline_aggregates"]

    # The strict suite fails (the tiny model does not match every reference word for word): refused with the
    # metric, its value (the mean of the items' exact matches) and the threshold.
    failed = run_suite(client, project, strict["id"], adapter_model.pk)
    matches = [i.scores["exact_match"] for i in EvalItem.objects.filter(run_id=failed["id"])]
    value = round(sum(matches) / len(matches), 6)
    assert failed["passed"] is False and value < 1
    reason = f"exact_match {value:g} is not at least its threshold 1"
    assert failed["failures"] == [{"metric": "exact_match", "value": value, "threshold": 1.0, "reason": reason}]
    refused = move(client, tiny_model, "production", adapter_model)
    assert refused.status_code == 409
    assert f"“Strict” gates @production: {reason}" in refused.json()["detail"]
    assert refused.json()["field"] == "version"


POINTWISE = {"kind": "pointwise", "criteria": [{"name": "correct", "scale": "pass_fail"},
                                               {"name": "clarity", "scale": "1-5"}]}
PAIRWISE = {"kind": "pairwise", "criteria": [{"name": "helpfulness"}]}


def local_judge(project, rubric, name):
    from apps.evaluation.models import Judge

    return Judge.objects.create(project=project, name=name, rubric=rubric, local_model=placeholder_model(project))


@pytest.mark.django_db
@pytest.mark.timeout(60)
def test_judge_metrics_name_a_fitting_judge_and_an_uncalibrated_one_cannot_gate(client, scientist, project, owner,
                                                                                 other_project):
    version = make_version(project, owner)
    point, pair = local_judge(project, POINTWISE, "Points"), local_judge(project, PAIRWISE, "Pairs")
    foreign = local_judge(other_project, POINTWISE, "Theirs")
    baseline = placeholder_model(project, "Base")
    client.force_login(scientist)
    url = f"/api/projects/{project.pk}/eval-suites/"

    def refused(metrics, **fields):
        response = post(client, url, suite_body(version, metrics=metrics, **fields))
        assert response.status_code == 400, response.content
        return response.json()

    assert refused([{"metric": "judge", "judge": foreign.pk, "criterion": "correct"}])["field"] == "metrics[0].judge"
    assert refused([{"metric": "judge", "judge": pair.pk, "criterion": "correct"}])["field"] == "metrics[0].judge"
    missing = refused([{"metric": "judge", "judge": point.pk, "criterion": "tone"}])
    assert missing["field"] == "metrics[0].criterion" and "correct, clarity" in missing["detail"]
    assert refused([{"metric": "win_rate", "judge": point.pk}], baseline_model=baseline.pk)["field"] == \
        "metrics[0].judge"
    assert refused([{"metric": "win_rate", "judge": pair.pk}])["field"] == "baseline_model"
    gating = refused([{"metric": "rouge_l", "threshold": 0.1},
                      {"metric": "judge", "judge": point.pk, "criterion": "correct", "threshold": 0.8}],
                     gate_alias="production")
    assert gating["field"] == "metrics[1].threshold"
    assert "“Points” is not calibrated (no finished run of it has been compared with people's votes, ratings or choices)" in \
        gating["detail"] and "cannot gate @production" in gating["detail"]
    # Reported without a threshold, or in a suite that gates nothing, it is welcome.
    assert post(client, url, suite_body(version, name="Reported", gate_alias="production", metrics=[
        {"metric": "rouge_l", "threshold": 0.1},
        {"metric": "judge", "judge": point.pk, "criterion": "correct"}])).status_code == 201
    assert post(client, url, suite_body(version, name="Ungated", baseline_model=baseline.pk, metrics=[
        {"metric": "win_rate", "judge": pair.pk, "threshold": 0.5}])).status_code == 201


def pointwise_answer(correct: str, clarity: int) -> dict:
    return {"content": json.dumps({"correct": {"score": correct, "reason": "scripted"},
                                   "clarity": {"score": clarity, "reason": "scripted"}})}


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_judges_score_a_run_s_outputs_and_its_wins_against_the_baseline(client, scientist, project, owner, tiny_model,
                                                                        adapter_model, judge_provider, scripted_judge,
                                                                        inference_worker):
    import re

    version = make_version(project, owner)
    questions = [q for q, _ in QA]  # the validation split
    rules = [{"pattern": "^" + re.escape(f"[Prompt]\n{q}\n\n[Response]\n"),
              **pointwise_answer("pass" if i % 2 == 0 else "fail", i % 5 + 1)} for i, q in enumerate(questions)]
    rules += [{"pattern": "^" + re.escape(f"[Prompt]\n{questions[0]}\n\n[Response A]"),
               "content": json.dumps({"winner": "tie", "reason": "scripted"})},
              {"pattern": "^" + re.escape(f"[Prompt]\n{questions[1]}\n\n[Response A]"), "content": "A, surely."}]
    scripted_judge.script(rules, default={"content": json.dumps({"winner": "A", "reason": "always A"})})
    client.force_login(scientist)
    judges = {}
    for name, rubric in (("Points", POINTWISE), ("Pairs", PAIRWISE)):
        made = post(client, f"/api/projects/{project.pk}/judges/", {
            "name": name, "rubric": rubric, "provider_model": "Scripted/judge-1", "max_tokens": 64})
        assert made.status_code == 201, made.content
        judges[name] = made.json()["id"]
    suite = post(client, f"/api/projects/{project.pk}/eval-suites/", {
        "name": "Judged", "dataset_version": version.pk, "split": "validation", "baseline_model": tiny_model.pk,
        "max_new_tokens": 6, "metrics": [
            {"metric": "judge", "judge": judges["Points"], "criterion": "correct"},
            {"metric": "judge", "judge": judges["Points"], "criterion": "clarity"},
            {"metric": "win_rate", "judge": judges["Pairs"], "threshold": 0.6}]})
    assert suite.status_code == 201, suite.content

    run = run_suite(client, project, suite.json()["id"], adapter_model.pk)
    points, pairs = f"judge:{judges['Points']}:", f"win_rate:{judges['Pairs']}"
    # correct: pass, fail, pass, fail, pass, fail -> 3 / 6; clarity 1,2,3,4,5,1 on 0..1: (0+.25+.5+.75+1+0) / 6
    assert run["aggregates"][points + "correct"] == 0.5
    assert run["aggregates"][points + "clarity"] == round(2.5 / 6, 6)
    # a tie, an unreadable pair (left out), and four pairs answered "A" in both orders (position only: a tie)
    assert run["aggregates"][pairs] == 0.5
    assert run["passed"] is False and run["failures"][0]["reason"] == f"{pairs} 0.5 is not at least its threshold 0.6"
    items = {i.position: i.scores for i in EvalItem.objects.filter(run_id=run["id"], baseline=False)}
    assert sorted(s[pairs] is None for s in items.values()) == [False] * 5 + [True]
    # the baseline's outputs are scored on the references, not judged
    assert not any(k.startswith(("judge:", "win_rate:")) for i in EvalItem.objects.filter(run_id=run["id"],
                                                                                           baseline=True)
                   for k in i.scores)
    asked = scripted_judge.requests()
    assert len(asked) == len(questions) + 2 * len(questions)  # one per output, both orders per pair


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_fine_tune_runs_the_auto_run_suites_and_its_job_and_model_pages_show_the_delta(
        client, scientist, project, owner, tiny_model, qa_version, celery_worker, inference_worker):
    from tests.training.fixtures import launch_body

    client.force_login(scientist)
    auto = post(client, f"/api/projects/{project.pk}/eval-suites/", {
        "name": "After training", "dataset_version": qa_version.pk, "split": "validation", "auto_run": True,
        "baseline_model": tiny_model.pk, "max_new_tokens": 4,
        "metrics": [{"metric": "rouge_l"}, {"metric": "perplexity", "threshold": 1e6}]})
    manual = post(client, f"/api/projects/{project.pk}/eval-suites/", {
        "name": "By hand", "dataset_version": qa_version.pk, "metrics": [{"metric": "rouge_l"}]})
    assert auto.status_code == manual.status_code == 201
    launched = client.post(f"/api/projects/{project.pk}/jobs/", launch_body(tiny_model, qa_version, max_steps=10),
                           content_type="application/json")
    assert launched.status_code == 201, launched.content
    job_id = launched.json()["id"]

    def auto_run():
        run = EvalRun.objects.filter(training_job_id=job_id).first()
        return run if run is not None and run.state in EvalRun.ENDED else None
    run = wait_for(auto_run, timeout=240, interval=0.5, what="the suite run after the fine-tune")
    job = client.get(f"/api/jobs/{job_id}/").json()
    assert job["state"] == "succeeded" and run.state == "succeeded", run.error
    assert run.suite_id == auto.json()["id"] and run.model_id == job["adapter"]  # the auto-run suite only
    assert EvalRun.objects.count() == 1
    delta = run.delta["perplexity"]
    assert delta == pytest.approx(run.aggregates["perplexity"] - run.baseline_aggregates["perplexity"], abs=1e-5)

    shown = f"{'+' if delta > 0 else ''}{delta}"
    for url in (f"/projects/{project.pk}/jobs/{job_id}/", f"/projects/{project.pk}/models/{job['adapter']}/"):
        page = client.get(url).content.decode()
        assert 'data-testid="eval-results"' in page and "After training" in page, url
        assert f'<td data-field="delta">{shown}</td>' in page, url


@pytest.mark.django_db
@pytest.mark.timeout(60)
def test_the_suites_page_answers_by_permission(client, scientist, viewer, annotator, outsider, project, owner):
    version = make_version(project, owner)
    EvalSuite.objects.create(project=project, name="Visible suite", dataset_version=version,
                             metrics=[{"metric": "rouge_l", "key": "rouge_l", "threshold": None}])
    url = f"/projects/{project.pk}/eval-suites/"
    client.force_login(scientist)
    page = client.get(url).content.decode()
    assert "Visible suite" in page and 'data-testid="suite-form"' in page
    client.force_login(viewer)  # compare.view without compare.run: reads, creates nothing
    page = client.get(url).content.decode()
    assert "Visible suite" in page and 'data-testid="suite-form"' not in page and 'data-field="run"' not in page
    client.force_login(annotator)
    assert client.get(url).status_code == 403
    client.force_login(outsider)
    assert client.get(url).status_code == 404


@pytest.mark.django_db
@pytest.mark.timeout(60)
def test_a_canary_onto_a_version_is_gated_as_a_move_is(client, admin, project, owner):
    from django.utils import timezone

    from apps.registry.models import ModelAlias, RegisteredModel

    base = placeholder_model(project, "Base")
    tuned = RegisteredModel.objects.create(project=project, name="Tuned", format="peft", kind="adapter",
                                           base_model=base, source_path="/a", status="ready", info={})
    ModelAlias.objects.create(project=project, model=base, version=base, name="production")
    suite = EvalSuite.objects.create(project=project, name="Gate", dataset_version=make_version(project, owner),
                                     gate_alias="production",
                                     metrics=[{"metric": "rouge_l", "key": "rouge_l", "threshold": 0.4}])
    client.force_login(admin)
    url = f"/api/models/{base.pk}/aliases/production/canary/"
    body = json.dumps({"version": tuned.pk, "weight": 10})
    refused = client.put(url, body, content_type="application/json")
    assert refused.status_code == 409 and "has no finished run of it" in refused.json()["detail"]

    reason = "rouge_l 0.3 is not at least its threshold 0.4"
    EvalRun.objects.create(project=project, suite=suite, model=tuned, state="succeeded", finished_at=timezone.now(),
                           aggregates={"rouge_l": 0.3}, passed=False,
                           failures=[{"metric": "rouge_l", "value": 0.3, "threshold": 0.4, "reason": reason}])
    refused = client.put(url, body, content_type="application/json")
    assert refused.status_code == 409 and reason in refused.json()["detail"]
    assert ModelAlias.objects.get(name="production").canary_version_id is None

    EvalRun.objects.create(project=project, suite=suite, model=tuned, state="succeeded", finished_at=timezone.now(),
                           aggregates={"rouge_l": 0.5}, passed=True)  # the newest run decides
    started = client.put(url, body, content_type="application/json")
    assert started.status_code == 200, started.content
    assert ModelAlias.objects.get(name="production").canary_version_id == tuned.pk
