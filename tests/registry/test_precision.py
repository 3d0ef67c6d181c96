"""Serving precisions through the API and a real inference worker: who may set a model's precision
and measure it, what is refused (and named), the measurement job run by the worker, `auto`
following it, and the precision the worker loads recorded on each generation."""

import pytest

from apps.projects.models import AuditEvent
from apps.registry.models import PrecisionMeasurement, RegisteredModel
from apps.serving.models import Generation
from apps.serving.services import generation_create, generation_enqueue
from tests.conftest import wait_for
from tests.registry.test_merge import register_adapter

FP32_INT8_RESULTS = [{"precision": "fp32", "tokens_per_s": 10.0, "perplexity": 20.0, "load_s": 0.1, "error": ""},
                     {"precision": "bf16", "tokens_per_s": None, "perplexity": None, "load_s": None,
                      "error": "This CPU has no native bf16 (AVX512-BF16 or AMX)."},
                     {"precision": "int8", "tokens_per_s": 15.0, "perplexity": 20.2, "load_s": 0.3, "error": ""}]


def patch(client, model, body, **kwargs):
    return client.patch(f"/api/models/{model.pk}/", body, content_type="application/json", **kwargs)


@pytest.mark.django_db
def test_who_may_set_the_serving_precision_and_what_is_refused(client, scientist, viewer, outsider, owner, tiny_model):
    client.force_login(viewer)  # sees the model, may not change how it is served
    assert patch(client, tiny_model, {"serving_precision": "int8"}).status_code == 403
    client.force_login(outsider)
    assert patch(client, tiny_model, {"serving_precision": "int8"}).status_code == 404
    client.force_login(scientist)
    for body in ({"serving_precision": "fp16"}, {}, {"serving_precision": ""}, {"serving_precision": None},
                 {"serving_precision": ["bf16"]}, {"serving_precision": 8}, {"serving_precision": "x" * 10_000},
                 {"serving_precision": "int8\x00; rm -rf /"}, {"serving_precision": {"$ne": 1}}):
        answer = patch(client, tiny_model, body)
        assert answer.status_code == 400 and "serving_precision" in answer.json(), (body, answer.content)
    assert client.patch(f"/api/models/{tiny_model.pk}/", "{not json", content_type="application/json"
                        ).status_code == 400
    tiny_model.refresh_from_db()
    assert tiny_model.serving_precision == "auto"

    answer = patch(client, tiny_model, {"serving_precision": "int8"})
    assert answer.status_code == 200 and answer.json()["serving_precision"] == "int8"
    assert AuditEvent.objects.filter(action="model.serving_precision", after={"serving_precision": "int8"}).exists()
    adapter = register_adapter(tiny_model, owner)
    refused = patch(client, adapter, {"serving_precision": "int8"})
    assert refused.status_code == 400 and refused.json()["field"] == "serving_precision"
    assert "adapter" in refused.json()["detail"]
    # bf16 is refused where the inference worker's hardware was measured without it.
    PrecisionMeasurement.objects.create(model=tiny_model, state="succeeded", device="cpu", results=FP32_INT8_RESULTS)
    no_bf16 = patch(client, tiny_model, {"serving_precision": "bf16"})
    assert no_bf16.status_code == 400 and no_bf16.json()["field"] == "serving_precision"
    assert "no native bf16" in no_bf16.json()["detail"]
    assert patch(client, adapter, {"serving_precision": "fp32"}).status_code == 200


@pytest.mark.django_db
def test_auto_follows_the_latest_measurement_and_never_int8_under_an_adapter(owner, tiny_model):
    from apps.registry.selectors import serving_precision

    adapter = register_adapter(tiny_model, owner)
    assert serving_precision(tiny_model) is None and serving_precision(adapter) is None  # the worker's default
    PrecisionMeasurement.objects.create(model=tiny_model, state="succeeded", device="cpu", results=FP32_INT8_RESULTS)
    PrecisionMeasurement.objects.create(model=tiny_model, state="failed", device="cpu", results=[])
    assert serving_precision(tiny_model) == "int8"  # 1% above fp32's perplexity, and faster
    assert serving_precision(adapter) == "fp32"  # its base's measurement, int8 left out
    RegisteredModel.objects.filter(pk=tiny_model.pk).update(serving_precision="fp32")
    tiny_model.refresh_from_db()
    assert serving_precision(tiny_model) == "fp32"


