"""Data-parallel jobs (config `devices`): refused at launch when no worker can give them, naming
`devices`; run by a real Celery worker as torchrun over 2 gloo processes, a rank killed with SIGKILL
mid-job ends the group, which resumes from its checkpoint and completes with every step exactly once
in the metrics; a cancel reaches every rank and keeps a checkpoint at the step it stopped."""

import os
import signal

import pytest

from apps.training.models import TrainingJob
from tests.conftest import wait_for
from tests.training.fixtures import launch_body
from tests.training.test_jobs_run import ended, launch, train_steps

pytestmark = pytest.mark.django_db(transaction=True)
# The worker gives a CPU job as many gloo processes as it has cores.
two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="2 gloo processes need 2 CPU cores")
# The killed-rank run: long enough that the kill lands mid-run even when this process is starved of CPU
# (60 steps once ran to the end between the first checkpoint and the kill, under a loaded CI run).
STEPS = 240


@pytest.mark.parametrize("devices, words", [(0, "at least 1"), (3, "at most 2"), ("two", "whole number")])
def test_a_launch_asking_for_devices_no_worker_has_is_refused_naming_devices(client, scientist, project, tiny_model,
                                                                            qa_version, settings, devices, words):
    settings.TRAINING_MAX_DEVICES = 2
    client.force_login(scientist)
    response = client.post(f"/api/projects/{project.pk}/jobs/", launch_body(tiny_model, qa_version, devices=devices),
                           content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "config.devices" and words in response.json()["detail"], response.json()
    assert not TrainingJob.objects.exists()


def test_the_launch_form_offers_devices_from_the_config_metadata(client, scientist, project, tiny_model, qa_version):
    client.force_login(scientist)
    page = client.get(f"/projects/{project.pk}/jobs/new/")
    assert page.status_code == 200
    assert b'name="devices"' in page.content and b"Data-parallel processes" in page.content


def test_the_estimate_gives_the_memory_of_each_device_with_its_share_of_the_batch(client, scientist, project,
                                                                                  tiny_model, qa_version):
    client.force_login(scientist)

    def estimate(devices):
        response = client.post(f"/api/projects/{project.pk}/jobs/estimate/",
                               launch_body(tiny_model, qa_version, devices=devices, batch_size=8, precision="fp32"),
                               content_type="application/json")
        assert response.status_code == 200, response.content
        return response.json()

    one, two = estimate(1), estimate(2)
    assert (one["devices"], one["per_device_batch"]) == (1, 8) and (two["devices"], two["per_device_batch"]) == (2, 4)
    assert two["memory"]["fp32"]["total_bytes"] < one["memory"]["fp32"]["total_bytes"]
    assert two["optimizer_steps"] == one["optimizer_steps"]  # the same global batches


def rank_pid(job_id: int, rank: int) -> int | None:
    from apps.training.runner import output_dir

    path = output_dir(TrainingJob.objects.get(pk=job_id)) / "ddp" / f"rank-{rank}.pid"
    return int(path.read_text()) if path.exists() and path.read_text() else None


@pytest.mark.slow
@pytest.mark.timeout(900)  # two torchruns of 2 processes each, on a loaded 2-core machine: minutes
@two_cores
def test_a_killed_rank_restarts_the_group_from_its_checkpoint_and_every_step_is_recorded_once(
        client, scientist, project, tiny_model, qa_version, celery_worker):
    client.force_login(scientist)
    job_id = launch(client, project, launch_body(tiny_model, qa_version, devices=2, max_steps=STEPS, eval_every=None,
                                                 checkpoint_every=15))["id"]
    # The checkpoint folder is watched directly (every 5 ms), not through the job row: the runner relays
    # steps with a lag in which the ranks can run on to the end of so short a run.
    from apps.training.runner import output_dir

    run_dir = output_dir(TrainingJob.objects.get(pk=job_id))
    pid_file = run_dir / "ddp" / "rank-1.pid"
    wait_for(lambda: any((run_dir / "checkpoints").glob("step-*")) and pid_file.exists()
             and pid_file.read_text(), timeout=360,
             interval=0.005, what="the first checkpoint")
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    checkpoint = 15  # on disk before the kill

    job = ended(client, job_id, timeout=480)
    assert job["state"] == "succeeded", (job["error"], job["traceback"])
    assert job["runs"] == 1 and job["info"]["devices"] == 2  # a fresh torchrun resumed it within the claim
    # Resumed mid-run from a checkpoint written before the kill (which one depends on how far the ranks
    # ran before the signal landed).
    resumed_from = job["info"]["resumed_from_step"]
    assert checkpoint <= resumed_from < STEPS and resumed_from % 15 == 0
    assert train_steps(job_id) == list(range(1, STEPS + 1))  # the steps after the checkpoint were replaced


@pytest.mark.slow
@pytest.mark.timeout(900)
@two_cores
def test_a_cancelled_data_parallel_job_stops_every_rank_with_a_checkpoint(client, scientist, project, tiny_model,
                                                                          qa_version, celery_worker):
    client.force_login(scientist)
    job_id = launch(client, project, launch_body(tiny_model, qa_version, devices=2, max_steps=400, eval_every=None,
                                                 checkpoint_every=1000))["id"]
    wait_for(lambda: TrainingJob.objects.get(pk=job_id).current_step >= 3, timeout=360, interval=0.02,
             what="3 steps")
    assert client.post(f"/api/jobs/{job_id}/cancel/").json()["cancel_requested"]
    job = ended(client, job_id, timeout=300)
    assert job["state"] == "cancelled", (job["error"], job["traceback"])
    assert 3 <= job["current_step"] < 400 and job["checkpoint_step"] == job["current_step"]
    pids = [rank_pid(job_id, rank) for rank in (0, 1)]
    assert all(pids) and not any(os.path.exists(f"/proc/{pid}") for pid in pids)  # no rank left behind
