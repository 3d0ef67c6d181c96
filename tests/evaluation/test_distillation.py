"""Distillation end to end in one product: a local teacher (a tiny model of the project, run by the
real `inference` worker) answers a version's prompts into the dataset's next version; a tiny
student is fine-tuned on that version (the real `gpu` worker); then one comparison of the
student, the teacher and the student's base, created through the API and generated for real."""

import json
import uuid

import pytest
from django.conf import settings

from apps.datasets.models import DatasetRow, DatasetVersion
from apps.registry.services import model_register, run_inspection
from tests.conftest import wait_for
from tests.training.fixtures import launch_body
from tests.training.fixtures import make_version as make_rows
from tests.workers.test_models import save_tiny_model

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(300)]


def post(client, url, body):
    response = client.post(url, json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()


def ended(client, url, timeout=180) -> dict:
    return wait_for(lambda: (r := client.get(url).json())["state"] in ("succeeded", "failed", "cancelled") and r,
                    timeout=timeout, interval=0.3, what=f"{url} to end")


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_a_teacher_answers_a_student_is_fine_tuned_on_them_and_one_comparison_holds_student_teacher_and_base(
        client, scientist, owner, project, tiny_model, celery_worker, inference_worker):
    directory = settings.MODEL_ROOTS[0] / f"teacher-{uuid.uuid4().hex[:8]}"
    directory.mkdir(parents=True)
    save_tiny_model(directory, initializer_range=0.5)  # other weights than the student's base
    teacher = model_register(user=owner, project=project, name="Teacher", path=str(directory))
    run_inspection(teacher.pk)
    source = make_rows(project, owner)
    source.schema = {"roles": {"prompt": "prompt", "response": "response"}, "metadata_keys": []}
    source.save(update_fields=["schema"])
    client.force_login(scientist)

    run = post(client, f"/api/projects/{project.pk}/teacher-runs/",
               {"version": source.pk, "local_model": teacher.pk, "max_tokens": 16, "temperature": 0.8, "seed": 1})
    run = ended(client, f"/api/projects/{project.pk}/teacher-runs/{run['id']}/")
    assert run["state"] == "succeeded", run["error"]
    assert run["rows_done"] == source.row_count and run["cost"] is None  # a local teacher costs no money
    taught = DatasetVersion.objects.get(pk=run["version"])
    rows = list(DatasetRow.objects.filter(version=taught).order_by("position"))
    assert [(r.prompt, r.split) for r in rows] == list(source.rows.order_by("position").values_list("prompt", "split"))
    assert all(r.metadata["teacher"] == "Teacher" and int(r.metadata["completion_tokens"]) >= 1 for r in rows)
    assert sum(int(r.metadata["completion_tokens"]) for r in rows) == run["completion_tokens"]

    job = post(client, f"/api/projects/{project.pk}/jobs/", launch_body(tiny_model, taught, max_steps=6,
                                                                        eval_every=None, checkpoint_every=6))
    job = ended(client, f"/api/jobs/{job['id']}/")
    assert job["state"] == "succeeded", job.get("error")
    assert job["dataset_version"] == taught.pk

    comparison = post(client, f"/api/projects/{project.pk}/comparisons/", {
        "name": "Student, teacher, base", "models": [job["adapter"], teacher.pk, tiny_model.pk],
        "dataset_version": taught.pk, "split": "validation", "sample_size": 3, "seed": 0,
        "params": {"max_new_tokens": 4}})
    comparison = ended(client, f"/api/comparisons/{comparison['id']}/")
    assert comparison["state"] == "succeeded", comparison["error"]
    grid = client.get(f"/api/comparisons/{comparison['id']}/grid/").json()
    assert comparison["cells_done"] == len(grid["cells"]) == 9 and not any(c["error"] for c in grid["cells"])
    assert {p["reference"] for p in grid["prompts"]} <= {r.response for r in rows}  # the teacher's answers
