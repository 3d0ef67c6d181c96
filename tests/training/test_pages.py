"""Job pages refuse what they should: other projects' jobs, malformed ids, unknown actions."""

import pytest

from tests.training.fixtures import make_job

pytestmark = pytest.mark.django_db


def test_comparing_a_job_of_another_project_is_not_found(client, scientist, owner, project, other_project,
                                                         outsider):
    mine, theirs = make_job(project, owner), make_job(other_project, outsider)
    client.force_login(scientist)
    url = f"/projects/{project.pk}/jobs/compare/"
    assert client.get(url, {"jobs": [mine.pk]}).status_code == 200
    assert client.get(url, {"jobs": [mine.pk, theirs.pk]}).status_code == 404
    assert client.get(url, {"jobs": ["1; DROP TABLE"]}).status_code == 404
    assert client.get(f"/projects/{other_project.pk}/jobs/{theirs.pk}/").status_code == 404
    assert client.get(f"/projects/{project.pk}/jobs/{theirs.pk}/").status_code == 404


def test_an_unknown_job_action_is_not_found_and_changes_nothing(client, scientist, owner, project):
    job = make_job(project, owner, state="queued")
    client.force_login(scientist)
    assert client.post(f"/projects/{project.pk}/jobs/{job.pk}/explode/").status_code == 404
    job.refresh_from_db()
    assert job.state == "queued"


def test_a_viewer_sees_a_job_page_without_its_buttons(client, viewer, owner, project):
    job = make_job(project, owner, state="failed", error="RuntimeError: boom", traceback="Traceback ...")
    client.force_login(viewer)
    page = client.get(f"/projects/{project.pk}/jobs/{job.pk}/").content.decode()
    assert "RuntimeError: boom" in page and "Traceback" not in page  # the message, not the traceback
    assert "Resume" not in page and "Reproduce" not in page and ">Cancel<" not in page
    assert client.post(f"/projects/{project.pk}/jobs/{job.pk}/resume/").status_code == 403


def test_a_succeeded_job_is_compared_with_its_base_on_its_evaluation_prompts(client, scientist, viewer, owner,
                                                                            project):
    from apps.comparison.models import Comparison
    from apps.registry.models import RegisteredModel

    job = make_job(project, owner, state="succeeded", eval_split="validation", train_split="train")
    job.adapter = RegisteredModel.objects.create(project=project, name="Run adapter", kind="adapter",
                                                 base_model=job.base_model, format="peft", source_path="/nonexistent",
                                                 weights_path="/nonexistent", status="ready", info={})
    job.save()
    client.force_login(viewer)
    assert "Compare with base" not in client.get(f"/projects/{project.pk}/jobs/{job.pk}/").content.decode()
    assert client.post(f"/projects/{project.pk}/jobs/{job.pk}/compare/").status_code == 403
    client.force_login(scientist)
    assert "Compare with base" in client.get(f"/projects/{project.pk}/jobs/{job.pk}/").content.decode()
    response = client.post(f"/projects/{project.pk}/jobs/{job.pk}/compare/")
    comparison = Comparison.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/comparisons/{comparison.pk}/")
    assert [c.model_id for c in comparison.contestants.order_by("position")] == [job.base_model_id, job.adapter_id]
    assert comparison.source["split"] == "validation" and comparison.prompts.count() == 6  # the whole eval split
    assert comparison.name == "Run: adapter vs base"


def test_a_job_without_an_adapter_cannot_be_compared(client, scientist, owner, project):
    from apps.comparison.models import Comparison

    job = make_job(project, owner, state="running")
    client.force_login(scientist)
    response = client.post(f"/projects/{project.pk}/jobs/{job.pk}/compare/", follow=True)
    assert "no adapter yet" in response.content.decode() and not Comparison.objects.exists()
