"""Production traffic back into data (#19 item 5): an alias logs its /v1 traffic (off by default,
sampled, personal data replaced before anything is stored, kept for its retention); clients send
feedback on an answer by its id; captures become a dataset version through the import pipeline.
End to end with the `openai` client, the real server and real workers."""

import time
from datetime import timedelta

import openai
import pytest
import requests
from django.utils import timezone

from apps.accounts import services as account_services
from apps.datasets.models import Dataset, DatasetRow, ImportJob
from apps.projects.models import AuditEvent
from apps.registry.models import ModelAlias
from apps.registry.services import alias_set
from apps.serving.captures import capture_generation, captures_expire, sampled
from apps.serving.models import Capture, Generation
from tests.conftest import wait_for
from tests.serving.fixtures import alias_family_fixture, ready  # noqa: F401

PERSONAL = "I am ada@example.com, call me on +44 20 7946 0958. What is the capital of France?"


def token(owner, project, permissions) -> str:
    return account_services.token_create(user=owner, name="api", permissions=list(permissions), project=project,
                                         expires_at=timezone.now() + timedelta(days=1))[1]


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_captured_redacted_with_feedback_then_a_dataset_version(
        owner, project, tiny_model, inference_worker, celery_worker, live_asgi):
    alias_set(user=owner, model=tiny_model, name="production", version=tiny_model.pk)
    admin = {"Authorization": f"Bearer {token(owner, project, ('model.view', 'model.alias', 'dataset.view', 'dataset.import'))}"}
    settings_url = f"{live_asgi}/api/models/{tiny_model.pk}/aliases/production/capture/"
    assert requests.get(settings_url, headers=admin, timeout=10).json()["enabled"] is False  # off by default
    key = token(owner, project, ("project.view", "model.view", "model.generate"))
    api = openai.OpenAI(base_url=f"{live_asgi}/v1", max_retries=0, timeout=60, api_key=key)
    before = api.chat.completions.create(model=tiny_model.name, messages=[{"role": "user", "content": PERSONAL}],
                                         max_tokens=3, temperature=0)
    # The worker captures (or not) just after the answer's last event: let it finish with `before`
    # before logging goes on, or it would see logging on already.
    wait_for(lambda: Generation.objects.filter(pk=int(before.id.split("-")[1]), state="succeeded").exists(),
             what="the first answer's end")
    time.sleep(1)

    switched = requests.put(settings_url, json={"enabled": True, "retention_days": 7}, headers=admin, timeout=10)
    assert switched.status_code == 200 and switched.json() == {"name": "production", "enabled": True,
                                                               "sample_rate": 1.0, "retention_days": 7, "redact": True}
    answer = api.chat.completions.create(model=tiny_model.name, messages=[{"role": "user", "content": PERSONAL}],
                                         max_tokens=3, temperature=0)
    capture = wait_for(lambda: Capture.objects.filter(completion_id=answer.id).first(), what="the capture")
    assert not Capture.objects.filter(completion_id=before.id).exists()  # logging was off then
    stored = capture.messages[0]["content"]
    assert "ada@example.com" not in stored and "7946" not in stored and "[EMAIL]" in stored and "[PHONE]" in stored
    assert capture.redacted and capture.redactions >= 2 and capture.version_id == tiny_model.pk
    assert "ada@example.com" not in capture.response

    feedback = f"{live_asgi}/v1/feedback"
    headers = {"Authorization": f"Bearer {key}"}
    given = requests.post(feedback, json={"completion_id": answer.id, "score": 1,
                                          "comment": "good, write to me at ada@example.com"}, headers=headers, timeout=10)
    assert given.status_code == 200 and given.json() == {"completion_id": answer.id, "choice_index": 0,
                                                         "recorded": True}
    capture.refresh_from_db()
    assert capture.feedback_score == 1.0 and "ada@example.com" not in capture.feedback_comment
    missing = requests.post(feedback, json={"completion_id": before.id, "score": 1}, headers=headers, timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "completion_id"
    for body, param in (({"completion_id": answer.id, "score": "great"}, "score"),
                        ({"completion_id": answer.id, "score": 1, "comment": "x" * 2001}, "comment"),
                        ({"score": 1}, "completion_id")):
        refused = requests.post(feedback, json=body, headers=headers, timeout=10)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param, refused.content
    assert requests.post(feedback, data=b"{not json", headers=headers, timeout=10).json()["error"]["param"] == "body"

    listed = requests.get(f"{live_asgi}/api/models/{tiny_model.pk}/aliases/production/captures/?feedback=positive",
                          headers=admin, timeout=10).json()
    assert [c["completion_id"] for c in listed["results"]] == [answer.id]

    dataset = Dataset.objects.create(project=project, name="From production", created_by=owner)
    made = requests.post(f"{live_asgi}/api/models/{tiny_model.pk}/aliases/production/captures/dataset/",
                         json={"dataset": dataset.pk, "feedback": "positive"}, headers=admin, timeout=30)
    assert made.status_code == 202, made.content
    job = wait_for(lambda: ImportJob.objects.filter(pk=made.json()["import_job"], state="succeeded").first(),
                   timeout=120, what="the import of the captures")
    row = DatasetRow.objects.get(version=job.version)
    assert row.ext_id == answer.id and row.messages == capture.messages
    assert (row.response or "") == capture.response  # the tiny model's answer may be empty text
    assert "ada@example.com" not in str(row.messages) and float(row.metadata["feedback_score"]) == 1.0
    assert AuditEvent.objects.filter(action="model.captures_to_dataset").count() == 1


@pytest.mark.django_db
def test_sampling_follows_the_rate_and_is_the_same_everywhere(family, project, owner):
    base, _, alias = family
    ModelAlias.objects.filter(pk=alias.pk).update(capture_enabled=True, capture_sample_rate=0.25,
                                                  capture_redact=False)
    kept = []
    for _ in range(200):
        generation = Generation.objects.create(project=project, model=base, alias=alias, source="api", params={},
                                               messages=[{"role": "user", "content": "hi"}], state="succeeded",
                                               output="hello", total_s=0.1)
        kept.append(capture_generation(generation) is not None)
        assert kept[-1] == sampled(generation.pk, 0.25)
    assert 30 <= sum(kept) <= 70  # a quarter of 200, within the hash's spread
    playground = Generation.objects.create(project=project, model=base, alias=alias, source="playground", params={},
                                           messages=[{"role": "user", "content": "hi"}], state="succeeded", output="x")
    assert capture_generation(playground) is None  # only API traffic is production traffic
    assert Capture.objects.get(generation=Generation.objects.filter(capture__isnull=False).first()).messages == [
        {"role": "user", "content": "hi"}]  # not redacted: the raw text when redaction is off


@pytest.mark.django_db
def test_captures_expire_after_their_alias_retention(family, project):
    base, _, alias = family
    ModelAlias.objects.filter(pk=alias.pk).update(capture_retention_days=3)

    def capture(days_ago: int) -> Capture:
        row = Capture.objects.create(project=project, alias=alias, version=base, completion_id=f"cmpl-{days_ago}",
                                     messages=[], response="")
        Capture.objects.filter(pk=row.pk).update(created_at=timezone.now() - timedelta(days=days_ago, minutes=1))
        return row

    old, recent = capture(4), capture(2)
    assert captures_expire() == 1
    assert list(Capture.objects.values_list("pk", flat=True)) == [recent.pk]
    assert old.pk not in set(Capture.objects.values_list("pk", flat=True))


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "field"), [
    ({"enabled": True, "retention_days": -1}, "retention_days"),
    ({"enabled": True, "retention_days": 0}, "retention_days"),
    ({"enabled": True, "sample_rate": 0}, "sample_rate"),
    ({"enabled": True, "sample_rate": 1.5}, "sample_rate"),
    ({"enabled": "maybe"}, "enabled"),
    ({}, "enabled"),
])
def test_bad_capture_settings_are_refused_naming_the_field(family, client, scientist, body, field):
    base, _, alias = family
    client.force_login(scientist)
    refused = client.put(f"/api/models/{base.pk}/aliases/production/capture/", body, content_type="application/json")
    assert refused.status_code == 400 and field in refused.content.decode(), refused.content
    alias.refresh_from_db()
    assert not alias.capture_enabled and not AuditEvent.objects.filter(action="model.alias_capture").exists()


