"""A comparison column answered by a provider model: checked when created (every bad input
named), then run by a real `inference` worker process calling a real OpenAI-compatible server in
another process (tests/evaluation/fixed_answer_server.py, registered by site staff as a provider)."""

import json
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from apps.accounts import services as account_services
from apps.comparison import services
from apps.comparison.models import Comparison, Output
from apps.providers import services as provider_services
from apps.providers.models import ProviderCall
from tests.comparison.factories import placeholder_model
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def create(client, project, auth=None, **body):
    payload = {"name": "Local vs provider", "prompts": ["what is paris ?", "what is the capital of france ?"],
               "params": {"max_new_tokens": 4}, **body}
    return client.post(f"/api/projects/{project.pk}/comparisons/", json.dumps(payload),
                       content_type="application/json", **({"HTTP_AUTHORIZATION": auth} if auth else {}))


def ended(client, comparison_id, timeout=180) -> dict:
    def check():
        body = client.get(f"/api/comparisons/{comparison_id}/").json()
        return body if body["state"] in ("succeeded", "failed", "cancelled") else None
    return wait_for(check, timeout=timeout, interval=0.2, what=f"comparison {comparison_id} to end")


@pytest.fixture
def two_provider_models(site_admin, judge_provider):
    provider_services.provider_update(user=site_admin, provider=judge_provider, models=["judge-1", "judge-2"])
    return ["Scripted/judge-1", "Scripted/judge-2"]


# --- created: checked whole, each refusal naming its field ----------------------------------------

def test_a_provider_model_is_a_column_after_the_local_ones(client, scientist, project, judge_provider):
    local = placeholder_model(project, "Base")
    client.force_login(scientist)
    by_id = judge_provider.models.get().pk
    response = create(client, project, models=[local.pk], provider_models=[by_id])
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["cells_total"] == 4
    assert [(m["name"], m["kind"], m["model"], m["provider_model"]) for m in body["models"]] == [
        ("Base", local.kind, local.pk, None), ("Scripted/judge-1", "provider", None, by_id)]
    listed = client.get(f"/api/projects/{project.pk}/comparisons/").json()["results"]
    assert [m["name"] for m in listed[0]["models"]] == ["Base", "Scripted/judge-1"]


@pytest.mark.parametrize("refs, message", [
    (["Nope/judge-9"], "No provider model 'Nope/judge-9' is enabled for this project"),
    ([999999], "is enabled for this project"),
    (["Scripted/judge-1", "Scripted/judge-1"], "Each provider model may appear once"),
    ("Scripted/judge-1", "Expected a list"),
    ([{"provider": "Scripted"}], "its id or its “provider/model” name"),
    ([True], "its id or its “provider/model” name"),
    ([-3], "its id or its “provider/model” name"),
    (["S" * 5000], "its id or its “provider/model” name"),
    (["Scripted/judge-1"] * 5, "at most 4 provider models"),
])
def test_bad_provider_models_are_refused_naming_the_field(client, scientist, project, judge_provider, refs, message):
    local = placeholder_model(project, "Base")
    client.force_login(scientist)
    response = create(client, project, models=[local.pk], provider_models=refs)
    assert response.status_code == 400, response.content
    data = response.json()  # the service's {field, detail}, or the serializer's {field: [messages]}
    assert (data.get("field") == "provider_models" or "provider_models" in data), data
    assert message in json.dumps(data, ensure_ascii=False), data
    assert Comparison.objects.count() == 0


def test_a_provider_disabled_or_not_enabled_for_the_project_is_unknown(client, scientist, project, other_project,
                                                                        site_admin, judge_provider):
    local = placeholder_model(project, "Base")
    client.force_login(scientist)
    judge_provider.models.update(enabled=False)
    assert create(client, project, models=[local.pk], provider_models=["Scripted/judge-1"]).json()["field"] == \
        "provider_models"
    judge_provider.models.update(enabled=True)
    provider_services.provider_update(user=site_admin, provider=judge_provider, enabled=False)
    assert create(client, project, models=[local.pk], provider_models=["Scripted/judge-1"]).status_code == 400
    provider_services.provider_update(user=site_admin, provider=judge_provider, enabled=True)
    theirs = placeholder_model(other_project, "Theirs")
    other = create(client, other_project, models=[theirs.pk], provider_models=["Scripted/judge-1"])
    assert other.status_code in (400, 404)  # the scientist is no member there: the project itself is unknown
    assert Comparison.objects.count() == 0


