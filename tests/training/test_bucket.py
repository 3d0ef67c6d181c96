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
from django.db import connection

from apps.core import storage
from apps.core.jobs import reap_stale
from apps.training import bucket
from apps.training.models import MetricPoint, TrainingJob
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


def upload_and_prune(step: int, run: int, path) -> None:
    """What a worker does with each checkpoint while the job's row is its claim's (JobCallbacks.on_checkpoint)."""
    bucket.upload_checkpoint(JOB, step, run, path)
    bucket.prune_checkpoints(JOB, step, run)


@pytest.mark.timeout(120)
def test_each_checkpoint_uploaded_prunes_the_bucket_like_the_local_folder(s3, tmp_path):  # noqa: F811
    s3.put_object(Bucket=s3.bucket, Key=f"training/job-{JOB}/checkpoints/step-5-r1/COMPLETE", Body=b"")  # cut short
    for step in (10, 20, 30):
        upload_and_prune(step, 1, checkpoint_dir(tmp_path, step))
    assert bucket.bucket_checkpoints(JOB) == {(20, 1): True, (30, 1): True}
    assert sorted(keys(s3)) == sorted(f"training/job-{JOB}/checkpoints/step-{step}-r1/{name}" for step in (20, 30)
                                      for name in ("COMPLETE", "MANIFEST.json", "adapter/adapter_model.safetensors",
                                                   "trainer_state.json"))
    # A checkpoint above the one just written (another database's job of this id) is not this run's to prune.
    upload_and_prune(500, 1, checkpoint_dir(tmp_path, 500))
    upload_and_prune(40, 1, checkpoint_dir(tmp_path, 40))
    assert bucket.bucket_checkpoints(JOB) == {(30, 1): True, (40, 1): True, (500, 1): True}


@pytest.mark.timeout(120)
def test_pruning_spares_newer_claims_and_removes_older_claims_up_to_the_step(s3, tmp_path):  # noqa: F811
    # An untagged checkpoint (written before claims tagged them), the first claim's, and a newer claim's
    # (the worker that took the job over from the one pruning).
    storage.put_folder(checkpoint_dir(tmp_path / "legacy", 10), bucket.checkpoint_prefix(JOB, 10, 0))
    for step in (20, 30, 90):
        storage.put_folder(checkpoint_dir(tmp_path / "first", step), bucket.checkpoint_prefix(JOB, step, 1))
    storage.put_folder(checkpoint_dir(tmp_path / "third", 40), bucket.checkpoint_prefix(JOB, 40, 3))
    upload_and_prune(50, 2, checkpoint_dir(tmp_path / "second", 50))
    # Older claims' folders up to its step go (the row no longer points to them); a newer claim's stays, and
    # so does one above the step; nothing of the claim itself is below its newest KEEP.
    assert bucket.bucket_checkpoints(JOB) == {(90, 1): True, (40, 3): True, (50, 2): True}
    # Folder names that are not a checkpoint's are left alone and not read as one.
    for name in ("step-x", "step-7-r", "step-7-rx", "step-7-r0", "other"):
        s3.put_object(Bucket=s3.bucket, Key=f"training/job-{JOB}/checkpoints/{name}/MANIFEST.json", Body=b"{}")
    upload_and_prune(60, 2, checkpoint_dir(tmp_path / "second", 60))
    assert bucket.bucket_checkpoints(JOB) == {(90, 1): True, (40, 3): True, (50, 2): True, (60, 2): True}
    assert sum(f"/checkpoints/{name}/" in key for key in keys(s3)
               for name in ("step-x", "step-7-r", "step-7-rx", "step-7-r0", "other")) == 5


