"""Launching a fine-tune: every check before a GPU is involved, each refusal naming its field,
with no job row left behind. No worker here: on_commit never fires inside these tests."""

import pytest

from apps.projects.models import AuditEvent
from apps.training.models import TrainingJob
from tests.training.fixtures import launch_body

pytestmark = pytest.mark.django_db


def post(client, project, body, **headers):
    return client.post(f"/api/projects/{project.pk}/jobs/", body, content_type="application/json", **headers)


def test_a_scientist_launches_a_job_that_pins_its_inputs_and_resolved_config(client, scientist, project, tiny_model,
                                                                            qa_version):
    client.force_login(scientist)
    response = post(client, project, launch_body(tiny_model, qa_version, batch_size=2))
    assert response.status_code == 201, response.content
    job = response.json()
    assert job["state"] == "queued" and job["queue_position"] == 1
    assert job["base_model"] == tiny_model.pk and job["dataset_version"] == qa_version.pk
    assert job["config"]["batch_size"] == 2 and job["config"]["lr_scheduler"] == "cosine"  # defaults resolved
    # The fixed sample prompts default to the first prompts of the evaluation split.
    assert job["config"]["sample_prompts"][0] == "what is the capital of france ?"
    event = AuditEvent.objects.get(action="job.launch")
    assert event.after["content_hash"] == qa_version.content_hash


@pytest.mark.parametrize("change, field", [
    ({"batch_size": 0}, "config.batch_size"),
    ({"learning_rate": -1e-4}, "config.learning_rate"),
    ({"learning_rate": "fast"}, "config.learning_rate"),
    ({"lora_dropout": 1.5}, "config.lora_dropout"),
    ({"max_seq_len": 100_000}, "config.max_seq_len"),  # beyond the tiny model's 256-token context
    ({"target_modules": ["q_proj", "attn_everything"]}, "config.target_modules"),
    ({"lr_scheduler": "exotic"}, "config.lr_scheduler"),
    ({"surprise": 1}, "config.surprise"),
    ({"format": "chat"}, "dataset_version"),  # no row has chat messages
    ({"fused_loss": "turbo"}, "config.fused_loss"),
    ({"fused_loss": "liger", "device": "cpu"}, "config.fused_loss"),  # Liger is CUDA only
    ({"compile": "yes"}, "config.compile"),
])
def test_a_bad_config_is_refused_naming_the_field_and_no_job_is_made(client, scientist, project, tiny_model,
                                                                     qa_version, change, field):
    client.force_login(scientist)
    response = post(client, project, launch_body(tiny_model, qa_version, **change))
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field, response.json()
    assert not TrainingJob.objects.exists()
    assert not AuditEvent.objects.filter(action="job.launch").exists()


def test_the_unknown_module_error_lists_the_modules_the_model_has(client, scientist, project, tiny_model,
                                                                   qa_version):
    client.force_login(scientist)
    body = post(client, project, launch_body(tiny_model, qa_version, target_modules=["attn_everything"])).json()
    assert "attn_everything" in body["detail"] and "q_proj" in body["detail"]


def test_inputs_of_another_project_are_refused_as_unknown(client, scientist, project, other_project, outsider,
                                                          tiny_model, qa_version):
    from tests.training.fixtures import make_version as other_version

    foreign_version = other_version(other_project, outsider, name="Theirs")
    client.force_login(scientist)
    response = post(client, project, {**launch_body(tiny_model, qa_version), "dataset_version": foreign_version.pk})
    assert response.status_code == 400 and response.json()["field"] == "dataset_version"
    assert "Theirs" not in response.content.decode()
    tiny_model.project = other_project
    tiny_model.save()
    response = post(client, project, launch_body(tiny_model, qa_version))
    assert response.status_code == 400 and response.json()["field"] == "base_model"
    assert not TrainingJob.objects.exists()


def test_splits_must_exist_and_differ(client, scientist, project, tiny_model, qa_version):
    client.force_login(scientist)
    body = post(client, project, {**launch_body(tiny_model, qa_version), "train_split": "holdout"}).json()
    assert body["field"] == "train_split" and "train, validation" in body["detail"]
    body = post(client, project, {**launch_body(tiny_model, qa_version), "eval_split": "train"}).json()
    assert body["field"] == "eval_split"
    assert not TrainingJob.objects.exists()