def test_columns_are_two_to_four_provider_models_included(client, scientist, project, two_provider_models):
    locals_ = [placeholder_model(project) for _ in range(3)]
    client.force_login(scientist)
    too_many = create(client, project, models=[m.pk for m in locals_], provider_models=two_provider_models)
    assert too_many.status_code == 400 and too_many.json()["field"] == "models"
    too_few = create(client, project, models=[], provider_models=two_provider_models[:1])
    assert too_few.status_code == 400 and too_few.json()["field"] == "models"
    assert create(client, project, models=[], provider_models=two_provider_models).status_code == 201


def test_a_provider_column_takes_provider_use_and_a_project_that_lets_data_out(client, scientist, owner, project,
                                                                                judge_provider):
    local = placeholder_model(project, "Base")
    _, raw = account_services.token_create(user=owner, name="no providers", project=project,
                                           permissions=["project.view", "model.view", "compare.view", "compare.run"],
                                           expires_at=timezone.now() + timedelta(days=1))
    refused = create(client, project, models=[local.pk], provider_models=["Scripted/judge-1"], auth=f"Bearer {raw}")
    assert refused.status_code == 403, refused.content
    provider_services.provider_policy_update(user=owner, project=project, allow_outside_providers=False)
    client.force_login(scientist)
    private = create(client, project, models=[local.pk], provider_models=["Scripted/judge-1"])
    assert private.status_code == 409 and private.json()["field"] == "allow_outside_providers"
    assert Comparison.objects.count() == 0


def test_the_create_page_offers_the_projects_provider_models(client, scientist, project, judge_provider):
    base = placeholder_model(project, "Base")
    client.force_login(scientist)
    page = client.get(f"/projects/{project.pk}/comparisons/new/").content.decode()
    assert 'name="provider_models"' in page and "Scripted/judge-1" in page
    form = {"name": "Pages", "model_1": base.pk, "prompts": "what is paris ?", "max_new_tokens": 8,
            "temperature": 0, "sample_size": 20, "seed": 0, "provider_models": [judge_provider.models.get().pk]}
    response = client.post(f"/projects/{project.pk}/comparisons/new/", form)
    comparison = Comparison.objects.get()
    assert response.status_code == 302
    detail = client.get(response["Location"]).content.decode()
    assert "Scripted/judge-1" in detail and '<span class="badge">provider</span>' in detail
    alone = client.post(f"/projects/{project.pk}/comparisons/new/", {**form, "provider_models": []})
    assert alone.status_code == 400 and "Compare 2 to 4 models" in alone.content.decode()
    assert comparison.contestants.filter(provider_model__isnull=False).count() == 1


def test_votes_on_a_provider_column_rank_it_and_export_it_by_name(client, scientist, annotator, project, owner,
                                                                  judge_provider):
    from apps.comparison.models import Contestant, Prompt
    from apps.datasets.models import DatasetVersion
    from tests.comparison.test_api import _vote_everything

    local = placeholder_model(project, "Base")
    comparison = Comparison.objects.create(project=project, name="Filled", state="succeeded", created_by=owner,
                                           params={"max_new_tokens": 8}, source={"kind": "ad_hoc"}, cells_total=6)
    columns = [Contestant.objects.create(comparison=comparison, model=local, position=0),
               Contestant.objects.create(comparison=comparison, provider_model=judge_provider.models.get(), position=1)]
    for i in range(3):
        prompt = Prompt.objects.create(comparison=comparison, position=i, text=f"prompt {i}")
        Output.objects.bulk_create([Output(comparison=comparison, prompt=prompt, contestant=c,
                                           text=f"{c.name} says {i}") for c in columns])
    client.force_login(annotator)
    _vote_everything(client, comparison, lambda pair: "a" if pair["a"].startswith("Scripted") else "b")

    client.force_login(scientist)
    board = client.get(f"/api/comparisons/{comparison.pk}/leaderboard/").json()
    assert [(s["name"], s["wins"]) for s in board["standings"]] == [("Scripted/judge-1", 3), ("Base", 0)]
    page = client.get(f"/projects/{project.pk}/comparisons/{comparison.pk}/leaderboard/")
    assert page.status_code == 200 and "Scripted/judge-1" in page.content.decode()
    exported = client.post(f"/api/comparisons/{comparison.pk}/export/", {"dataset_name": "Prefs"},
                           content_type="application/json")
    assert exported.status_code == 201, exported.content
    rows = DatasetVersion.objects.get(dataset_id=exported.json()["dataset"]).rows.all()
    assert len(rows) == 3 and all(r.response.startswith("Scripted/judge-1 says") for r in rows)
    assert {r.metadata["chosen_model_name"] for r in rows} == {"Scripted/judge-1"}


