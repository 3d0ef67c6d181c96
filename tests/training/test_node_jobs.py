"""Jobs across machines (config `nodes`, apps.training.nodes): refused at launch unless the deployment
allows them (TRAINING_MAX_NODES), naming `nodes`; two real gpu-queue Celery workers on this machine stand
for two hosts (each with its own artifact folder, a loopback c10d rendezvous): a job of 2 machines x 1
device completes on the curve of one process with the same global batch and seed; with one worker
alone the node gives up after the rendezvous timeout and the job fails with that reason, nothing
trained and its slot cancelled; a rank killed on one machine ends the run on both, and the job runs again
(a new rendezvous) from the newest checkpoint, which the machine without it receives from the other;
a cancel then stops both machines at one step."""

import os
import signal
import socket

import pytest
from django.utils import timezone

from apps.training.models import JobNode, MetricPoint, TrainingJob
from tests.conftest import _start_worker, _stop_worker, wait_for
from tests.training.fixtures import launch_body
from tests.training.test_jobs_run import ended, launch, train_steps
from workbench.celery import app

pytestmark = pytest.mark.django_db(transaction=True)
two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="2 gloo processes need 2 CPU cores")
TOLERANCE = 1e-3  # as tests/workers/test_training_ddp.py: fp32, relative


def host_worker(name: str, artifacts, **env):
    """A gpu worker standing for a machine of its own: its own artifact folder, 1 device, loopback rendezvous."""
    artifacts.mkdir(parents=True, exist_ok=True)
    return _start_worker(queues="default,gpu", pool="prefork", concurrency=1, name=name,
                         env={"ARTIFACT_ROOT": str(artifacts), "TRAINING_WORKER_DEVICES": "1",
                              "WORKER_RENDEZVOUS_HOST": "127.0.0.1", **env})


@pytest.fixture
def hosts_only(celery_worker):
    """The session's worker consumes `gpu` too: off it while the test's hosts run, so that it takes
    neither the job nor a slot (on the whole suite it is up; alone, this starts it)."""
    session_worker = f"test-worker-{os.getpid()}@{socket.gethostname()}"
    app.control.cancel_consumer("gpu", destination=[session_worker], reply=True, timeout=10)
    yield
    app.control.add_consumer("gpu", destination=[session_worker], reply=True, timeout=10)


@pytest.fixture
def two_hosts(django_db_setup, django_db_blocker, redis_service, tmp_path, hosts_only):
    workers = [host_worker(f"host-{name}", tmp_path / f"host-{name}", TRAINING_RENDEZVOUS_TIMEOUT_S="300")
               for name in ("a", "b")]
    yield [tmp_path / "host-a", tmp_path / "host-b"]
    for process in workers:
        _stop_worker(process)


@pytest.fixture
def one_host(django_db_setup, django_db_blocker, redis_service, tmp_path, hosts_only):
    process = host_worker("host-alone", tmp_path / "host-alone", TRAINING_RENDEZVOUS_TIMEOUT_S="10")
    yield tmp_path / "host-alone"
    _stop_worker(process)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nodes, allowed, words", [(2, 1, "not enabled"), (3, 2, "at most 2"), (0, 2, "at least 1"),
                                                   (9, 8, "at most 8"), ("two", 2, "whole number")])
