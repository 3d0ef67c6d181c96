"""Teacher runs (distillation) end to end: a scripted teacher (tests/evaluation/fixed_answer_server.py,
its own process, the real OpenAI protocol) registered as a priced provider, a real `inference`
worker running the run and a real `default` worker importing its answers as the dataset's next
version; a provider that fails; a cancelled run; and every bad input refused naming its field."""

import json
from decimal import Decimal

import pytest

from apps.datasets.models import DatasetRow, DatasetVersion
from apps.evaluation.models import TeacherRun
from apps.providers import services as provider_services
from tests.conftest import wait_for
from tests.providers.conftest import loopback_allowed, provider  # noqa: F401 (fixtures)
from tests.training.fixtures import QA
from tests.training.fixtures import make_version as make_rows

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

PRICES = {"input_price_per_1k": "0.5", "output_price_per_1k": "1.5"}
ROWS = [*QA, ("mail jane.doe@example.com about paris ?", "ok")]


def make_version(project, owner, **fields) -> DatasetVersion:
    """A version of prompts and responses, its schema as an import writes it."""
    version = make_rows(project, owner, **fields)
    version.schema = {"roles": {"prompt": "prompt", "response": "response"}, "metadata_keys": []}
    version.save(update_fields=["schema"])
    return version


def post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


def teacher_body(version, **fields) -> dict:
    return {"version": version.pk, "provider_model": "Scripted/judge-1", "max_tokens": 32, "temperature": 0.7,
            "seed": 5, **fields}


def launch_and_wait(client, project, body, timeout=120) -> dict:
    launched = post(client, f"/api/projects/{project.pk}/teacher-runs/", body)
    assert launched.status_code == 201, launched.content
    url = f"/api/projects/{project.pk}/teacher-runs/{launched.json()['id']}/"
    return wait_for(lambda: (r := client.get(url).json())["state"] in ("succeeded", "failed", "cancelled") and r,
                    timeout=timeout, interval=0.3, what="the teacher run to end")


@pytest.fixture
def priced_teacher(site_admin, judge_provider):
    provider_services.provider_update(user=site_admin, provider=judge_provider, prices={"judge-1": PRICES})
    return judge_provider