@pytest.mark.django_db
def test_who_may_measure_and_cancel(client, scientist, viewer, outsider, owner, tiny_model, other_project):
    url = f"/api/models/{tiny_model.pk}/precision-measurements/"
    client.force_login(viewer)
    assert client.post(url).status_code == 403
    assert client.get(url).status_code == 200  # the figures are the model's facts
    client.force_login(outsider)
    assert client.post(url).status_code == 404 and client.get(url).status_code == 404
    theirs = RegisteredModel.objects.create(project=other_project, name="Theirs", format="hf_dir", source_path="/t",
                                            weights_path="/t", status="ready", info=tiny_model.info)
    their_job = PrecisionMeasurement.objects.create(model=theirs)
    client.force_login(scientist)
    assert client.get(f"/api/precision-measurements/{their_job.pk}/").status_code == 404
    assert client.post(f"/api/precision-measurements/{their_job.pk}/cancel/").status_code == 404
    RegisteredModel.objects.filter(pk=tiny_model.pk).update(status="converting")
    not_ready = client.post(url)
    assert not_ready.status_code == 400 and not_ready.json()["field"] == "model"
    RegisteredModel.objects.filter(pk=tiny_model.pk).update(status="ready")
    started = client.post(url)  # no worker consumes the inference queue here: it stays queued
    assert started.status_code == 202 and started.json()["state"] == "queued"
    job_id = started.json()["id"]
    client.force_login(viewer)
    assert client.post(f"/api/precision-measurements/{job_id}/cancel/").status_code == 403
    client.force_login(scientist)
    cancelled = client.post(f"/api/precision-measurements/{job_id}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert client.post(f"/api/precision-measurements/{job_id}/cancel/").status_code == 409


def generate(owner, model) -> Generation:
    generation = generation_create(user=owner, project=model.project, model_ref=model.name, source="api",
                                   prompt="what is the capital of france ?",
                                   params={"max_new_tokens": 4, "temperature": 0})
    generation_enqueue(generation.pk)
    return wait_for(lambda: Generation.objects.filter(pk=generation.pk, state__in=Generation.ENDED).first(),
                    timeout=60, what="the generation")


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_worker_measures_each_precision_and_loads_the_one_chosen(client, scientist, owner, tiny_model,
                                                                    inference_worker):
    client.force_login(scientist)
    default = generate(owner, tiny_model)
    assert default.state == "succeeded" and default.precision == "fp32"  # nothing measured: a CPU's default

    answer = client.post(f"/api/models/{tiny_model.pk}/precision-measurements/")
    assert answer.status_code == 202, answer.content
    url = f"/api/precision-measurements/{answer.json()['id']}/"
    job = wait_for(lambda: (j := client.get(url).json())["state"] in ("succeeded", "failed") and j,
                   timeout=180, interval=0.5, what="the measurement")
    assert job["state"] == "succeeded", job["error"]
    assert job["device"] == "cpu" and job["steps_done"] == job["steps_total"] == 3
    rows = {row["precision"]: row for row in job["results"]}
    assert list(rows) == ["fp32", "bf16", "int8"]
    assert rows["fp32"]["delta_perplexity_pct"] == 0 and rows["fp32"]["speedup"] == 1
    for row in rows.values():
        if not row["error"]:  # bf16 only where the CPU has it
            assert row["tokens_per_s"] > 0 and row["perplexity"] > 1
            assert abs(row["delta_perplexity_pct"]) < 5  # the tiny model's reference-text perplexity
    assert not rows["int8"]["error"]

    from apps.registry.selectors import serving_precision

    chosen = serving_precision(tiny_model)
    assert generate(owner, tiny_model).precision == chosen  # auto: what the measurement chose

    assert patch(client, tiny_model, {"serving_precision": "int8"}).status_code == 200
    quantized = generate(owner, tiny_model)
    assert quantized.state == "succeeded" and quantized.precision == "int8" and quantized.completion_tokens > 0
    assert patch(client, tiny_model, {"serving_precision": "fp32"}).status_code == 200
    again = generate(owner, tiny_model)
    assert again.precision == "fp32" and again.output == default.output  # fp32 greedy output unchanged


@pytest.mark.django_db
def test_the_model_page_sets_the_precision_and_starts_and_stops_a_measurement(client, scientist, viewer, outsider,
                                                                               tiny_model):
    page = f"/projects/{tiny_model.project_id}/models/{tiny_model.pk}/"
    client.force_login(viewer)
    shown = client.get(page)
    assert b'data-testid="serving-precision"' in shown.content and b"Not measured yet" in shown.content
    assert b'serving-precision-form' not in shown.content  # no form for those who may not change it
    assert client.post(f"{page}serving-precision/", {"serving_precision": "int8"}).status_code == 403
    assert client.post(f"{page}precision-measurements/").status_code == 403
    client.force_login(outsider)
    assert client.post(f"{page}serving-precision/", {"serving_precision": "int8"}).status_code == 404
    client.force_login(scientist)
    for value in ("fp16", "", "x" * 5000):
        answer = client.post(f"{page}serving-precision/", {"serving_precision": value}, follow=True)
        assert answer.status_code == 200 and b"The serving precision is one of" in answer.content
    assert client.post(f"{page}serving-precision/", {}, follow=True).status_code == 200
    tiny_model.refresh_from_db()
    assert tiny_model.serving_precision == "auto"
    client.post(f"{page}serving-precision/", {"serving_precision": "bf16"})
    tiny_model.refresh_from_db()
    assert tiny_model.serving_precision == "bf16"

    started = client.post(f"{page}precision-measurements/", {"action": "start"}, follow=True)
    job = PrecisionMeasurement.objects.get(model=tiny_model)
    assert job.state == "queued" and b"Stop" in started.content
    for bad in ("", "abc", "-1", str(job.pk + 1000)):
        refused = client.post(f"{page}precision-measurements/", {"action": "cancel", "job": bad}, follow=True)
        assert b"No such measurement" in refused.content
    client.post(f"{page}precision-measurements/", {"action": "cancel", "job": job.pk})
    job.refresh_from_db()
    assert job.state == "cancelled"