def test_a_model_still_converting_cannot_be_fine_tuned(client, scientist, project, tiny_model, qa_version):
    tiny_model.status = "converting"
    tiny_model.save()
    client.force_login(scientist)
    response = post(client, project, launch_body(tiny_model, qa_version))
    assert response.status_code == 400 and response.json()["field"] == "base_model"


@pytest.mark.parametrize("persona, status", [("annotator", 403), ("viewer", 403), ("outsider", 404)])
def test_people_without_job_launch_cannot_launch(request, client, project, tiny_model, qa_version, persona, status):
    client.force_login(request.getfixturevalue(persona))
    response = post(client, project, launch_body(tiny_model, qa_version))
    assert response.status_code == status
    assert not TrainingJob.objects.exists()


def test_an_idempotency_key_replay_returns_the_first_job_and_a_changed_body_conflicts(client, scientist, project,
                                                                                       tiny_model, qa_version):
    client.force_login(scientist)
    body = launch_body(tiny_model, qa_version)
    first = post(client, project, body, HTTP_IDEMPOTENCY_KEY="launch-1")
    again = post(client, project, body, HTTP_IDEMPOTENCY_KEY="launch-1")
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    changed = post(client, project, {**body, "name": "Other"}, HTTP_IDEMPOTENCY_KEY="launch-1")
    assert changed.status_code == 409
    assert TrainingJob.objects.count() == 1


def test_the_active_job_quota_answers_429_with_retry_after(client, settings, scientist, project, tiny_model,
                                                           qa_version):
    settings.TRAINING_MAX_ACTIVE_JOBS_PER_USER = 1
    client.force_login(scientist)
    assert post(client, project, launch_body(tiny_model, qa_version)).status_code == 201
    refused = post(client, project, launch_body(tiny_model, qa_version))
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "1 jobs queued or running" in refused.json()["detail"]
    assert TrainingJob.objects.count() == 1


def test_the_estimate_counts_examples_and_steps_and_estimates_memory_without_launching(client, scientist, project,
                                                                                       tiny_model, qa_version):
    client.force_login(scientist)
    response = client.post(f"/api/projects/{project.pk}/jobs/estimate/",
                           launch_body(tiny_model, qa_version, max_steps=None, epochs=2, batch_size=4),
                           content_type="application/json")
    assert response.status_code == 200, response.content
    estimate = response.json()
    assert estimate["examples"] == 24 and estimate["optimizer_steps"] == 12  # 24 rows x 2 epochs / 4
    assert set(estimate["memory"]) == {"bf16", "fp32"}
    assert estimate["memory"]["fp32"]["total_bytes"] > estimate["memory"]["bf16"]["total_bytes"] > 0
    # Nothing measured on this machine yet: a calibration run is queued for a worker, not run here.
    assert estimate["time_s"] is None and estimate["calibrating"] is True
    from apps.training.models import SpeedMeasurement

    assert SpeedMeasurement.objects.get().state == "pending"
    assert not TrainingJob.objects.exists()


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")  # peft 0.21 on transformers 5
@pytest.mark.parametrize("targets", ["attention", "all_linear", ["q_proj", "v_proj"]])
def test_the_estimate_counts_the_lora_parameters_peft_actually_trains(client, scientist, project, tiny_model,
                                                                       qa_version, targets):
    from pathlib import Path

    from workers.models import load_for_inference
    from workers.training import TrainConfig
    from workers.training.lora import add_lora

    client.force_login(scientist)
    estimate = client.post(f"/api/projects/{project.pk}/jobs/estimate/",
                           launch_body(tiny_model, qa_version, lora_r=8, target_modules=targets),
                           content_type="application/json").json()
    model, _ = load_for_inference(Path(tiny_model.weights_path))
    trained, _ = add_lora(model, TrainConfig(lora_r=8, target_modules=targets)).get_nb_trainable_parameters()
    assert estimate["trainable_parameters"] == trained
    assert {m["lora_parameters"] for m in estimate["memory"].values()} == {trained}