# --- run by a real worker against a real provider process ------------------------------------------

@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_a_local_and_a_provider_column_both_answer_and_the_provider_column_is_voted_and_ranked(
        client, scientist, owner, site_admin, project, tiny_model, judge_provider, scripted_judge, inference_worker):
    provider_services.provider_update(user=site_admin, provider=judge_provider, prices={
        "judge-1": {"input_price_per_1k": "1", "output_price_per_1k": "2"}})
    provider_services.provider_policy_update(user=owner, project=project, redact_pii=True)
    scripted_judge.script([], default={"content": "Paris, says the provider.", "delay_s": 0.5})
    prompts = [f"question {i}: what is the capital of france ?" for i in range(6)] + ["mail jane.doe@example.com"]
    client.force_login(scientist)
    response = create(client, project, models=[tiny_model.pk], provider_models=["Scripted/judge-1"], prompts=prompts)
    assert response.status_code == 201, response.content
    local_id, provider_id = [m["id"] for m in response.json()["models"]]
    comparison = ended(client, response.json()["id"])
    assert comparison["state"] == "succeeded", comparison["error"]
    assert comparison["cells_done"] == comparison["cells_total"] == 14

    cells = client.get(f"/api/comparisons/{comparison['id']}/grid/").json()["cells"]
    called = [c for c in cells if c["contestant"] == provider_id]
    generated = [c for c in cells if c["contestant"] == local_id]
    assert len(called) == len(generated) == 7 and not any(c["error"] for c in cells)
    assert all(c["text"] == "Paris, says the provider." and c["finish_reason"] == "stop" and c["prompt_tokens"] == 10
               and c["completion_tokens"] == 5 and c["latency_s"] >= 0.5 for c in called)
    assert all(c["completion_tokens"] >= 1 and c["text"] != "Paris, says the provider." for c in generated)
    sent = scripted_judge.requests()
    assert len(sent) == 7 and {r["model"] for r in sent} == {"judge-1"}
    assert max(r["in_flight"] for r in sent) >= 4  # kept busy, not called one prompt at a time
    assert not any("jane.doe@example.com" in r["user"] for r in sent)  # the project's PII redaction held
    calls = ProviderCall.objects.filter(project=project)
    assert calls.count() == 7 and {(c.user_id, c.cost, c.failed) for c in calls} == {
        (scientist.pk, Decimal("0.020000"), False)}  # 10 x 1/1k + 5 x 2/1k

    pair = client.post(f"/api/comparisons/{comparison['id']}/pairs/next/").json()["pair"]
    assert "Scripted" not in json.dumps(pair)  # blind
    vote = client.post(f"/api/comparisons/{comparison['id']}/votes/", {"pair": pair["id"], "choice": "a",
                                                                       "client_id": "v1"},
                       content_type="application/json")
    assert vote.status_code == 201, vote.content
    names = {vote.json()["a"]["name"], vote.json()["b"]["name"]}
    assert names == {tiny_model.name, "Scripted/judge-1"}
    board = client.get(f"/api/comparisons/{comparison['id']}/leaderboard/").json()
    assert board["total_votes"] == 1 and {s["name"] for s in board["standings"]} == names
    assert f"provider:{judge_provider.models.get().pk}" in {s["model"] for s in board["standings"]}
    project_board = client.get(f"/api/projects/{project.pk}/leaderboard/").json()
    assert {s["name"] for s in project_board["standings"]} == names


