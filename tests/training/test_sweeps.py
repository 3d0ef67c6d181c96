"""Sweeps: a grid or a seeded random sample of the config launches up to K jobs on one dataset version and
priority; the quota and the GPU-hour budget are checked for the whole sweep before any job exists; bad input
names its field; cancelling the sweep cancels its jobs; the jobs rank by eval loss. One test runs a sweep's
jobs on a real worker."""

import pytest

from apps.projects.models import AuditEvent
from apps.training.models import SpeedMeasurement, Sweep, TrainingJob
from tests.training.fixtures import FAST, make_job
from tests.training.test_jobs_run import ended

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def sweep_body(model, version, **fields) -> dict:
    return {"name": "LR sweep", "base_model": model.pk, "dataset_version": version.pk, "train_split": "train",
            "eval_split": "validation", "config": dict(FAST), "strategy": "grid",
            "space": {"learning_rate": [1e-3, 1e-2], "lora_r": [4, 8]}, "max_jobs": 4, **fields}


def post(client, project, body):
    return client.post(f"/api/projects/{project.pk}/sweeps/", body, content_type="application/json")


def points(body: dict) -> list[dict]:
    return [trial["point"] for trial in sorted(body["trials"], key=lambda t: t["job"])]


def test_a_grid_launches_every_combination_sharing_the_version_config_and_priority(client, admin, project,
                                                                                  tiny_model, qa_version):
    client.force_login(admin)
    response = post(client, project, sweep_body(tiny_model, qa_version, priority="high"))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == "running" and body["strategy"] == "grid" and body["priority"] == "high"
    assert points(body) == [{"learning_rate": 1e-3, "lora_r": 4}, {"learning_rate": 1e-3, "lora_r": 8},
                            {"learning_rate": 1e-2, "lora_r": 4}, {"learning_rate": 1e-2, "lora_r": 8}]
    jobs = list(TrainingJob.objects.filter(sweep_id=body["id"]).order_by("pk"))
    assert len(jobs) == 4 and {j.state for j in jobs} == {"queued"}
    assert {(j.dataset_version_id, j.base_model_id, j.train_split, j.eval_split, j.priority) for j in jobs} == {
        (qa_version.pk, tiny_model.pk, "train", "validation", TrainingJob.Priority.HIGH)}
    assert [(j.config["learning_rate"], j.config["lora_r"]) for j in jobs] == [(1e-3, 4), (1e-3, 8), (1e-2, 4),
                                                                               (1e-2, 8)]
    assert all(j.config["max_steps"] == 30 and j.config["lora_alpha"] == 8 for j in jobs)  # the shared config
    assert jobs[0].name == "LR sweep · learning_rate=0.001 lora_r=4"
    assert list(AuditEvent.objects.filter(project=project).exclude(action="model.register").values_list(
        "action", flat=True)) == ["sweep.launch"]
    assert [t["rank"] for t in body["trials"]] == [None] * 4  # nothing evaluated yet


def test_a_seeded_random_sample_gives_k_distinct_points_in_range_and_the_same_ones_for_the_same_seed(
        client, scientist, project, tiny_model, qa_version, settings):
    settings.TRAINING_MAX_ACTIVE_JOBS_PER_USER = settings.TRAINING_MAX_ACTIVE_JOBS_PER_PROJECT = 20
    client.force_login(scientist)
    space = {"learning_rate": {"min": 1e-4, "max": 1e-1, "log": True}, "lora_r": [2, 4, 8], "epochs": {"min": 1,
                                                                                                      "max": 3}}

    def sample(seed):
        response = post(client, project, sweep_body(tiny_model, qa_version, strategy="random", space=space,
                                                    max_jobs=5, seed=seed))
        assert response.status_code == 201, response.content
        return points(response.json())

    first, again, other = sample(7), sample(7), sample(8)
    assert first == again and first != other
    assert len(first) == 5 and len({tuple(p.values()) for p in first}) == 5
    for point in first + other:
        assert 1e-4 <= point["learning_rate"] <= 1e-1 and point["lora_r"] in (2, 4, 8) and point["epochs"] in (1, 2, 3)
        assert isinstance(point["epochs"], int)


