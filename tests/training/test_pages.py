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
    assert "RuntimeError: boom" in page and "Traceback" in page
    assert "Resume" not in page and "Reproduce" not in page and ">Cancel<" not in page
    assert client.post(f"/projects/{project.pk}/jobs/{job.pk}/resume/").status_code == 403