@pytest.mark.timeout(120)
def test_a_resuming_worker_takes_the_newest_complete_checkpoint_up_to_the_jobs_step(s3, tmp_path):  # noqa: F811
    # Untagged folders (`step-<N>/`, written before claims tagged them): a row recorded then (claim 0) resumes.
    written = tmp_path / "first-machine"
    for step in (20, 30, 35, 45, 60):
        storage.put_folder(checkpoint_dir(written, step), bucket.checkpoint_prefix(JOB, step, 0))
    # Another claim's newer checkpoints are not the row's: never read for claim 0.
    storage.put_folder(checkpoint_dir(tmp_path / "other-claim", 50), bucket.checkpoint_prefix(JOB, 50, 2))
    prefix = f"training/job-{JOB}/checkpoints"
    # 40: files uploaded, the worker killed before the manifest. 35: a file changed after its manifest.
    # 45: a hostile manifest. 60: above the step the job's row recorded (its upload was never confirmed).
    s3.put_object(Bucket=s3.bucket, Key=f"{prefix}/step-40/trainer_state.json", Body=b'{"step": 40}')
    s3.put_object(Bucket=s3.bucket, Key=f"{prefix}/step-40/COMPLETE", Body=b"")
    s3.put_object(Bucket=s3.bucket, Key=f"{prefix}/step-35/adapter/adapter_model.safetensors", Body=b"x" * 107)
    s3.put_object(Bucket=s3.bucket, Key=f"{prefix}/step-45/MANIFEST.json",
                  Body=json.dumps({"files": {"../../../escaped": {"sha256": "0" * 64, "bytes": 1}}}).encode())
    assert bucket.bucket_checkpoints(JOB) == {(20, 0): True, (30, 0): True, (35, 0): True, (40, 0): False,
                                              (45, 0): True, (60, 0): True, (50, 2): True}

    checkpoints = tmp_path / "second-machine" / "checkpoints"
    lines = []
    assert bucket.fetch_checkpoint(JOB, checkpoints, up_to_step=50, run=0, log=lines.append) == 30
    assert [line.split(":")[0] for line in lines] == ["the checkpoint at step 45 in the bucket was skipped",
                                                      "the checkpoint at step 35 in the bucket was skipped"]
    assert "names a file outside its folder" in lines[0] and "differs from its folder's manifest" in lines[1]
    # Only the checkpoint taken is on disk: nothing half-written is left, nothing written outside.
    assert files_under(tmp_path / "second-machine") == {
        f"checkpoints/{name}": content for name, content in files_under(written).items()
        if name.startswith("step-30/")}

    # A folder that has a checkpoint that new downloads nothing; the row's step bounds what is trusted.
    assert bucket.fetch_checkpoint(JOB, checkpoints, up_to_step=50, run=0, log=lines.append) is None
    assert bucket.fetch_checkpoint(JOB, tmp_path / "third-machine", up_to_step=29, run=0, log=lines.append) == 20
    # The row's claim decides: claim 2's own checkpoint, and none of a claim that wrote nothing.
    assert bucket.fetch_checkpoint(JOB, tmp_path / "fourth-machine", up_to_step=50, run=2, log=lines.append) == 50
    assert bucket.fetch_checkpoint(JOB, tmp_path / "fifth-machine", up_to_step=50, run=1, log=lines.append) is None


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


