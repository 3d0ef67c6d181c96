"""QLoRA (config `quantization`: nf4 or int8 base weights through bitsandbytes, CUDA only): offered in
the launch form with its memory estimate; refused at launch, naming config.quantization, where the
training workers have no CUDA GPU (settings.TRAINING_CUDA, "auto" = this machine's NVIDIA devices);
a job that still reaches a worker without one fails with the same reason before training. The
training itself on a GPU: tests/workers/test_training.py (skipped here, run by bench/gpu_check.sh)."""

import glob

import pytest

from apps.training.models import TrainingJob
from tests.training.fixtures import launch_body
from tests.training.test_jobs_run import ended, launch

pytestmark = pytest.mark.django_db


def post(client, project, path, body):
    return client.post(f"/api/projects/{project.pk}/jobs/{path}", body, content_type="application/json")


@pytest.mark.parametrize("cuda", ["0", pytest.param("auto", marks=pytest.mark.skipif(
    bool(glob.glob("/dev/nvidia[0-9]*")), reason="this machine has NVIDIA devices: auto allows it"))])
@pytest.mark.parametrize("quantization", ["nf4", "int8"])
def test_a_quantized_base_is_refused_at_launch_where_no_worker_has_cuda(client, scientist, project, tiny_model,
                                                                       qa_version, settings, cuda, quantization):
    settings.TRAINING_CUDA = cuda
    client.force_login(scientist)
    for path in ("", "estimate/"):
        response = post(client, project, path, launch_body(tiny_model, qa_version, quantization=quantization))
        assert response.status_code == 400, response.content
        assert response.json()["field"] == "config.quantization" and "CUDA" in response.json()["detail"]
    assert not TrainingJob.objects.exists()


@pytest.mark.parametrize("body, words", [({"quantization": "fp4"}, "none, nf4, int8"),
                                         ({"quantization": ["nf4"]}, "none, nf4, int8"),
                                         ({"quantization": "nf4", "device": "cpu"}, "device cpu")])
def test_bad_quantization_values_are_refused_naming_the_field(client, scientist, project, tiny_model, qa_version,
                                                             settings, body, words):
    settings.TRAINING_CUDA = "1"
    client.force_login(scientist)
    response = post(client, project, "", launch_body(tiny_model, qa_version, **body))
    assert response.status_code == 400 and response.json()["field"] == "config.quantization", response.content
    assert words in response.json()["detail"]


def test_the_estimate_shows_the_quantized_base_smaller(client, scientist, project, tiny_model, qa_version, settings):
    settings.TRAINING_CUDA = "1"
    client.force_login(scientist)

    def memory(quantization):
        response = post(client, project, "estimate/", launch_body(tiny_model, qa_version, precision="bf16",
                                                                  quantization=quantization))
        assert response.status_code == 200, response.content
        return response.json()["memory"]["bf16"]

    none, int8, nf4 = memory("none"), memory("int8"), memory("nf4")
    assert nf4["weights_bytes"] < int8["weights_bytes"] < none["weights_bytes"]
    assert nf4["quantization"] == "nf4" and nf4["activations_bytes"] == none["activations_bytes"]


def test_the_launch_form_offers_the_base_weights_choice(client, scientist, project):
    client.force_login(scientist)
    page = client.get(f"/projects/{project.pk}/jobs/new/")
    assert page.status_code == 200
    assert b'name="quantization"' in page.content and b"4-bit NF4, double quantization" in page.content


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(bool(glob.glob("/dev/nvidia[0-9]*")), reason="checks a worker without CUDA")
def test_a_job_that_reaches_a_worker_without_cuda_fails_naming_quantization(client, scientist, project, tiny_model,
                                                                           qa_version, settings, celery_worker):
    settings.TRAINING_CUDA = "1"  # the web tier believes there are GPU workers; this one has none
    client.force_login(scientist)
    job = ended(client, launch(client, project, launch_body(tiny_model, qa_version, quantization="nf4"))["id"])
    assert job["state"] == "failed" and "quantization" in job["error"] and "cpu" in job["error"], job["error"]
    assert job["current_step"] == 0