def test_a_random_sample_of_a_small_space_launches_only_its_distinct_points(client, scientist, project, tiny_model,
                                                                           qa_version):
    client.force_login(scientist)
    response = post(client, project, sweep_body(tiny_model, qa_version, strategy="random",
                                                space={"lora_r": [4, 8]}, max_jobs=4))
    assert response.status_code == 201, response.content
    assert sorted(p["lora_r"] for p in points(response.json())) == [4, 8]


@pytest.mark.parametrize("change, field, words", [
    ({"space": {}}, "space", "at least one option"),
    ({"space": []}, "space", "at least one option"),
    ({"space": {"learning_rate": []}}, "space.learning_rate", "empty"),
    ({"space": {"learning_rate": ["abc", 0.01]}}, "space.learning_rate", "'abc' is not a number"),
    ({"space": {"learning_rate": [True]}}, "space.learning_rate", "not a number"),
    ({"space": {"lora_r": [4.5]}}, "space.lora_r", "whole number"),
    ({"space": {"learning_rate": [0.0]}}, "space.learning_rate", "greater than 0"),
    ({"space": {"lora_dropout": [0.1]}}, "space.lora_dropout", "not an option a sweep varies"),
    ({"space": {"learning_rate": {"min": 1e-3, "max": 1e-2}}}, "space.learning_rate", "list of values"),
    ({"strategy": "random", "space": {"learning_rate": {"min": 1e-2, "max": 1e-3}}}, "space.learning_rate",
     "above max"),
    ({"strategy": "random", "space": {"learning_rate": {"min": 0, "max": 1e-3, "log": True}}},
     "space.learning_rate", "log range"),
    ({"strategy": "random", "space": {"learning_rate": {"min": "x", "max": 1e-3}}}, "space.learning_rate.min",
     "not a number"),
    ({"strategy": "bayes"}, "strategy", "grid or random"),
    ({"max_jobs": 0}, "max_jobs", "from 1 to 16"),
    ({"max_jobs": 17}, "max_jobs", "from 1 to 16"),
    ({"max_jobs": 3}, "max_jobs", "the grid has 4 combinations"),
    ({"seed": -1}, "seed", "from 0"),
    ({"config": {"batch_size": 0}}, "config.batch_size", "at least 1"),
])
def test_bad_input_is_refused_naming_its_field_and_launches_nothing(client, scientist, project, tiny_model, qa_version,
                                                                   change, field, words):
    client.force_login(scientist)
    response = post(client, project, {**sweep_body(tiny_model, qa_version), **change})
    assert response.status_code == 400, response.content
    body = response.json()
    assert body.get("field") == field and words in body["detail"], body
    assert not Sweep.objects.exists() and not TrainingJob.objects.exists()


@pytest.mark.parametrize("change, field", [({"max_jobs": "many"}, "max_jobs"), ({"name": ""}, "name"),
                                           ({"space": None}, "space"), ({"seed": "x"}, "seed")])
def test_input_of_the_wrong_type_is_refused_by_the_serializer_naming_its_field(client, scientist, project,
                                                                               tiny_model, qa_version, change, field):
    client.force_login(scientist)
    response = post(client, project, {**sweep_body(tiny_model, qa_version), **change})
    assert response.status_code == 400 and field in response.json(), response.content
    assert not TrainingJob.objects.exists()


def test_the_limit_on_k_follows_the_setting(client, scientist, project, tiny_model, qa_version, settings):
    settings.TRAINING_SWEEP_MAX_JOBS = 2
    client.force_login(scientist)
    response = post(client, project, sweep_body(tiny_model, qa_version, space={"lora_r": [4, 8, 16]}, max_jobs=3))
    assert response.status_code == 400 and response.json()["field"] == "max_jobs"
    assert "from 1 to 2" in response.json()["detail"]


def measured_speed(model) -> None:
    """A finished job's speed on the model, so estimates have a time: 1e6 FLOP/s makes each of these jobs
    take about a minute and a half."""
    SpeedMeasurement.objects.create(kind="job", base_model=model, method="sft", parameters=model.info["parameters"],
                                    device="cpu", flops_per_s=1e6, seconds_per_step=0.1, seconds_per_eval=0.1,
                                    setup_s=1.0, chars_per_token=4.0)