def test_a_launch_across_more_machines_than_allowed_is_refused_naming_nodes(client, scientist, project, tiny_model,
                                                                           qa_version, settings, nodes, allowed,
                                                                           words):
    settings.TRAINING_MAX_NODES = allowed
    client.force_login(scientist)
    response = client.post(f"/api/projects/{project.pk}/jobs/", launch_body(tiny_model, qa_version, nodes=nodes),
                           content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "config.nodes" and words in response.json()["detail"], response.json()
    assert not TrainingJob.objects.exists()


@pytest.mark.timeout(60)
def test_the_launch_form_and_the_estimate_offer_machines(client, scientist, project, tiny_model, qa_version, settings):
    settings.TRAINING_MAX_NODES = 2
    client.force_login(scientist)
    assert b'name="nodes"' in client.get(f"/projects/{project.pk}/jobs/new/").content
    response = client.post(f"/api/projects/{project.pk}/jobs/estimate/",
                           launch_body(tiny_model, qa_version, nodes=2, devices=2, batch_size=8),
                           content_type="application/json")
    assert response.status_code == 200, response.content
    assert (response.json()["nodes"], response.json()["per_device_batch"]) == (2, 2)


@pytest.mark.slow
@pytest.mark.timeout(900)  # two torchruns on a loaded 2-core machine
@two_cores
def test_a_job_across_two_machines_completes_on_the_one_process_curve(client, scientist, project, tiny_model,
                                                                      qa_version, settings, two_hosts):
    from apps.registry.weights import local_weights
    from apps.training.runner import version_rows
    from tests.workers.test_training import Recorder
    from workers.training import TrainConfig, train

    settings.TRAINING_MAX_NODES = 2
    client.force_login(scientist)
    job_id = launch(client, project, launch_body(tiny_model, qa_version, nodes=2, devices=1))["id"]
    job = ended(client, job_id, timeout=800)
    assert job["state"] == "succeeded", (job["error"], job["traceback"], job.get("log_tail"))
    row = TrainingJob.objects.get(pk=job_id)
    assert row.rendezvous_endpoint.startswith("127.0.0.1:") and row.rendezvous_id
    assert row.info["devices"] == 2 and row.runs == 1  # one world of 2 processes, one claim
    wait_for(lambda: JobNode.objects.get(job_id=job_id).state != "running", timeout=60, what="the slot to end")
    slot = JobNode.objects.get(job_id=job_id)
    assert (slot.slot, slot.state, slot.rendezvous_id) == (1, "succeeded", row.rendezvous_id)
    assert slot.worker and slot.worker != row.worker  # the other machine took the slot
    assert train_steps(job_id) == list(range(1, 31))
    # Exactly one machine holds the checkpoints and the adapter: the one c10d gave global rank 0.
    holders = [h for h in two_hosts if (h / "training" / f"job-{job_id}" / "adapter").is_dir()]
    assert len(holders) == 1 and row.adapter is not None

    # The same global batch and seed in one process, here.
    reference = Recorder()
    config = TrainConfig.from_dict({**row.config, "nodes": 1, "devices": 1})
    train(config, model_dir=local_weights(tiny_model), output_dir=settings.ARTIFACT_ROOT / "reference",
          train_rows=version_rows(qa_version, "train", "sft"), eval_rows=version_rows(qa_version, "validation", "sft"),
          callbacks=reference)
    got = {p.step: p.values for p in MetricPoint.objects.filter(job_id=job_id, kind="train")}
    for point in reference.steps:
        for key in ("loss", "lr", "grad_norm"):
            assert got[point["step"]][key] == pytest.approx(point[key], rel=TOLERANCE), (point["step"], key)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_machine_alone_gives_its_run_up_after_the_rendezvous_timeout_with_nothing_started(
        client, scientist, project, tiny_model, qa_version, settings, one_host):
    settings.TRAINING_MAX_NODES = 2
    client.force_login(scientist)
    job_id = launch(client, project, launch_body(tiny_model, qa_version, nodes=2, devices=1))["id"]
    job = ended(client, job_id, timeout=240)
    assert job["state"] == "failed" and "did not find its peers within 10 s" in job["error"], job["error"]
    assert not train_steps(job_id) and TrainingJob.objects.get(pk=job_id).checkpoint_step is None
    # The slot no other worker took is cancelled, and this worker, free again, leaves it so.
    wait_for(lambda: JobNode.objects.get(job_id=job_id).state == "cancelled", timeout=30, what="the slot cancelled")
    run_dir = one_host / "training" / f"job-{job_id}" / "ddp"
    assert not list(run_dir.glob("rank-*.pid")) and not (run_dir.parent / "checkpoints").exists()


@pytest.mark.slow
@pytest.mark.timeout(900)
@two_cores
def test_a_killed_rank_ends_the_run_on_both_machines_the_job_resumes_from_its_checkpoint_and_a_cancel_stops_both(
        client, scientist, project, tiny_model, qa_version, settings, two_hosts):
    steps = 400  # more than it ever reaches: the resumed run is cancelled
    settings.TRAINING_MAX_NODES = 2
    client.force_login(scientist)
    job_id = launch(client, project, launch_body(tiny_model, qa_version, nodes=2, devices=1, max_steps=steps,
                                                 eval_every=None, checkpoint_every=15))["id"]
    folders = [host / "training" / f"job-{job_id}" for host in two_hosts]

    def rank_one_after_a_checkpoint() -> int | None:  # watched on disk: the relay lags the ranks
        if not any(any((folder / "checkpoints").glob("step-*")) for folder in folders):
            return None
        for folder in folders:
            pid_file = folder / "ddp" / "rank-1.pid"
            if pid_file.exists() and pid_file.read_text():
                return int(pid_file.read_text())
        return None

    os.kill(wait_for(rank_one_after_a_checkpoint, timeout=400, interval=0.005, what="the first checkpoint"),
            signal.SIGKILL)
    # The run ends everywhere and the job runs again, as a new rendezvous, from its newest checkpoint.
    resumed = wait_for(lambda: (job := TrainingJob.objects.get(pk=job_id)).runs == 2
                       and job.info.get("resumed_from_step") and job, timeout=400, interval=0.02,
                       what="the second run to start")
    resumed_from = resumed.info["resumed_from_step"]
    assert 15 <= resumed_from < steps and resumed_from % 15 == 0
    started = timezone.now()
    wait_for(lambda: MetricPoint.objects.filter(job_id=job_id, kind="train", recorded_at__gt=started).count() >= 3,
             timeout=300, interval=0.02, what="the second run to train 3 steps")

    assert client.post(f"/api/jobs/{job_id}/cancel/").json()["cancel_requested"]
    job = ended(client, job_id, timeout=300)
    assert job["state"] == "cancelled", (job["error"], job["traceback"])
    assert job["runs"] == 2 and job["current_step"] < steps and job["checkpoint_step"] == job["current_step"]
    assert train_steps(job_id) == list(range(1, job["current_step"] + 1))  # every step once, across both runs
    # The worker that ended the job ends its slot just after (when global rank 0 was on the slot's machine).
    wait_for(lambda: not JobNode.objects.filter(job_id=job_id, state="running").exists(), timeout=60,
             what="the slots to end")
    slots = list(JobNode.objects.filter(job_id=job_id).order_by("id").values_list("state", "rendezvous_id"))
    assert slots[0][0] == "failed" and slots[1][0] in ("succeeded", "cancelled") and slots[0][1] != slots[1][1]
    pids = [int(p.read_text()) for folder in folders for p in (folder / "ddp").glob("rank-*.pid")]
    assert len(pids) == 2 and not any(os.path.exists(f"/proc/{pid}") for pid in pids)  # no rank left behind
