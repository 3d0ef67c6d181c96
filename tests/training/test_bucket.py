"""Fine-tunes' checkpoints and adapters in the artifact bucket (a real moto S3 server process), and a job
that moves between two machines through it: two Celery worker processes with working folders of their
own, on one database, broker and bucket; the one running the job is killed, the reaper re-sends the job,
and the other resumes it from the checkpoint it reads back from the bucket."""

import json
import os
import shutil
import signal
import socket
from pathlib import Path

import pytest

from apps.core import storage
from apps.core.jobs import reap_stale
from apps.training import bucket
from apps.training.models import TrainingJob
from apps.training.runner import JobCallbacks
from tests.conftest import _start_worker, _stop_worker, wait_for
from tests.core.test_storage_s3 import keys, s3, s3_endpoint  # noqa: F401  (fixtures)
from tests.training.fixtures import launch_body, make_job
from tests.training.test_jobs_run import ended, launch, train_steps
from workbench.celery import app

JOB = 7


def checkpoint_dir(root, step: int, *, weights: bytes = b"weights"):
    """A directory shaped like the engine's checkpoint of `step` (what the bucket code reads of it)."""
    directory = root / f"step-{step}"
    (directory / "adapter").mkdir(parents=True)
    (directory / "adapter" / "adapter_model.safetensors").write_bytes(weights + bytes([step % 256]) * 100)
    (directory / "trainer_state.json").write_text(json.dumps({"step": step}))
    (directory / "COMPLETE").write_text("")
    return directory