def test_a_queued_job_cancels_at_once_and_an_ended_one_cannot_be_cancelled(client, scientist, project, tiny_model,
                                                                          qa_version):
    client.force_login(scientist)
    job = post(client, project, launch_body(tiny_model, qa_version)).json()
    cancelled = client.post(f"/api/jobs/{job['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert client.post(f"/api/jobs/{job['id']}/cancel/").status_code == 409


def test_another_projects_job_is_not_found(client, outsider, scientist, project, tiny_model, qa_version):
    client.force_login(scientist)
    job = post(client, project, launch_body(tiny_model, qa_version)).json()
    client.force_login(outsider)
    for method, url in (("get", f"/api/jobs/{job['id']}/"), ("get", f"/api/jobs/{job['id']}/metrics/"),
                        ("post", f"/api/jobs/{job['id']}/cancel/"), ("post", f"/api/jobs/{job['id']}/copy/")):
        assert getattr(client, method)(url).status_code == 404
    assert TrainingJob.objects.get(pk=job["id"]).state == "queued"


def test_a_project_over_its_gpu_hour_budget_launches_nothing_until_an_admin_raises_it(client, scientist, admin,
                                                                                   project, tiny_model, qa_version):
    from datetime import timedelta

    from django.utils import timezone

    from tests.training.fixtures import make_job

    done = timezone.now()
    make_job(project, scientist, state="succeeded", started_at=done - timedelta(hours=2), finished_at=done)
    client.force_login(admin)
    assert client.patch(f"/api/projects/{project.pk}/", {"gpu_hour_budget": 1.5},
                        content_type="application/json").status_code == 200
    client.force_login(scientist)
    estimate = client.post(f"/api/projects/{project.pk}/jobs/estimate/", launch_body(tiny_model, qa_version),
                           content_type="application/json").json()
    assert estimate["gpu_hour_budget"] == 1.5 and estimate["gpu_hours_used"] == pytest.approx(2.0, abs=0.01)
    refused = post(client, project, launch_body(tiny_model, qa_version))
    assert refused.status_code == 409 and refused.json()["field"] == "gpu_hour_budget"
    assert "used 2.00 of its 1.5 GPU-hours" in refused.json()["detail"]
    assert TrainingJob.objects.count() == 1
    bad = client.patch(f"/api/projects/{project.pk}/", {"gpu_hour_budget": 5}, content_type="application/json")
    assert bad.status_code == 403  # scientists do not set budgets
    client.force_login(admin)
    assert client.patch(f"/api/projects/{project.pk}/", {"gpu_hour_budget": -1},
                        content_type="application/json").status_code == 400
    client.patch(f"/api/projects/{project.pk}/", {"gpu_hour_budget": None}, content_type="application/json")
    client.force_login(scientist)
    assert post(client, project, launch_body(tiny_model, qa_version)).status_code == 201


def test_priorities_order_the_queue_and_high_is_for_admins(client, scientist, admin, project, tiny_model,
                                                            qa_version):
    client.force_login(scientist)
    body = launch_body(tiny_model, qa_version)
    unknown = post(client, project, {**body, "priority": "urgent"})
    assert unknown.status_code == 400 and "not a valid choice" in unknown.json()["priority"][0]
    refused = post(client, project, {**body, "priority": "high"})
    assert refused.status_code == 403 and refused.json()["missing_permission"] == "project.edit"
    normal = post(client, project, body).json()
    low = post(client, project, {**body, "priority": "low"}).json()
    client.force_login(admin)
    high = post(client, project, {**body, "priority": "high"}).json()
    assert high["priority"] == "high" and high["queue_position"] == 1
    positions = {job["priority"]: client.get(f"/api/jobs/{job['id']}/").json()["queue_position"]
                 for job in (normal, low)}
    assert positions == {"normal": 2, "low": 3}


def test_a_job_names_its_data_by_dataset_and_version_number_as_the_urls_do(client, scientist, project, tiny_model,
                                                                           qa_version):
    client.force_login(scientist)
    body = {k: v for k, v in launch_body(tiny_model, qa_version).items() if k != "dataset_version"}
    by_number = client.post(f"/api/projects/{project.pk}/jobs/estimate/",
                            {**body, "dataset": qa_version.dataset_id, "version": qa_version.number},
                            content_type="application/json")
    assert by_number.status_code == 200, by_number.content
    missing = client.post(f"/api/projects/{project.pk}/jobs/",
                          {**body, "dataset": qa_version.dataset_id, "version": qa_version.number + 5},
                          content_type="application/json")
    assert missing.status_code == 400 and missing.json()["field"] == "version"
    half = client.post(f"/api/projects/{project.pk}/jobs/", {**body, "dataset": qa_version.dataset_id},
                       content_type="application/json")
    assert half.status_code == 400 and "version" in half.json()
    launched = client.post(f"/api/projects/{project.pk}/jobs/",
                           {**body, "dataset": qa_version.dataset_id, "version": qa_version.number},
                           content_type="application/json")
    assert launched.status_code == 201, launched.content
    assert launched.json()["dataset_version"] == qa_version.pk