@pytest.fixture
def two_hosts(celery_worker, s3, tmp_path):  # noqa: F811
    """Two gpu workers standing for two machines (a data folder each, one bucket): ({name: folder},
    {name: process}). Only they consume gpu meanwhile: the session's worker leaves that queue."""
    session_worker = f"test-worker-{os.getpid()}@{socket.gethostname()}"
    app.control.cancel_consumer("gpu", destination=[session_worker], reply=True, timeout=10)
    roots = {name: tmp_path / name for name in ("host-a", "host-b")}
    workers = {name: _start_worker(queues="gpu", pool="prefork", concurrency=1, name=name,
                                   env=worker_environment(s3, root)) for name, root in roots.items()}
    yield roots, workers
    for process in workers.values():
        if process.poll() is None:
            _stop_worker(process)
    app.control.add_consumer("gpu", destination=[session_worker], reply=True, timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.django_db(transaction=True)
def test_a_job_whose_machine_is_lost_resumes_on_another_from_the_checkpoint_in_the_bucket(
        client, scientist, project, tiny_model, qa_version, two_hosts, s3, settings, tmp_path):  # noqa: F811
    roots, workers = two_hosts
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
    assert job.checkpoint_run == 1
    assert bucket.bucket_checkpoints(job_id)[(checkpoint, 1)] is True  # uploaded before the row recorded it
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
    assert bucket.bucket_checkpoints(job_id) == {(80, 2): True, (120, 2): True}
    adapter_dir = roots[other] / "training" / f"job-{job_id}" / "adapter"
    assert {"adapter_model.safetensors", "adapter_config.json"} <= set(files_under(adapter_dir))
    assert {f"{bucket.adapter_prefix(job_id, 2)}{name}" for name in [*files_under(adapter_dir), "MANIFEST.json"]
            } == {key for key in keys(s3) if key.startswith(bucket.adapter_prefix(job_id, 2))}
    (tmp_path / "fetched").mkdir()
    storage.get_folder(bucket.adapter_prefix(job_id, 2), tmp_path / "fetched")
    assert files_under(tmp_path / "fetched") == files_under(adapter_dir)


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
    assert adapter.bucket_prefix == bucket.adapter_prefix(job.pk, 1)
    written = files_under(tmp_path / "host-a" / "training" / f"job-{job.pk}" / "adapter")

    settings.ARTIFACT_ROOT = tmp_path / "host-b"
    shutil.rmtree(tmp_path / "host-a")  # the machine that trained it is gone
    base, fetched = model_paths(adapter)
    assert base == Path(tiny_model.weights_path) and fetched.is_relative_to(tmp_path / "host-b")
    assert files_under(fetched) == written


# --- fencing: a worker that lost its claim (its heartbeat went stale in a long pause or a network partition,
# and another worker took the job over) may still be running; its writes must not reach the new owner's.


def take_over(job_id: int, worker: str):
    """Another worker's claim once the job's heartbeat is stale (what the reaper's re-sent message leads to)."""
    from django.utils import timezone

    from apps.core.jobs import JobRun

    TrainingJob.objects.filter(pk=job_id).update(heartbeat_at=timezone.now() - timezone.timedelta(hours=1))
    return JobRun.claim(TrainingJob, job_id, worker=worker)


@pytest.mark.timeout(120)
@pytest.mark.django_db
def test_a_worker_that_lost_its_claim_neither_replaces_nor_prunes_the_new_owners_checkpoints(
        s3, project, owner, tmp_path):  # noqa: F811
    from apps.core.jobs import JobRun
    from apps.training.runner import LeaseLost

    job = make_job(project, owner, state="queued")
    first = JobRun.claim(TrainingJob, job.pk, worker="host-a")
    stale = JobCallbacks(first.job, first)
    for step in (10, 20):
        stale.on_checkpoint(step=step, path=str(checkpoint_dir(tmp_path / "host-a", step, weights=b"a")))

    second = take_over(job.pk, "host-b")
    assert second.job.runs == 2 and (second.job.checkpoint_step, second.job.checkpoint_run) == (20, 1)
    resumed = tmp_path / "host-b-resumed"
    assert bucket.fetch_checkpoint(job.pk, resumed, up_to_step=20, run=1, log=print) == 20  # the first claim's
    assert files_under(resumed / "step-20") == files_under(tmp_path / "host-a" / "step-20")
    owner_run = JobCallbacks(second.job, second)
    owner_run.on_checkpoint(step=30, path=str(checkpoint_dir(tmp_path / "host-b", 30, weights=b"b")))
    assert bucket.bucket_checkpoints(job.pk) == {(30, 2): True}  # the first claim's, which the row left, pruned

    # The stale worker reaches its next checkpoint: the same step as the owner's, then a later one.
    for step in (30, 40):
        with pytest.raises(LeaseLost):
            stale.on_checkpoint(step=step, path=str(checkpoint_dir(tmp_path / "host-a", step, weights=b"a")))
        assert bucket.bucket_checkpoints(job.pk) == {(30, 2): True}  # its upload removed, the owner's untouched
    (tmp_path / "read-back").mkdir()
    storage.get_folder(bucket.checkpoint_prefix(job.pk, 30, 2), tmp_path / "read-back")
    assert files_under(tmp_path / "read-back") == files_under(tmp_path / "host-b" / "step-30")
    # Its row writes are refused: a step, an eval point, a log line, the start of a run.
    with pytest.raises(LeaseLost):
        stale.on_step({"step": 41, "loss": 1.0, "tokens_seen": 999})
    with pytest.raises(LeaseLost):
        stale.on_eval({"step": 41, "eval_loss": 1.0}, [])
    with pytest.raises(LeaseLost):
        stale.on_start(total_steps=1, resumed_from_step=0, info={})
    stale.log("a line from the worker that lost the job")
    job.refresh_from_db()
    assert (job.checkpoint_step, job.checkpoint_run, job.runs, job.worker) == (30, 2, 2, "host-b")
    assert job.current_step == 0 and job.tokens_trained == 0 and job.total_steps is None
    assert "lost the job" not in job.log_tail and not MetricPoint.objects.filter(job=job).exists()

    # A job recorded before claims tagged their folders resumes from its untagged ones (claim 0).
    legacy = make_job(project, owner, state="queued", checkpoint_step=10)
    storage.put_folder(checkpoint_dir(tmp_path / "legacy", 10), bucket.checkpoint_prefix(legacy.pk, 10, 0))
    claimed = JobRun.claim(TrainingJob, legacy.pk, worker="host-c")
    assert claimed.job.checkpoint_run == 0
    assert bucket.fetch_checkpoint(legacy.pk, tmp_path / "host-c", up_to_step=10, run=0, log=print) == 10
    JobCallbacks(claimed.job, claimed).on_checkpoint(step=20, path=str(checkpoint_dir(tmp_path / "host-c", 20)))
    assert bucket.bucket_checkpoints(legacy.pk) == {(20, 1): True}


@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)  # the runner closes its connection first, as in a worker
def test_a_worker_that_lost_its_claim_registers_no_adapter_and_removes_its_upload(s3, project, owner,  # noqa: F811
                                                                                  tmp_path):
    from types import SimpleNamespace

    from apps.core.jobs import JobRun
    from apps.training.runner import _succeed

    job = make_job(project, owner, state="queued")
    first = JobRun.claim(TrainingJob, job.pk, worker="host-a")
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_model.safetensors").write_bytes(b"a" * 10)
    prefix = bucket.upload_adapter(job.pk, first.job.runs, tmp_path / "adapter")
    assert prefix == f"training/job-{job.pk}/adapter-r1/"
    take_over(job.pk, "host-b")
    _succeed(first, SimpleNamespace(), {}, bucket_prefix=prefix)  # returns before it reads the result
    job.refresh_from_db()
    assert job.state == "running" and job.adapter is None and job.runs == 2 and job.worker == "host-b"
    assert not [key for key in keys(s3) if key.startswith(f"training/job-{job.pk}/")]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.django_db(transaction=True)
