"""A gpu worker told to stop (SIGTERM: a rolling update, a scale-down, a container stop) does not
hold the stop up for the rest of a fine-tune, nor is it killed mid-step: at the next step the job
checkpoints and goes back to the queue, the worker exits, and another worker resumes the job from
that checkpoint, every step trained exactly once."""

import os
import signal
import socket

import pytest

from apps.training.models import TrainingJob
from tests.conftest import _start_worker, _stop_worker, wait_for
from tests.training.fixtures import launch_body
from tests.training.test_jobs_run import ended, launch, train_steps
from workbench.celery import app

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(300)]

STEPS = 300


def test_a_stopping_worker_hands_its_job_back_at_the_next_step_and_another_resumes_it(
        client, scientist, project, tiny_model, qa_version, celery_worker):
    # This test's own gpu worker must take the job: the session's worker leaves the gpu queue meanwhile.
    session_worker = f"test-worker-{os.getpid()}@{socket.gethostname()}"
    app.control.cancel_consumer("gpu", destination=[session_worker], reply=True, timeout=10)
    stopping = _start_worker(queues="gpu", pool="prefork", concurrency=1, name="stopping-worker")
    try:
        client.force_login(scientist)
        job_id = launch(client, project, launch_body(tiny_model, qa_version, max_steps=STEPS, eval_every=None,
                                                     checkpoint_every=100))["id"]
        job = wait_for(lambda: (j := TrainingJob.objects.get(pk=job_id)).current_step >= 5 and j, timeout=120,
                       interval=0.02, what="5 steps")
        assert job.worker.startswith("stopping-worker")
        stopping.send_signal(signal.SIGTERM)
        assert stopping.wait(60) == 0  # the stop waited for one step, not for the rest of the job
        job.refresh_from_db()
        assert job.state == "queued" and job.worker == "" and job.runs == 0  # not counted as a lost worker
        assert 5 <= job.current_step < STEPS
        assert job.checkpoint_step == job.current_step  # checkpointed where it stopped
        assert "handed back at step" in job.log_tail
        stopped_at = job.current_step
    finally:
        if stopping.poll() is None:
            _stop_worker(stopping)
        app.control.add_consumer("gpu", destination=[session_worker], reply=True, timeout=10)

    finished = ended(client, job_id, timeout=240)  # the session's worker takes the message sent back
    assert finished["state"] == "succeeded", (finished["error"], finished["traceback"])
    assert finished["info"]["resumed_from_step"] == stopped_at
    assert finished["runs"] == 1
    assert train_steps(job_id) == list(range(1, STEPS + 1))
