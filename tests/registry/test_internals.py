"""Tracebacks and server paths are for those who may manage the job or model; members read the
error message only, in the API and on the pages."""

import pytest

from apps.registry.models import RegisteredModel
from tests.training.fixtures import make_job

pytestmark = pytest.mark.django_db

TRACE = 'Traceback (most recent call last):\n  File "/srv/workbench/workers/training/loop.py", line 9\nRuntimeError: boom'


@pytest.fixture
def failed_job(project, owner):
    return make_job(project, owner, state="failed", error="RuntimeError: boom", traceback=TRACE)


@pytest.fixture
def model(project, owner):
    return RegisteredModel.objects.create(project=project, name="Base", format="hf_dir",
                                          source_path="/srv/models/secret-base", weights_path="/srv/models/secret-base",
                                          status="ready", info={"path": "/srv/models/secret-base", "format": "hf_dir"},
                                          created_by=owner)


@pytest.mark.parametrize("persona, sees", [("scientist", True), ("admin", True), ("viewer", False)])
def test_a_jobs_traceback_is_shown_to_those_who_launch_jobs(client, request, failed_job, persona, sees):
    client.force_login(request.getfixturevalue(persona))
    body = client.get(f"/api/jobs/{failed_job.pk}/").json()
    assert body["error"] == "RuntimeError: boom"
    assert (body["traceback"] == TRACE) is sees and (body["traceback"] == "") is not sees
    listed = client.get(f"/api/projects/{failed_job.project_id}/jobs/").json()["results"][0]
    assert (listed["traceback"] == TRACE) is sees
    page = client.get(f"/projects/{failed_job.project_id}/jobs/{failed_job.pk}/").content.decode()
    assert "RuntimeError: boom" in page
    assert ("/srv/workbench/workers" in page) is sees


@pytest.mark.parametrize("persona, sees", [("scientist", True), ("viewer", False), ("annotator", None)])
def test_a_models_server_path_is_shown_to_those_who_register_models(client, request, model, persona, sees):
    client.force_login(request.getfixturevalue(persona))
    answer = client.get(f"/api/models/{model.pk}/")
    if sees is None:  # no model.view at all
        assert answer.status_code == 403
        return
    body = answer.json()
    assert (body["source_path"], body["info"]["path"]) == (("/srv/models/secret-base",) * 2 if sees else ("", ""))
    listed = client.get(f"/api/projects/{model.project_id}/models/").json()["results"][0]
    assert (listed["source_path"] == "/srv/models/secret-base") is sees
    page = client.get(f"/projects/{model.project_id}/models/{model.pk}/").content.decode()
    assert ("/srv/models/secret-base" in page) is sees