@pytest.mark.django_db
def test_captures_to_a_dataset_refuse_what_is_not_there(family, client, scientist, project, other_project):
    base, _, alias = family
    client.force_login(scientist)
    url = f"/api/models/{base.pk}/aliases/production/captures/dataset/"
    mine = Dataset.objects.create(project=project, name="Mine")
    theirs = Dataset.objects.create(project=other_project, name="Theirs")
    nothing = client.post(url, {"dataset": mine.pk}, content_type="application/json")
    assert nothing.status_code == 400 and "filters" in nothing.content.decode()
    Capture.objects.create(project=project, alias=alias, version=base, completion_id="cmpl-1", messages=[],
                           response="")
    elsewhere = client.post(url, {"dataset": theirs.pk}, content_type="application/json")
    assert elsewhere.status_code == 404 and "dataset" in elsewhere.content.decode()
    backwards = client.post(url, {"dataset": mine.pk, "since": "2026-02-01T00:00:00Z",
                                  "until": "2026-01-01T00:00:00Z"}, content_type="application/json")
    assert backwards.status_code == 400 and "since" in backwards.content.decode()
    assert client.get(f"/api/models/{base.pk}/aliases/production/captures/?feedback=loud").status_code == 400
    assert not ImportJob.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_feedback_reaches_each_of_the_n_choices_of_a_request(owner, project, tiny_model, inference_worker, live_asgi):
    alias = alias_set(user=owner, model=tiny_model, name="production", version=tiny_model.pk)
    ModelAlias.objects.filter(pk=alias.pk).update(capture_enabled=True, capture_redact=False)
    key = token(owner, project, ("project.view", "model.view", "model.generate"))
    api = openai.OpenAI(base_url=f"{live_asgi}/v1", max_retries=0, timeout=60, api_key=key)
    answer = api.chat.completions.create(model=tiny_model.name, messages=[{"role": "user", "content": "Hello"}],
                                         max_tokens=3, temperature=1.0, seed=7, n=3)
    assert [choice.index for choice in answer.choices] == [0, 1, 2]
    captures = wait_for(lambda: len(found := list(Capture.objects.filter(completion_id=answer.id)
                                                  .order_by("choice_index"))) == 3 and found,
                        what="the three choices' captures")
    assert [c.choice_index for c in captures] == [0, 1, 2]  # one request: all in the sample, one id
    assert [c.response for c in captures] == [choice.message.content or "" for choice in answer.choices]

    feedback, headers = f"{live_asgi}/v1/feedback", {"Authorization": f"Bearer {key}"}
    for index, score in ((2, -1), (0, 1)):
        given = requests.post(feedback, json={"completion_id": answer.id, "choice_index": index, "score": score,
                                              "comment": f"choice {index}"}, headers=headers, timeout=10)
        assert given.status_code == 200 and given.json() == {"completion_id": answer.id, "choice_index": index,
                                                             "recorded": True}
    for capture in captures:
        capture.refresh_from_db()
    assert [(c.feedback_score, c.feedback_comment) for c in captures] == [(1.0, "choice 0"), (None, ""),
                                                                         (-1.0, "choice 2")]
    for index in (3, 99, -1, "1", 1.0, True, None, [1]):
        refused = requests.post(feedback, json={"completion_id": answer.id, "choice_index": index, "score": 1},
                                headers=headers, timeout=10)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "choice_index", (index, refused.text)
    assert "has 3 choices (0 to 2)" in requests.post(
        feedback, json={"completion_id": answer.id, "choice_index": 3, "score": 1}, headers=headers,
        timeout=10).json()["error"]["message"]
    assert Capture.objects.get(completion_id=answer.id, choice_index=1).feedback_score is None  # nothing leaked