def test_a_provider_teacher_answers_every_prompt_into_the_next_version_with_tokens_and_cost(
        client, scientist, owner, project, priced_teacher, scripted_judge, celery_worker, inference_worker):
    version = make_version(project, owner, rows=ROWS, eval_rows=QA[:2])
    provider_services.provider_policy_update(user=owner, project=project, redact_pii=True)
    scripted_judge.script([{"pattern": "capital", "content": "The capital is Paris."}],
                          default={"content": "Paris, in France."})
    client.force_login(scientist)

    estimate = post(client, f"/api/projects/{project.pk}/teacher-runs/estimate/", teacher_body(version))
    assert estimate.status_code == 200, estimate.content
    estimate = estimate.json()
    prompt_chars = sum(len(p) for p, _ in ROWS + QA[:2])
    assert estimate["rows"] == estimate["calls"] == 9 and estimate["teacher"] == "Scripted/judge-1"
    assert estimate["prompt_tokens"] == -(-prompt_chars // 4) and estimate["max_completion_tokens"] == 9 * 32
    # the most it can cost: the estimated prompt tokens and every answer at max_tokens, at the prices
    assert Decimal(estimate["max_cost"]) == ((Decimal(estimate["prompt_tokens"]) * Decimal("0.5")
                                              + Decimal(9 * 32) * Decimal("1.5")) / 1000).quantize(Decimal("0.000001"))

    run = launch_and_wait(client, project, teacher_body(version))
    assert run["state"] == "succeeded", run["error"]
    assert run["rows_done"] == run["rows_total"] == 9
    per_call = (10 * Decimal("0.5") + 5 * Decimal("1.5")) / 1000  # the server's fixed usage: 10 + 5 tokens
    assert (run["prompt_tokens"], run["completion_tokens"], Decimal(run["cost"])) == (90, 45, 9 * per_call)
    made = DatasetVersion.objects.get(pk=run["version"])
    assert made.dataset_id == version.dataset_id and made.number == 2 and made.parent_id == version.pk
    assert made.schema["roles"] == {"id": "id", "prompt": "prompt", "response": "response", "split": "split"}
    rows = list(DatasetRow.objects.filter(version=made).order_by("position"))
    assert [r.prompt for r in rows] == [p for p, _ in ROWS + QA[:2]]
    assert [r.response for r in rows] == ["The capital is Paris." if "capital" in p else "Paris, in France."
                                          for p, _ in ROWS + QA[:2]]
    assert [r.split for r in rows] == ["train"] * len(ROWS) + ["validation"] * 2
    # metadata as the import pipeline keeps a file's extra columns: as text
    assert rows[0].metadata == {"teacher": "Scripted/judge-1", "teacher_run": str(run["id"]), "source_version": "1",
                                "prompt_tokens": "10", "completion_tokens": "5",
                                "cost": str(per_call.quantize(Decimal("0.000001")))}
    # the personal data never left: the provider saw the prompt redacted, with the run's sampling
    sent = scripted_judge.requests()
    assert len(sent) == 9 and "mail [EMAIL] about paris ?" in [r["user"] for r in sent]
    assert not any("jane.doe" in r["user"] for r in sent)


def test_a_provider_that_answers_500_is_retried_then_the_run_fails_with_its_message_and_writes_no_version(
        client, scientist, owner, project, judge_provider, scripted_judge, celery_worker, inference_worker):
    version = make_version(project, owner, rows=[(f"question {i}", "answer") for i in range(5)], eval_rows=[])
    scripted_judge.script([], default={"status": 500, "message": "teacher overloaded"})
    client.force_login(scientist)
    run = launch_and_wait(client, project, teacher_body(version))
    assert run["state"] == "failed" and "teacher overloaded" in run["error"]
    assert run["version"] is None and run["import_job"] is None
    assert DatasetVersion.objects.filter(dataset=version.dataset).count() == 1
    asked = [r["user"] for r in scripted_judge.requests()]
    assert asked and all(asked.count(prompt) == 3 for prompt in set(asked))  # once, then the provider's 2 retries


def test_a_queued_run_cancelled_ends_at_once(client, scientist, owner, project):
    version = make_version(project, owner)
    run = TeacherRun.objects.create(project=project, source_version=version, created_by=owner)  # no message sent
    client.force_login(scientist)
    url = f"/api/projects/{project.pk}/teacher-runs/{run.pk}/"
    cancelled = client.post(url + "cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert client.post(url + "cancel/").status_code == 409
    assert client.get(f"/api/projects/{project.pk}/teacher-runs/").json()["results"][0]["state"] == "cancelled"


def test_a_running_run_cancelled_stops_after_its_round_and_writes_no_version(
        client, scientist, owner, project, judge_provider, scripted_judge, celery_worker, inference_worker):
    version = make_version(project, owner, rows=[(f"question {i}", "answer") for i in range(40)], eval_rows=[])
    scripted_judge.script([], default={"content": "slowly", "delay_s": 0.4})
    client.force_login(scientist)
    launched = post(client, f"/api/projects/{project.pk}/teacher-runs/", teacher_body(version))
    url = f"/api/projects/{project.pk}/teacher-runs/{launched.json()['id']}/"
    wait_for(lambda: client.get(url).json()["rows_done"] > 0, timeout=60, interval=0.05, what="a first round")
    assert client.post(url + "cancel/").status_code == 200
    run = wait_for(lambda: (r := client.get(url).json())["state"] in ("succeeded", "failed", "cancelled") and r,
                   timeout=60, interval=0.2, what="the run to stop")
    assert run["state"] == "cancelled" and 0 < run["rows_done"] < 40
    assert run["version"] is None and run["import_job"] is None
    assert DatasetVersion.objects.filter(dataset=version.dataset).count() == 1


@pytest.mark.parametrize(("change", "field"), [
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 10**9}, "max_tokens"),
    ({"max_tokens": "many"}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"temperature": 2.5}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"seed": -1}, "seed"),
    ({"seed": 2**40}, "seed"),
    ({"version": "v1"}, "version"),
    ({"version": 10**30}, "version"),
    ({"version": None}, "version"),
    ({"prompt_column": "question"}, "prompt_column"),
    ({"prompt_column": ["prompt"]}, "prompt_column"),
    ({"prompt_column": "x" * 10_000}, "prompt_column"),
    ({"provider_model": None}, "local_model"),
    ({"local_model": 1}, "provider_model"),
    ({"provider_model": {"id": 1}}, "provider_model"),
    ({"provider_model": 10**30}, "provider_model"),
    ({"provider_model": "<script>alert(1)</script>/x" * 50}, "provider_model"),
])
@pytest.mark.usefixtures("provider")
def test_bad_input_is_refused_naming_its_field(client, scientist, owner, project, change, field):
    version = make_version(project, owner)
    client.force_login(scientist)
    body = {**teacher_body(version, provider_model="Local/m1"), **change}
    for url in ("teacher-runs/estimate/", "teacher-runs/"):
        response = post(client, f"/api/projects/{project.pk}/{url}", body)
        assert response.status_code == 400, response.content
        assert response.json()["field"] == field, response.content
    assert not TeacherRun.objects.exists()