# SQLite has one write lock for the whole file: a worker stopped inside a write (as SIGSTOP may land)
# holds it, and no other process can take anything over. Machines standing for two hosts share a
# server database.
@pytest.mark.skipif(connection.vendor != "postgresql", reason="two hosts share a server database (PostgreSQL)")
def test_a_paused_worker_that_lost_its_job_stops_and_the_new_owners_checkpoints_and_adapter_stand(
        client, scientist, project, tiny_model, qa_version, two_hosts, s3, settings, tmp_path):  # noqa: F811
    # A long pause (a GC pause, a partition) stands in: the running worker's pool process is stopped
    # (SIGSTOP), so its heartbeat goes stale and the other takes the job over; then it is let go on.
    roots, workers = two_hosts
    paused = None
    try:
        client.force_login(scientist)
        job_id = launch(client, project, launch_body(tiny_model, qa_version, max_steps=STEPS, eval_every=None,
                                                     checkpoint_every=40))["id"]
        job = wait_for(lambda: (j := TrainingJob.objects.get(pk=job_id)).checkpoint_step
                       and j.current_step > j.checkpoint_step + 2 and j, timeout=120, interval=0.02,
                       what="a checkpoint and a few steps more")
        paused = job.worker_pid
        os.kill(paused, signal.SIGSTOP)
        first, other = ("host-a", "host-b") if job.worker.startswith("host-a") else ("host-b", "host-a")
        job.refresh_from_db()
        checkpoint = job.checkpoint_step
        assert (job.runs, job.checkpoint_run) == (1, 1)

        settings.TRAINING_HEARTBEAT_STALE_S = 3
        wait_for(lambda: reap_stale()["training.TrainingJob"] == 1, timeout=30, interval=0.5,
                 what="the reaper to find the job's worker silent")
        wait_for(lambda: (j := TrainingJob.objects.get(pk=job_id)).runs == 2 and j.worker.startswith(other),
                 timeout=60, interval=0.05, what="the other worker to take the job over")
        os.kill(paused, signal.SIGCONT)  # the first worker goes on, unaware, while the owner trains
        paused = None

        def first_is_idle():
            active = app.control.inspect(destination=[workers_name(first)], timeout=2).active() or {}
            return active.get(workers_name(first)) == []
        wait_for(first_is_idle, timeout=60, interval=0.5, what="the worker that lost the job to stop it")

        finished = ended(client, job_id, timeout=200)
        assert finished["state"] == "succeeded", (finished["error"], finished["traceback"])
        assert finished["runs"] == 2 and finished["worker"].startswith(other)
        assert finished["info"]["resumed_from_step"] == checkpoint
        assert train_steps(job_id) == list(range(1, STEPS + 1))
        job.refresh_from_db()
        assert (job.checkpoint_step, job.checkpoint_run) == (STEPS, 2)
        assert bucket.bucket_checkpoints(job_id) == {(80, 2): True, (120, 2): True}
        # The adapter registered is the owner's: its bucket copy, equal to the owner's local one.
        assert job.adapter.bucket_prefix == bucket.adapter_prefix(job_id, 2)
        assert not [key for key in keys(s3) if key.startswith(bucket.adapter_prefix(job_id, 1))]
        (tmp_path / "fetched").mkdir()
        storage.get_folder(job.adapter.bucket_prefix, tmp_path / "fetched")
        assert files_under(tmp_path / "fetched") == files_under(roots[other] / "training" / f"job-{job_id}" / "adapter")
    finally:
        if paused:
            os.kill(paused, signal.SIGCONT)


def workers_name(name: str) -> str:
    """The Celery hostname tests.conftest._start_worker gives a worker named `name`."""
    return f"{name}-{os.getpid()}@{socket.gethostname()}"