def files_under(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.timeout(120)
def test_each_checkpoint_uploaded_prunes_the_bucket_like_the_local_folder(s3, tmp_path):  # noqa: F811
    s3.put_object(Bucket=s3.bucket, Key=f"training/job-{JOB}/checkpoints/step-5/COMPLETE", Body=b"")  # cut short
    for step in (10, 20, 30):
        bucket.upload_checkpoint(JOB, step, checkpoint_dir(tmp_path, step))
    assert bucket.bucket_checkpoints(JOB) == {20: True, 30: True}
    assert sorted(keys(s3)) == sorted(f"training/job-{JOB}/checkpoints/step-{step}/{name}" for step in (20, 30)
                                      for name in ("COMPLETE", "MANIFEST.json", "adapter/adapter_model.safetensors",
                                                   "trainer_state.json"))
    # A checkpoint above the one just written (another database's job of this id) is not this run's to prune.
    bucket.upload_checkpoint(JOB, 500, checkpoint_dir(tmp_path, 500))
    bucket.upload_checkpoint(JOB, 40, checkpoint_dir(tmp_path, 40))
    assert bucket.bucket_checkpoints(JOB) == {30: True, 40: True, 500: True}


@pytest.mark.timeout(120)
def test_a_resuming_worker_takes_the_newest_complete_checkpoint_up_to_the_jobs_step(s3, tmp_path):  # noqa: F811
    written = tmp_path / "first-machine"
    for step in (20, 30, 35, 45, 60):
        storage.put_folder(checkpoint_dir(written, step), bucket.checkpoint_prefix(JOB, step))
    prefix = f"training/job-{JOB}/checkpoints"
    # 40: files uploaded, the worker killed before the manifest. 35: a file changed after its manifest.
    # 45: a hostile manifest. 60: above the step the job's row recorded (its upload was never confirmed).
    s3.put_object(Bucket=s3.bucket, Key=f"{prefix}/step-40/trainer_state.json", Body=b'{"step": 40}')
    s3.put_object(Bucket=s3.bucket, Key=f"{prefix}/step-40/COMPLETE", Body=b"")
    s3.put_object(Bucket=s3.bucket, Key=f"{prefix}/step-35/adapter/adapter_model.safetensors", Body=b"x" * 107)
    s3.put_object(Bucket=s3.bucket, Key=f"{prefix}/step-45/MANIFEST.json",
                  Body=json.dumps({"files": {"../../../escaped": {"sha256": "0" * 64, "bytes": 1}}}).encode())
    assert bucket.bucket_checkpoints(JOB) == {20: True, 30: True, 35: True, 40: False, 45: True, 60: True}

    checkpoints = tmp_path / "second-machine" / "checkpoints"
    lines = []
    assert bucket.fetch_checkpoint(JOB, checkpoints, up_to_step=50, log=lines.append) == 30
    assert [line.split(":")[0] for line in lines] == ["the checkpoint at step 45 in the bucket was skipped",
                                                      "the checkpoint at step 35 in the bucket was skipped"]
    assert "names a file outside its folder" in lines[0] and "differs from its folder's manifest" in lines[1]
    # Only the checkpoint taken is on disk: nothing half-written is left, nothing written outside.
    assert files_under(tmp_path / "second-machine") == {
        f"checkpoints/{name}": content for name, content in files_under(written).items()
        if name.startswith("step-30/")}

    # A folder that has a checkpoint that new downloads nothing; the row's step bounds what is trusted.
    assert bucket.fetch_checkpoint(JOB, checkpoints, up_to_step=50, log=lines.append) is None
    assert bucket.fetch_checkpoint(JOB, tmp_path / "third-machine", up_to_step=29, log=lines.append) == 20


@pytest.mark.timeout(120)
@pytest.mark.django_db
def test_an_upload_that_fails_is_in_the_jobs_log_and_the_run_goes_on(s3, settings, project, owner,  # noqa: F811
                                                                    tmp_path):
    settings.ARTIFACT_S3_BUCKET = "no-such-bucket"
    job = make_job(project, owner)
    callbacks = JobCallbacks(job)
    callbacks.on_checkpoint(step=10, path=str(checkpoint_dir(tmp_path, 10)))
    job.refresh_from_db()
    assert job.checkpoint_step == 10  # resumable on this machine all the same
    assert ("uploading the checkpoint at step 10 to the artifact bucket failed (S3UploadFailedError"
            in job.log_tail and "another machine cannot resume from it" in job.log_tail)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
def test_a_bucket_that_fails_every_call_neither_fails_nor_stops_a_fine_tune(s3, settings, project, owner,  # noqa: F811
                                                                            tiny_model, qa_version, tmp_path):
    from apps.training.runner import run_job
    from tests.training.fixtures import FAST

    settings.ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.ARTIFACT_S3_BUCKET = "no-such-bucket"
    # A job taken over after its worker was lost: its row names a checkpoint the bucket should hold.
    job = TrainingJob.objects.create(project=project, name="Run", base_model=tiny_model, dataset_version=qa_version,
                                     train_split="train", config={**FAST, "max_steps": 4, "eval_every": None,
                                                                  "checkpoint_every": 2},
                                     created_by=owner, checkpoint_step=2)
    run_job(job.pk, worker="here", pid=os.getpid())  # the runner, in this process
    job.refresh_from_db()
    assert job.state == "succeeded", job.error
    assert job.info["resumed_from_step"] == 0 and job.checkpoint_step == 4
    for line in ("reading the checkpoints in the artifact bucket failed (NoSuchBucket",
                 "uploading the checkpoint at step 2 to the artifact bucket failed (S3UploadFailedError",
                 "uploading the checkpoint at step 4 to the artifact bucket failed",
                 "uploading the adapter to the artifact bucket failed", "it is on this machine only"):
        assert line in job.log_tail
    assert train_steps(job.pk) == [1, 2, 3, 4]


STEPS = 120


def worker_environment(s3, root) -> dict[str, str]:  # noqa: F811
    from django.conf import settings

    return {"ARTIFACT_ROOT": str(root), "ARTIFACT_S3_BUCKET": s3.bucket,
            "ARTIFACT_S3_ENDPOINT_URL": settings.ARTIFACT_S3_ENDPOINT_URL, "ARTIFACT_S3_REGION": "us-east-1",
            "ARTIFACT_S3_ADDRESSING_STYLE": "path"}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.django_db(transaction=True)
def test_a_job_whose_machine_is_lost_resumes_on_another_from_the_checkpoint_in_the_bucket(
        client, scientist, project, tiny_model, qa_version, celery_worker, s3, settings, tmp_path):  # noqa: F811
    # Only the two "machines" consume gpu: the session's worker leaves that queue meanwhile.
    session_worker = f"test-worker-{os.getpid()}@{socket.gethostname()}"
    app.control.cancel_consumer("gpu", destination=[session_worker], reply=True, timeout=10)
    roots = {name: tmp_path / name for name in ("host-a", "host-b")}
    workers = {name: _start_worker(queues="gpu", pool="prefork", concurrency=1, name=name,
                                   env=worker_environment(s3, root)) for name, root in roots.items()}
    try:
        client.force_login(scientist)
        job_id = launch(client, project, launch_body(tiny_model, qa_version, max_steps=STEPS, eval_every=None,
                                                     checkpoint_every=40))["id"]
        job = wait_for(lambda: (j := TrainingJob.objects.get(pk=job_id)).checkpoint_step
                       and j.current_step > j.checkpoint_step + 2 and j, timeout=120, interval=0.02,
                       what="a checkpoint and a few steps more")
        lost, other = ("host-a", "host-b") if job.worker.startswith("host-a") else ("host-b", "host-a")
        os.killpg(workers[lost].pid, signal.SIGKILL)  # the whole machine: the worker and its pool process
        workers[lost].wait(10)
        job.refresh_from_db()
        checkpoint, killed_at = job.checkpoint_step, job.current_step
        assert job.state == "running" and killed_at >= checkpoint
        assert bucket.bucket_checkpoints(job_id)[checkpoint] is True  # uploaded before the row recorded it
        assert not list(roots[other].rglob("step-*"))  # the other machine has none of the job's files

        # No redelivery comes (the broker holds the killed worker's message for hours): the reaper, which
        # beat runs every minute, re-sends the job once its heartbeat is stale.
        settings.TRAINING_HEARTBEAT_STALE_S = 3
        wait_for(lambda: reap_stale()["training.TrainingJob"] == 1, timeout=30, interval=0.5,
                 what="the reaper to find the job's worker gone")

        finished = ended(client, job_id, timeout=200)
        assert finished["state"] == "succeeded", (finished["error"], finished["traceback"])
        assert finished["runs"] == 2 and finished["worker"].startswith(other)
        assert finished["info"]["resumed_from_step"] == checkpoint
        assert f"took the checkpoint at step {checkpoint} from the artifact bucket" in finished["log_tail"]
        assert train_steps(job_id) == list(range(1, STEPS + 1))  # every step recorded exactly once

        # The bucket holds what the local folder does: the last two checkpoints, and the adapter.
        assert bucket.bucket_checkpoints(job_id) == {80: True, 120: True}
        adapter_dir = roots[other] / "training" / f"job-{job_id}" / "adapter"
        assert {"adapter_model.safetensors", "adapter_config.json"} <= set(files_under(adapter_dir))
        assert {f"{bucket.adapter_prefix(job_id)}{name}" for name in [*files_under(adapter_dir), "MANIFEST.json"]} == {
            key for key in keys(s3) if key.startswith(bucket.adapter_prefix(job_id))}
        (tmp_path / "fetched").mkdir()
        storage.get_folder(bucket.adapter_prefix(job_id), tmp_path / "fetched")
        assert files_under(tmp_path / "fetched") == files_under(adapter_dir)
    finally:
        for process in workers.values():
            if process.poll() is None:
                _stop_worker(process)
        app.control.add_consumer("gpu", destination=[session_worker], reply=True, timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
def test_the_adapter_registered_names_its_bucket_copy_which_another_machine_loads(s3, settings, project, owner,  # noqa: F811
                                                                                   tiny_model, qa_version, tmp_path):
    from apps.registry.weights import model_paths
    from apps.training.runner import run_job
    from tests.training.fixtures import FAST

    settings.ARTIFACT_ROOT = tmp_path / "host-a"
    job = TrainingJob.objects.create(project=project, name="Run", base_model=tiny_model, dataset_version=qa_version,
                                     train_split="train", config={**FAST, "max_steps": 2, "eval_every": None,
                                                                  "checkpoint_every": 2}, created_by=owner)
    run_job(job.pk, worker="here", pid=os.getpid())
    job.refresh_from_db()
    assert job.state == "succeeded", job.error
    adapter = job.adapter
    assert adapter.bucket_prefix == bucket.adapter_prefix(job.pk)
    written = files_under(tmp_path / "host-a" / "training" / f"job-{job.pk}" / "adapter")

    settings.ARTIFACT_ROOT = tmp_path / "host-b"
    shutil.rmtree(tmp_path / "host-a")  # the machine that trained it is gone
    base, fetched = model_paths(adapter)
    assert base == Path(tiny_model.weights_path) and fetched.is_relative_to(tmp_path / "host-b")
    assert files_under(fetched) == written
