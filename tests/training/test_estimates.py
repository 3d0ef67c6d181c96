"""Time estimates from real runs: the first job on a model is estimated from a calibration run on a
real worker (not in the web request), every finished job records its speed, and a DPO job is estimated
for what DPO does (chosen and rejected, forward and back, and a reference pass), not as an SFT job.
How close an estimate comes to the run is a timing, not a test assertion (this machine is shared)."""

import pytest

from apps.training.models import SpeedMeasurement, TrainingJob
from tests.conftest import wait_for
from tests.training.fixtures import launch_body
from tests.training.test_dpo_jobs import dpo_body, preference_version

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def estimate(client, project, body) -> dict:
    response = client.post(f"/api/projects/{project.pk}/jobs/estimate/", body, content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def run_to_the_end(client, project, body) -> TrainingJob:
    launched = client.post(f"/api/projects/{project.pk}/jobs/", body, content_type="application/json")
    assert launched.status_code == 201, launched.content
    job = wait_for(lambda: (j := TrainingJob.objects.get(pk=launched.json()["id"])).state in TrainingJob.ENDED and j,
                   timeout=240, interval=0.2, what="the job to end")
    assert job.state == "succeeded", (job.error, job.traceback)
    return job


def test_the_first_job_is_estimated_from_a_calibration_run_and_a_dpo_job_for_what_dpo_does(
        client, scientist, owner, project, tiny_model, qa_version, celery_worker):
    client.force_login(scientist)
    sft = launch_body(tiny_model, qa_version, max_steps=150, eval_every=50)
    first = estimate(client, project, sft)
    assert first["time_s"] is None and first["calibrating"] is True  # nothing known: a worker measures
    assert estimate(client, project, sft)["calibrating"] is True
    assert SpeedMeasurement.objects.filter(kind="calibration").count() == 1  # asked twice, queued once
    measured = wait_for(lambda: SpeedMeasurement.objects.filter(kind="calibration", state="done").first(),
                        timeout=120, interval=0.2, what="the calibration run")
    assert measured.flops_per_s > 0 and measured.seconds_per_eval > 0 and measured.chars_per_token > 0

    calibrated = estimate(client, project, sft)
    assert calibrated["time_basis"]["kind"] == "calibration" and calibrated["time_s"] > 0
    job = run_to_the_end(client, project, sft)
    recorded = SpeedMeasurement.objects.get(job=job)  # the finished job's measured speed is kept
    assert recorded.kind == "job" and recorded.method == "sft" and recorded.seconds_per_step > 0

    preferences = preference_version(project, owner)
    dpo = dpo_body(tiny_model, preferences, max_steps=150, eval_every=50)
    dpo_estimate = estimate(client, project, dpo)
    assert dpo_estimate["time_basis"] == {**dpo_estimate["time_basis"], "kind": "job", "job": job.pk,
                                          "method": "sft"}
    # The same steps on the same rows as SFT would take: DPO works through both answers and a reference pass.
    as_sft = estimate(client, project, launch_body(tiny_model, preferences, max_steps=150, eval_every=50))
    assert dpo_estimate["time_breakdown"]["steps"] > 1.5 * as_sft["time_breakdown"]["steps"]
    dpo_job = run_to_the_end(client, project, dpo)
    assert SpeedMeasurement.objects.get(job=dpo_job).method == "dpo"  # the DPO job's own speed, kept for the next
