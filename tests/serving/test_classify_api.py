"""Serving a classifier: texts posted to a classifier adapter are classified on a real `inference`
worker (labels with class probabilities, in the texts' order); bad requests are 400s naming the field."""

import pytest

from apps.registry.models import RegisteredModel
from apps.serving.models import Classification
from apps.serving.services import MAX_CLASSIFY_CHARS, MAX_CLASSIFY_TEXTS
from tests.conftest import wait_for
from tests.training.test_classify_jobs import classify_body, keyword_records, labelled_version


def classifier_adapter(project, owner, tiny_model) -> RegisteredModel:
    """A ready adapter whose lineage says it is a classifier (its files are never read by these tests)."""
    return RegisteredModel.objects.create(
        project=project, name="Topics", format="hf_dir", kind="adapter", base_model=tiny_model, source_path="/x",
        weights_path="/x", status="ready", info=tiny_model.info, created_by=owner,
        lineage={"config": {"method": "classify", "class_labels": ["city", "country"]}})


@pytest.mark.django_db
@pytest.mark.parametrize("body, field", [
    ({}, "texts"),
    ({"texts": []}, "texts"),
    ({"texts": "what is paris ?"}, "texts"),
    ({"texts": [3]}, "texts"),
    ({"texts": [""]}, "texts"),
    ({"texts": ["ok", "nul \x00 inside"]}, "texts"),
    ({"texts": ["x" * (MAX_CLASSIFY_CHARS + 1)]}, "texts"),
    ({"texts": ["paris"] * (MAX_CLASSIFY_TEXTS + 1)}, "texts"),
    ({"texts": None}, "texts"),
])
def test_bad_classify_requests_are_400s_naming_the_field(client, scientist, owner, project, tiny_model, body, field):
    adapter = classifier_adapter(project, owner, tiny_model)
    client.force_login(scientist)
    response = client.post(f"/api/models/{adapter.pk}/classify/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert not Classification.objects.exists()


@pytest.mark.django_db
def test_a_model_that_is_not_a_classifier_is_refused_and_other_projects_see_nothing(client, scientist, outsider,
                                                                                     owner, project, tiny_model):
    client.force_login(scientist)
    response = client.post(f"/api/models/{tiny_model.pk}/classify/", {"texts": ["paris"]},
                           content_type="application/json")
    assert response.status_code == 400 and response.json()["field"] == "model"
    assert "not a classifier" in response.json()["detail"]
    adapter = classifier_adapter(project, owner, tiny_model)
    job = Classification.objects.create(project=project, model=adapter, user=owner, texts=["paris"])
    client.force_login(outsider)
    assert client.post(f"/api/models/{adapter.pk}/classify/", {"texts": ["paris"]},
                       content_type="application/json").status_code == 404
    assert client.get(f"/api/classifications/{job.pk}/").status_code == 404


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_trained_classifier_labels_texts_on_an_inference_worker(client, scientist, owner, project, tiny_model,
                                                                  celery_worker, inference_worker):
    version = labelled_version(project, owner, keyword_records(96, seed=1), keyword_records(24, seed=2))
    client.force_login(scientist)
    body = classify_body(tiny_model, version, max_steps=40, eval_every=40, batch_size=8, learning_rate=2e-2,
                         lora_r=8, lora_alpha=8, target_modules="all_linear")
    job_id = client.post(f"/api/projects/{project.pk}/jobs/", body, content_type="application/json").json()["id"]

    def ended(url):
        answer = client.get(url).json()
        return answer if answer["state"] in ("succeeded", "failed", "cancelled") else None

    job = wait_for(lambda: ended(f"/api/jobs/{job_id}/"), timeout=180, interval=0.2, what="the classifier job")
    assert job["state"] == "succeeded", (job["error"], job["traceback"])

    texts = ["what is paris ?", "the capital of france", "paris", "france ?", "of the capital paris is what"]
    response = client.post(f"/api/models/{job['adapter']}/classify/", {"texts": texts}, content_type="application/json")
    assert response.status_code == 202, response.content
    assert response.json()["state"] == "queued" and response.json()["count"] == 5
    answer = wait_for(lambda: ended(f"/api/classifications/{response.json()['id']}/"), timeout=120, interval=0.2,
                      what="the classification")
    assert answer["state"] == "succeeded", answer["error"]
    assert [r["label"] for r in answer["results"]] == ["city", "country", "city", "country", "city"]
    for result in answer["results"]:
        assert set(result["probabilities"]) == {"city", "country"}
        assert sum(result["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
        assert result["probabilities"][result["label"]] > 0.5
