"""Preference tuning jobs: DPO on rows with a rejected answer (as annotation and comparison
exports write them), launched through the API and run by a real worker."""

import pytest

from apps.datasets.models import Dataset
from apps.datasets.writer import write_version
from apps.registry.models import RegisteredModel
from apps.training.models import MetricPoint, TrainingJob
from tests.conftest import wait_for
from tests.training.fixtures import QA, launch_body

WRONG = {"paris": "france", "the capital of france": "paris", "france": "paris",
         "paris is the capital of france": "what is paris ?"}


def preference_version(project, owner):
    """Prompt, chosen (the response) and rejected, the shape of a preference export."""
    records = [{"prompt": p, "chosen": r, "rejected": WRONG[r]} for p, r in QA * 3]
    dataset = Dataset.objects.create(project=project, name="Preferences", created_by=owner)
    return write_version(dataset=dataset, records=records, author=owner, roles={"prompt": "prompt",
                                                                                  "chosen": "response"},
                         splits=["train"] * (len(records) - len(QA)) + ["validation"] * len(QA))


def dpo_body(model, version, **config):
    return launch_body(model, version, **{"method": "dpo", "dpo_beta": 0.5, **config})


@pytest.mark.django_db
def test_dpo_on_rows_without_a_rejected_answer_is_refused_naming_the_version(client, scientist, project, tiny_model,
                                                                             qa_version):
    client.force_login(scientist)
    response = client.post(f"/api/projects/{project.pk}/jobs/", dpo_body(tiny_model, qa_version),
                           content_type="application/json")
    assert response.status_code == 400
    assert response.json()["field"] == "dataset_version" and "rejected" in response.json()["detail"]
    bad_beta = client.post(f"/api/projects/{project.pk}/jobs/", dpo_body(tiny_model, qa_version, dpo_beta=-1),
                           content_type="application/json")
    assert bad_beta.json()["field"] == "config.dpo_beta"
    assert not TrainingJob.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_dpo_job_learns_the_preferences_and_registers_its_adapter(client, scientist, owner, project, tiny_model,
                                                                   celery_worker):
    version = preference_version(project, owner)
    client.force_login(scientist)
    response = client.post(f"/api/projects/{project.pk}/jobs/", dpo_body(tiny_model, version),
                           content_type="application/json")
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    assert response.json()["method"] == "dpo"

    def ended():
        job = client.get(f"/api/jobs/{job_id}/").json()
        return job if job["state"] in ("succeeded", "failed", "cancelled") else None

    job = wait_for(ended, timeout=180, interval=0.2, what="the DPO job")
    assert job["state"] == "succeeded", (job["error"], job["traceback"])
    evals = [p.values for p in MetricPoint.objects.filter(job_id=job_id, kind="eval").order_by("step")]
    assert evals[0]["step"] == 0 and evals[0]["eval_reward_accuracy"] == 0.0  # the base: no preference yet
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"] and evals[-1]["eval_reward_accuracy"] >= 0.8
    steps = MetricPoint.objects.filter(job_id=job_id, kind="train").order_by("step").last().values
    assert {"reward_margin", "reward_accuracy"} <= set(steps)
    adapter = RegisteredModel.objects.get(pk=job["adapter"])
    assert adapter.lineage["config"]["method"] == "dpo" and adapter.base_model_id == tiny_model.pk