def test_the_budget_is_checked_for_the_whole_sweep_before_any_job_is_created(client, scientist, project, tiny_model,
                                                                             qa_version):
    measured_speed(tiny_model)
    client.force_login(scientist)
    estimate = client.post(f"/api/projects/{project.pk}/jobs/estimate/",
                           {k: v for k, v in sweep_body(tiny_model, qa_version).items()
                            if k not in ("strategy", "space", "max_jobs")}, content_type="application/json").json()
    one_job_hours = estimate["time_s"] / 3600
    # Room for one job, and for two, but not for the sweep's four.
    project.gpu_hour_budget = one_job_hours * 2.5
    project.save(update_fields=["gpu_hour_budget"])
    refused = post(client, project, sweep_body(tiny_model, qa_version))
    assert refused.status_code == 409, refused.content
    assert refused.json()["field"] == "gpu_hour_budget" and "4 jobs need about" in refused.json()["detail"]
    assert not Sweep.objects.exists() and not TrainingJob.objects.exists()

    # A sweep that fits is launched, its estimate kept.
    fits = post(client, project, sweep_body(tiny_model, qa_version, space={"learning_rate": [1e-3, 1e-2]}))
    assert fits.status_code == 201, fits.content
    assert fits.json()["estimated_gpu_hours"] == pytest.approx(2 * one_job_hours, rel=0.05)


def test_with_a_budget_and_no_speed_measured_a_sweep_is_refused_and_a_calibration_queued(client, scientist, project,
                                                                                         tiny_model, qa_version):
    project.gpu_hour_budget = 100
    project.save(update_fields=["gpu_hour_budget"])
    client.force_login(scientist)
    refused = post(client, project, sweep_body(tiny_model, qa_version))
    assert refused.status_code == 409 and refused.json()["field"] == "gpu_hour_budget"
    assert "calibration" in refused.json()["detail"]
    assert not TrainingJob.objects.exists()
    assert SpeedMeasurement.objects.filter(kind="calibration").exists()


def test_the_active_job_quota_counts_the_whole_sweep(client, scientist, project, tiny_model, qa_version, settings):
    settings.TRAINING_MAX_ACTIVE_JOBS_PER_USER = 3
    client.force_login(scientist)
    refused = post(client, project, sweep_body(tiny_model, qa_version))
    assert refused.status_code == 429 and "4 jobs" in refused.json()["detail"]
    assert not Sweep.objects.exists() and not TrainingJob.objects.exists()


def test_cancelling_the_sweep_cancels_its_jobs_that_have_not_ended(client, scientist, project, tiny_model,
                                                                   qa_version):
    client.force_login(scientist)
    sweep = post(client, project, sweep_body(tiny_model, qa_version)).json()
    queued, running, done, other = TrainingJob.objects.filter(sweep_id=sweep["id"]).order_by("pk")
    TrainingJob.objects.filter(pk=running.pk).update(state="running")
    TrainingJob.objects.filter(pk=done.pk).update(state="succeeded")
    outside = make_job(project, scientist, state="queued")  # not the sweep's

    response = client.post(f"/api/sweeps/{sweep['id']}/cancel/")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "cancelled"
    states = dict(TrainingJob.objects.values_list("pk", "state"))
    assert (states[queued.pk], states[other.pk], states[running.pk], states[done.pk]) == (
        "cancelled", "cancelled", "running", "succeeded")
    assert TrainingJob.objects.get(pk=running.pk).cancel_requested  # its worker stops it at the next step
    assert states[outside.pk] == "queued"
    assert AuditEvent.objects.filter(action="sweep.cancel").count() == 1
    assert client.post(f"/api/sweeps/{sweep['id']}/cancel/").status_code == 409


def test_another_projects_sweep_is_not_found(client, scientist, outsider, project, tiny_model, qa_version):
    client.force_login(scientist)
    sweep = post(client, project, sweep_body(tiny_model, qa_version)).json()
    client.force_login(outsider)
    assert client.get(f"/api/sweeps/{sweep['id']}/").status_code == 404
    assert client.post(f"/api/sweeps/{sweep['id']}/cancel/").status_code == 404
    assert client.get(f"/projects/{project.pk}/sweeps/{sweep['id']}/").status_code == 404
    assert TrainingJob.objects.filter(state="queued").count() == 4