@pytest.mark.slow
def test_a_provider_500_after_its_retries_leaves_that_cell_with_the_providers_message(
        client, scientist, project, two_provider_models, scripted_judge, inference_worker):
    scripted_judge.script([{"pattern": "boom", "status": 500, "message": "upstream exploded"}],
                          default={"content": "fine"})
    client.force_login(scientist)
    response = create(client, project, models=[], provider_models=two_provider_models, prompts=["hello", "boom now"])
    comparison = ended(client, response.json()["id"])
    assert comparison["state"] == "succeeded", comparison["error"]
    cells = Output.objects.filter(comparison_id=comparison["id"]).select_related("prompt")
    failed = [c for c in cells if c.error]
    assert len(cells) == 4 and [c.prompt.text for c in failed] == ["boom now", "boom now"]
    assert all("Scripted answered 500: upstream exploded" in c.error and c.text == "" for c in failed)
    assert len([r for r in scripted_judge.requests() if "boom" in r["user"]]) == 2 * 3  # each retried twice
    assert ProviderCall.objects.filter(failed=True).count() == 2
    # only answers are voted on: the failed prompt has no pair
    assert {p[0] for p in services.votable_pairs(Comparison.objects.get(pk=comparison["id"]))} == {
        c.prompt_id for c in cells if not c.error}


@pytest.mark.slow
def test_a_spent_budget_fails_the_comparison_with_the_budgets_message_keeping_whole_cells(
        client, scientist, site_admin, project, judge_provider, two_provider_models, scripted_judge, inference_worker):
    provider_services.provider_update(user=site_admin, provider=judge_provider, daily_request_budget=3)
    scripted_judge.script([], default={"content": "fine"})
    client.force_login(scientist)
    response = create(client, project, models=[], provider_models=two_provider_models,
                      prompts=["one", "two", "three"])
    comparison = ended(client, response.json()["id"])
    assert comparison["state"] == "failed" and "used its 3 requests for today" in comparison["error"]
    stored = Output.objects.filter(comparison_id=comparison["id"]).select_related("contestant")
    assert len(stored) == 3 and {o.contestant.position for o in stored} == {0} and all(o.text == "fine" for o in stored)
    assert len(scripted_judge.requests()) == 3


@pytest.mark.slow
def test_a_project_that_stopped_letting_data_out_fails_the_comparison_before_any_call(
        client, scientist, owner, project, judge_provider, two_provider_models, scripted_judge, inference_worker):
    with transaction.atomic():  # queued when this commits: the worker sees the setting already off
        comparison = services.comparison_create(user=scientist, project=project, name="Late", models=[],
                                                provider_models=two_provider_models, prompts=["hello"],
                                                params={"max_new_tokens": 4})
        provider_services.provider_policy_update(user=owner, project=project, allow_outside_providers=False)
    client.force_login(scientist)
    body = ended(client, comparison.pk)
    assert body["state"] == "failed" and "allow_outside_providers is off" in body["error"]
    assert scripted_judge.requests() == [] and not Output.objects.exists()


@pytest.mark.slow
def test_a_provider_column_cancelled_stops_calling(client, scientist, project, two_provider_models, scripted_judge,
                                                   inference_worker):
    scripted_judge.script([], default={"content": "slow", "delay_s": 1.0})
    client.force_login(scientist)
    prompts = [f"prompt {i}" for i in range(40)]
    response = create(client, project, models=[], provider_models=two_provider_models, prompts=prompts)
    comparison_id = response.json()["id"]
    wait_for(lambda: Comparison.objects.get(pk=comparison_id).cells_done >= 1, timeout=60, interval=0.05,
             what="the first cell")
    assert client.post(f"/api/comparisons/{comparison_id}/cancel/").json()["cancel_requested"]
    body = ended(client, comparison_id)
    assert body["state"] == "cancelled"
    sent = len(scripted_judge.requests())
    stored = Output.objects.filter(comparison_id=comparison_id).count()
    assert 1 <= stored < 40 and stored == body["cells_done"] and sent < 40
    time.sleep(1.5)  # no call starts after the cancel
    assert len(scripted_judge.requests()) == sent
