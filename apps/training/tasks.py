"""Celery tasks of fine-tuning: a job run on a `gpu` worker (apps.core.tasks reaps those whose
worker vanished). The runner (torch) is imported when a task runs, not by web processes."""

import os

from celery import shared_task


@shared_task(name="training.run", bind=True)
def train_task(self, job_id: int) -> None:
    from apps.training.runner import run_job

    run_job(job_id, worker=self.request.hostname or "", pid=os.getpid())


@shared_task(name="training.join", bind=True)
def join_task(self, node_id: int) -> None:
    """One more machine of a job across machines: claims the slot and joins the run's rendezvous."""
    from apps.training.nodes import join

    join(node_id, worker=self.request.hostname or "", pid=os.getpid())


@shared_task(name="training.calibrate", bind=True)
def calibrate_task(self, measurement_id: int) -> None:
    """A short timed run on a `gpu` worker, so that the first job on a model gets a time estimate."""
    from apps.training.speed import run_calibration

    run_calibration(measurement_id, worker=self.request.hostname or "")