def test_the_jobs_rank_by_eval_loss_lowest_first_those_without_one_last(client, scientist, project, tiny_model,
                                                                        qa_version):
    client.force_login(scientist)
    sweep = post(client, project, sweep_body(tiny_model, qa_version)).json()
    a, b, c, d = TrainingJob.objects.filter(sweep_id=sweep["id"]).order_by("pk")
    TrainingJob.objects.filter(pk=a.pk).update(state="succeeded", metrics={"eval_loss": 2.5})
    TrainingJob.objects.filter(pk=b.pk).update(state="succeeded", metrics={"eval_loss": 1.5})
    c.points.create(kind="eval", step=0, values={"eval_loss": 0.1})  # the base model: not the job's
    c.points.create(kind="eval", step=10, values={"eval_loss": 2.0})  # running: its latest evaluation
    body = client.get(f"/api/sweeps/{sweep['id']}/").json()
    assert [(t["rank"], t["job"], t["eval_loss"]) for t in body["trials"]] == [
        (1, b.pk, 1.5), (2, c.pk, 2.0), (3, a.pk, 2.5), (None, d.pk, None)]
    assert body["objective"] == "eval_loss" and [t["score"] for t in body["trials"]] == [1.5, 2.0, 2.5, None]
    listed = client.get(f"/api/projects/{project.pk}/sweeps/").json()["results"]
    assert [s["id"] for s in listed] == [sweep["id"]]


def test_a_classifier_sweep_ranks_by_eval_macro_f1_highest_first_not_by_its_loss(client, scientist, project,
                                                                                 tiny_model, qa_version):
    # The rows a classifier sweep's launch writes (its jobs' metrics as classify runs report them).
    sweep = Sweep.objects.create(project=project, name="Classifier", strategy="grid",
                                 space={"learning_rate": [1e-3, 1e-2, 1e-1]}, max_jobs=3, base_model=tiny_model,
                                 dataset_version=qa_version, train_split="train", eval_split="validation",
                                 base_config={"method": "classify", "class_labels": ["a", "b"]}, created_by=scientist)
    a, b, c = [TrainingJob.objects.create(project=project, name=f"job {i}", sweep=sweep, base_model=tiny_model,
                                          dataset_version=qa_version, config={"method": "classify"},
                                          created_by=scientist) for i in range(3)]
    # b has the lowest loss yet the worst macro-F1 (it predicts the common class): a wins.
    TrainingJob.objects.filter(pk=a.pk).update(state="succeeded", metrics={"eval_loss": 0.9, "eval_macro_f1": 0.8})
    TrainingJob.objects.filter(pk=b.pk).update(state="succeeded", metrics={"eval_loss": 0.4, "eval_macro_f1": 0.45})
    c.points.create(kind="eval", step=10, values={"eval_loss": 0.7, "eval_macro_f1": 0.6})  # running
    client.force_login(scientist)
    body = client.get(f"/api/sweeps/{sweep.pk}/").json()
    assert body["objective"] == "eval_macro_f1"
    assert [(t["rank"], t["job"], t["score"], t["eval_loss"]) for t in body["trials"]] == [
        (1, a.pk, 0.8, 0.9), (2, c.pk, 0.6, 0.7), (3, b.pk, 0.45, 0.4)]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.django_db(transaction=True)  # the worker process reads what the test wrote
def test_a_sweeps_jobs_run_on_a_real_worker_and_the_best_is_ranked_first(client, scientist, project, tiny_model,
                                                                         qa_version, celery_worker):
    client.force_login(scientist)
    body = sweep_body(tiny_model, qa_version, space={"learning_rate": [1e-4, 2e-2]}, max_jobs=2,
                      config={**FAST, "max_steps": 12, "eval_every": 6, "checkpoint_every": 100})
    sweep = post(client, project, body).json()
    for trial in sweep["trials"]:
        job = ended(client, trial["job"], timeout=240)
        assert job["state"] == "succeeded", (job["error"], job["traceback"])
    ranked = client.get(f"/api/sweeps/{sweep['id']}/").json()
    assert ranked["state"] == "done"
    assert [t["rank"] for t in ranked["trials"]] == [1, 2]
    assert ranked["trials"][0]["point"] == {"learning_rate": 2e-2}  # the larger step learns more in 12 steps
    assert ranked["trials"][0]["eval_loss"] < ranked["trials"][1]["eval_loss"]
    assert all(t["adapter"] for t in ranked["trials"])
