"""Fine-tune jobs run by a real Celery worker process on the tiny model: success with an
adapter and lineage, cancel and resume, a worker killed mid-job, a failure with its traceback."""

import io
import json
import os
import shutil
import signal
import zipfile

import pytest

from apps.registry.models import RegisteredModel
from apps.training.models import MetricPoint, TrainingJob
from apps.training.runner import output_dir
from tests.conftest import wait_for
from tests.training.fixtures import launch_body
from workers.training.checkpoint import checkpoints_dir_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def launch(client, project, body) -> dict:
    response = client.post(f"/api/projects/{project.pk}/jobs/", body, content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()


def ended(client, job_id, timeout=180) -> dict:
    def check():
        job = client.get(f"/api/jobs/{job_id}/").json()
        return job if job["state"] in ("succeeded", "failed", "cancelled") else None
    return wait_for(check, timeout=timeout, interval=0.2, what=f"job {job_id} to end")


def train_steps(job_id) -> list[int]:
    return list(MetricPoint.objects.filter(job_id=job_id, kind="train").order_by("step")
                .values_list("step", flat=True))


def test_a_job_trains_its_loss_falls_and_its_adapter_is_registered_with_lineage(client, scientist, project,
                                                                                tiny_model, qa_version,
                                                                                celery_worker, tmp_path):
    client.force_login(scientist)
    job = ended(client, launch(client, project, launch_body(tiny_model, qa_version))["id"])
    assert job["state"] == "succeeded", (job["error"], job["traceback"])
    assert job["current_step"] == job["total_steps"] == 30
    assert train_steps(job["id"]) == list(range(1, 31))
    losses = [p["values"]["loss"] for p in client.get(f"/api/jobs/{job['id']}/metrics/?kind=train").json()["results"]]
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5
    evals = client.get(f"/api/jobs/{job['id']}/metrics/?kind=eval").json()["results"]
    assert [p["step"] for p in evals] == [0, 10, 20, 30]  # step 0: the base model
    assert evals[-1]["values"]["eval_loss"] < evals[0]["values"]["eval_loss"]
    assert evals[-1]["values"]["samples"][0]["prompt"] == "what is the capital of france ?"
    assert job["tokens_trained"] > 0 and job["metrics"]["eval_loss"] == pytest.approx(
        evals[-1]["values"]["eval_loss"])

    adapter = RegisteredModel.objects.get(pk=job["adapter"])
    assert adapter.kind == "adapter" and adapter.base_model_id == tiny_model.pk
    assert adapter.lineage["content_hash"] == qa_version.content_hash
    assert adapter.lineage["job"] == job["id"] and adapter.lineage["config"]["lora_r"] == 4
    assert adapter.lineage["adapter"]["r"] == 4 and adapter.lineage["adapter"]["target_modules"] == [
        "k_proj", "o_proj", "q_proj", "v_proj"]

    # The download is a PEFT directory that PeftModel.from_pretrained loads unchanged.
    download = client.get(f"/api/models/{adapter.pk}/download/")
    assert download.status_code == 200 and download["Content-Type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(b"".join(download.streaming_content))) as archive:
        archive.extractall(tmp_path)
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model.weights_path)
    peft_model = PeftModel.from_pretrained(base, folder)
    assert peft_model.peft_config["default"].r == 4
    assert_card_carries_the_lineage(folder, job, tiny_model, qa_version)


def weights_hash_of(directory) -> str:
    """The documented content hash, recomputed here: sha256 over `<file>\0<sha256 of file>\n`."""
    import hashlib
    from pathlib import Path

    digest = hashlib.sha256()
    for path in sorted(Path(directory).glob("*.safetensors")):
        digest.update(f"{path.name}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


def assert_card_carries_the_lineage(folder, job, base_model, version):
    """The downloaded model card and workbench_train_config.json name the base (by name and the hash of
    its weights), the dataset version and its hash, the job, the config and the final metrics."""
    import json

    from huggingface_hub import ModelCard

    base_hash = weights_hash_of(base_model.weights_path)
    base_model.refresh_from_db()
    assert base_model.content_hash == base_hash  # computed once by the worker and stored
    card = ModelCard.load(folder / "README.md")
    assert card.data.base_model == base_model.name and card.data.library_name == "peft"
    text = card.text
    for expected in (base_hash, version.content_hash, f"job #{job['id']}", '"lora_r": 4', "eval_loss",
                     f"{job['metrics']['eval_loss']:.6g}", "q_proj"):
        assert expected in text, expected
    assert "[More Information Needed]" not in text  # not PEFT's empty template
    saved = json.loads((folder / "workbench_train_config.json").read_text())
    assert saved["base_model"] == {"name": base_model.name, "content_hash": base_hash}
    assert saved["dataset"]["content_hash"] == version.content_hash and saved["job"]["id"] == job["id"]
    assert saved["config"]["lora_r"] == 4 and saved["metrics"]["eval_loss"] == pytest.approx(job["metrics"]["eval_loss"])


def cancelled_after_5_steps(client, project, tiny_model, qa_version, max_steps: int) -> tuple[dict, int]:
    """A job launched, cancelled once it took 5 steps, ended: (its API body, its step when cancelled)."""
    job_id = launch(client, project, launch_body(tiny_model, qa_version, max_steps=max_steps, eval_every=None,
                                                 checkpoint_every=20))["id"]
    wait_for(lambda: TrainingJob.objects.get(pk=job_id).current_step >= 5, timeout=120, interval=0.02,
             what="5 steps")
    assert client.post(f"/api/jobs/{job_id}/cancel/").json()["cancel_requested"]
    step_at_cancel = TrainingJob.objects.get(pk=job_id).current_step
    job = ended(client, job_id)
    assert job["state"] == "cancelled"
    return job, step_at_cancel


def test_a_cancelled_job_stops_within_a_step_keeps_its_checkpoint_and_resumes_to_the_end(
        client, scientist, project, tiny_model, qa_version, celery_worker):
    client.force_login(scientist)
    job, step_at_cancel = cancelled_after_5_steps(client, project, tiny_model, qa_version, 150)
    job_id = job["id"]
    assert job["current_step"] <= step_at_cancel + 1
    assert job["current_step"] < 150
    assert job["checkpoint_step"] == job["current_step"]  # a checkpoint at the step it stopped
    stopped_at = job["current_step"]

    resumed = client.post(f"/api/jobs/{job_id}/resume/")
    assert resumed.status_code == 200 and resumed.json()["state"] == "queued"
    job = ended(client, job_id)
    assert job["state"] == "succeeded", job["error"]
    assert job["info"]["resumed_from_step"] == stopped_at
    assert train_steps(job_id) == list(range(1, 151))


def test_a_checkpoint_the_job_never_recorded_is_removed_before_it_resumes_from_its_recorded_one(
        client, scientist, project, tiny_model, qa_version, celery_worker):
    # What a worker that lost its job can leave in a folder it shares with the new owner (both on one
    # machine): a complete checkpoint past the one the row records, written after its claim was taken
    # over (its record refused). Planted here as a copy of the job's own, one claimed 10 steps further.
    client.force_login(scientist)
    job, _ = cancelled_after_5_steps(client, project, tiny_model, qa_version, 60)
    job_id, recorded = job["id"], job["checkpoint_step"]
    checkpoints = checkpoints_dir_of(output_dir(TrainingJob.objects.get(pk=job_id)))
    assert (checkpoints / f"step-{recorded}" / "COMPLETE").is_file()
    unrecorded = checkpoints / f"step-{recorded + 10}"
    shutil.copytree(checkpoints / f"step-{recorded}", unrecorded)
    state = json.loads((unrecorded / "trainer_state.json").read_text())
    (unrecorded / "trainer_state.json").write_text(json.dumps({**state, "step": recorded + 10}))

    assert client.post(f"/api/jobs/{job_id}/resume/").status_code == 200
    job = ended(client, job_id)
    assert job["state"] == "succeeded", job["error"]
    assert job["info"]["resumed_from_step"] == recorded
    assert train_steps(job_id) == list(range(1, 61))  # the 10 steps the planted one claims were trained
    assert (f"Removed the checkpoints at steps {recorded + 10}: newer than step {recorded}, the last one recorded, "
            f"so written by a run whose record was refused.") in job["log_tail"]


def test_a_worker_killed_mid_job_is_replaced_and_the_job_resumes_from_its_checkpoint(
        client, scientist, project, tiny_model, qa_version, celery_worker):
    client.force_login(scientist)
    job_id = launch(client, project, launch_body(tiny_model, qa_version, max_steps=200, eval_every=None,
                                                 checkpoint_every=25))["id"]
    job = wait_for(lambda: (j := TrainingJob.objects.get(pk=job_id)).checkpoint_step and j.current_step > 30 and j,
                   timeout=120, interval=0.02, what="a checkpoint and a few more steps")
    os.kill(job.worker_pid, signal.SIGKILL)  # the pool process running the task, mid-job
    killed_at, checkpoint = job.current_step, job.checkpoint_step

    job = ended(client, job_id, timeout=240)
    assert job["state"] == "succeeded", (job["error"], job["traceback"])
    assert job["runs"] == 2
    assert job["info"]["resumed_from_step"] >= checkpoint
    assert job["info"]["resumed_from_step"] < killed_at < 200
    # Every step exactly once: the ones the dead worker reported after its checkpoint were replaced.
    assert train_steps(job_id) == list(range(1, 201))


def test_a_failure_keeps_the_traceback_and_a_plain_summary(client, scientist, project, tiny_model, qa_version,
                                                           celery_worker):
    import shutil

    client.force_login(scientist)
    shutil.rmtree(tiny_model.weights_path)  # the weights vanished between launch and run
    job = ended(client, launch(client, project, launch_body(tiny_model, qa_version))["id"])
    assert job["state"] == "failed"
    assert job["error"] and "\n" not in job["error"]
    assert "Traceback" in job["traceback"]
    assert job["adapter"] is None


def test_a_redelivered_message_for_an_ended_job_does_nothing(client, scientist, project, tiny_model, qa_version,
                                                             celery_worker):
    from apps.training.tasks import train_task

    client.force_login(scientist)
    job = ended(client, launch(client, project, launch_body(tiny_model, qa_version, max_steps=5))["id"])
    assert job["state"] == "succeeded"
    train_task.apply_async(args=[job["id"]], queue="gpu")
    probe = launch(client, project, launch_body(tiny_model, qa_version, max_steps=2))  # queued behind it
    assert ended(client, probe["id"])["state"] == "succeeded"
    after = TrainingJob.objects.get(pk=job["id"])
    assert after.runs == 1 and RegisteredModel.objects.filter(lineage__job=job["id"]).count() == 1


def orphaned_job(project, owner, model, version, *, runs: int) -> TrainingJob:
    """A job left RUNNING by a worker machine that vanished: a stale heartbeat and no message
    left to redeliver (the broker holds it unacknowledged for hours)."""
    from datetime import timedelta

    from django.utils import timezone

    from tests.training.fixtures import FAST
    from workers.training import TrainConfig

    return TrainingJob.objects.create(
        project=project, name="Orphan", base_model=model, dataset_version=version, train_split="train",
        config=TrainConfig.from_dict({**FAST, "max_steps": 12}).as_dict(), state="running", runs=runs,
        worker="gone@elsewhere", worker_pid=999999, heartbeat_at=timezone.now() - timedelta(hours=1),
        created_by=owner)


def test_the_reaper_resends_a_job_whose_worker_vanished_and_a_worker_takes_it_over(client, scientist, owner,
                                                                                   project, tiny_model, qa_version,
                                                                                   celery_worker):
    from apps.core.jobs import reap_stale

    job = orphaned_job(project, owner, tiny_model, qa_version, runs=1)
    assert reap_stale()["training.TrainingJob"] == 1
    client.force_login(scientist)
    ended_job = ended(client, job.pk)
    assert ended_job["state"] == "succeeded", ended_job["error"]
    assert ended_job["runs"] == 2 and ended_job["worker"] != "gone@elsewhere"
    assert train_steps(job.pk) == list(range(1, 13))


def test_a_job_that_lost_its_worker_too_often_fails_instead_of_looping(client, scientist, owner, project, tiny_model,
                                                                       qa_version, celery_worker, settings):
    from apps.core.jobs import reap_stale

    job = orphaned_job(project, owner, tiny_model, qa_version, runs=settings.TRAINING_MAX_RUNS)
    assert reap_stale()["training.TrainingJob"] == 1
    client.force_login(scientist)
    ended_job = ended(client, job.pk)
    assert ended_job["state"] == "failed"
    assert f"lost {settings.TRAINING_MAX_RUNS} times" in ended_job["error"]
    assert not MetricPoint.objects.filter(job=job).exists()


def test_the_gpu_queue_serves_a_high_priority_job_before_an_earlier_normal_one(client, scientist, admin, project,
                                                                             tiny_model, qa_version,
                                                                             celery_worker):
    client.force_login(scientist)
    busy = launch(client, project, launch_body(tiny_model, qa_version, max_steps=80, eval_every=None))
    wait_for(lambda: TrainingJob.objects.get(pk=busy["id"]).state == "running", timeout=60, what="the first job")
    quick = {"max_steps": 2, "eval_every": None, "eval_at_start": False}
    normal = launch(client, project, {**launch_body(tiny_model, qa_version, **quick), "name": "normal"})
    client.force_login(admin)
    high = launch(client, project, {**launch_body(tiny_model, qa_version, **quick), "name": "high",
                                    "priority": "high"})
    assert high["queue_position"] == 1
    for job in (busy, normal, high):
        assert ended(client, job["id"])["state"] == "succeeded"
    started = dict(TrainingJob.objects.values_list("name", "started_at"))
    assert started["high"] < started["normal"]