@pytest.mark.usefixtures("provider")
def test_a_version_without_prompts_a_body_that_is_no_object_and_a_forbidden_provider_are_refused(
        client, scientist, owner, project):
    version = make_version(project, owner)
    client.force_login(scientist)
    url = f"/api/projects/{project.pk}/teacher-runs/"
    answers_only = DatasetVersion.objects.create(dataset=version.dataset, number=2, status="ready",
                                                 schema={"roles": {"response": "response"}, "metadata_keys": []})
    DatasetRow.objects.create(version=answers_only, position=0, row_hash="0" * 64, response="an answer")
    response = post(client, url, teacher_body(answers_only, provider_model="Local/m1"))
    assert response.status_code == 400 and response.json()["field"] == "prompt_column"
    assert "no prompt or messages column" in response.json()["detail"]
    # a prompt column whose rows are all empty
    empty = DatasetVersion.objects.create(dataset=version.dataset, number=3, status="ready",
                                          schema={"roles": {"prompt": "prompt"}, "metadata_keys": []})
    DatasetRow.objects.create(version=empty, position=0, row_hash="1" * 64, prompt="   ")
    response = post(client, url, teacher_body(empty, provider_model="Local/m1"))
    assert response.status_code == 400 and response.json()["field"] == "prompt_column"

    response = post(client, url, [1, 2])
    assert response.status_code == 400 and response.json()["field"] == "body"

    provider_services.provider_policy_update(user=owner, project=project, allow_outside_providers=False)
    response = post(client, url, teacher_body(version, provider_model="Local/m1"))
    assert response.status_code == 409 and response.json()["field"] == "allow_outside_providers"
    assert not TeacherRun.objects.exists()


@pytest.mark.usefixtures("provider")
def test_another_projects_model_version_or_provider_answers_404(client, scientist, owner, project, other_project,
                                                                 site_admin):
    from apps.registry.models import RegisteredModel

    version = make_version(project, owner)
    theirs = make_version(other_project, owner, name="Theirs")
    their_model = RegisteredModel.objects.create(project=other_project, name="Theirs", format="hf_dir",
                                                 source_path="/x", status="ready", info={})
    only_theirs = provider_services.provider_create(user=site_admin, name="Theirs", base_url="http://127.0.0.1:9/v1",
                                                    models=["t"], max_retries=0)
    provider_services.provider_enable(user=site_admin, provider=only_theirs, project_id=other_project.pk)
    client.force_login(scientist)
    url = f"/api/projects/{project.pk}/teacher-runs/"
    for body, field in ((teacher_body(version, provider_model=None, local_model=their_model.pk), "local_model"),
                        (teacher_body(version, provider_model="Theirs/t"), "provider_model"),
                        (teacher_body(theirs, provider_model="Local/m1"), "version")):
        response = post(client, url, body)
        assert response.status_code == 404, response.content
        assert response.json().get("field") == field
    run = TeacherRun.objects.create(project=other_project, source_version=theirs, created_by=owner)
    assert client.get(f"{url}{run.pk}/").status_code == 404
    assert client.post(f"{url}{run.pk}/cancel/").status_code == 404


def test_a_run_taken_over_after_its_worker_died_asks_only_for_the_rows_not_yet_answered(
        scientist, owner, project, judge_provider, scripted_judge, celery_worker):
    from apps.evaluation.models import TeacherAnswer
    from apps.evaluation.teacher import run_teacher_job

    version = make_version(project, owner, rows=[(f"question {i}", "answer") for i in range(6)], eval_rows=[])
    scripted_judge.script([], default={"content": "new answer"})
    # The run as its service made it (no message sent: no worker but this test's takes it), held by a
    # worker that was lost after storing the answers to rows 0 and 1.
    config = {"provider_model": judge_provider.models.get().pk, "local_model": None, "teacher": "Scripted/judge-1",
              "max_tokens": 32, "temperature": 0.0, "seed": None, "prompt_column": "prompt"}
    run = TeacherRun.objects.create(project=project, source_version=version, config=config, rows_total=6,
                                    rows_done=2, created_by=scientist, state="running", runs=1, worker="lost@host")
    TeacherAnswer.objects.bulk_create([TeacherAnswer(run=run, position=i, response="stored answer", prompt_tokens=1,
                                                     completion_tokens=1) for i in (0, 1)])

    run_teacher_job(run.pk, worker="b@host")

    run.refresh_from_db()
    assert (run.state, run.runs, run.worker, run.rows_done) == ("succeeded", 2, "b@host", 6), run.error
    assert sorted(r["user"] for r in scripted_judge.requests()) == [f"question {i}" for i in range(2, 6)]
    made = DatasetRow.objects.filter(version=run.version).order_by("position")
    assert list(made.values_list("response", flat=True)) == ["stored answer"] * 2 + ["new answer"] * 4


def test_a_run_that_spends_the_providers_daily_budget_fails_with_the_budget_message_and_writes_no_version(
        client, scientist, owner, project, site_admin, judge_provider, scripted_judge, celery_worker,
        inference_worker):
    provider_services.provider_update(user=site_admin, provider=judge_provider, daily_request_budget=3)
    version = make_version(project, owner, rows=[(f"question {i}", "answer") for i in range(6)], eval_rows=[])
    scripted_judge.script([], default={"content": "an answer"})
    client.force_login(scientist)
    run = launch_and_wait(client, project, teacher_body(version))
    assert run["state"] == "failed" and "used its 3 requests for today" in run["error"]
    assert len(scripted_judge.requests()) == 3 and run["rows_done"] <= 3
    assert run["version"] is None and DatasetVersion.objects.filter(dataset=version.dataset).count() == 1


def test_a_chat_versions_conversations_are_asked_without_their_last_answer_and_kept_as_messages(
        client, scientist, owner, project, judge_provider, scripted_judge, celery_worker, inference_worker):
    dataset = make_rows(project, owner, rows=[], eval_rows=[]).dataset
    chats = [[{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": "old answer"}]
             for i in range(3)]
    version = DatasetVersion.objects.create(dataset=dataset, number=2, status="ready", row_count=4,
                                            schema={"roles": {"messages": "messages"}, "metadata_keys": []})
    DatasetRow.objects.bulk_create([DatasetRow(version=version, position=i, row_hash=f"{i:064d}", messages=chat)
                                    for i, chat in enumerate(chats)]
                                   + [DatasetRow(version=version, position=3, row_hash="3" * 64, messages=[])])
    scripted_judge.script([], default={"content": "new answer"})
    client.force_login(scientist)
    run = launch_and_wait(client, project, teacher_body(version))  # the default column: messages
    assert run["state"] == "succeeded", run["error"]
    assert run["config"]["prompt_column"] == "messages" and run["rows_total"] == 3  # the empty chat is left out
    assert sorted(r["user"] for r in scripted_judge.requests()) == ["question 0", "question 1", "question 2"]
    made = DatasetVersion.objects.get(pk=run["version"])
    assert made.number == 3 and set(made.schema["roles"].values()) == {"id", "messages", "response"}
    rows = DatasetRow.objects.filter(version=made).order_by("position")
    assert [(r.messages, r.response, r.prompt, r.split) for r in rows] == [(chat[:1], "new answer", None, "")
                                                                           for chat in chats]
    assert "split" not in rows[0].metadata and rows[0].metadata["teacher"] == "Scripted/judge-1"
