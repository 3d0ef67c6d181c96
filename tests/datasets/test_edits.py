"""Fixing and dropping rows makes a new version (rows never change in place), run by a real worker;
browsing by a metadata field."""

import pytest

from apps.datasets.models import Dataset, DatasetRow, DatasetVersion
from apps.datasets.writer import write_version
from tests.conftest import wait_for

ROLES = {"id": "id", "prompt": "prompt", "response": "response", "label": "label"}


def records():
    return [{"id": f"r{i}", "prompt": f"question {i}", "response": f"answer {i}", "label": "ok",
             "shop": "north" if i < 3 else "south"} for i in range(6)]


@pytest.fixture
def version(project, owner):
    return write_version(dataset=Dataset.objects.create(project=project, name="QA", created_by=owner),
                         records=records(), roles=ROLES, author=owner)


def edit_url(version):
    return f"/api/datasets/{version.dataset_id}/versions/{version.number}/edit/"


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_an_edit_makes_a_new_version_hashed_like_the_same_rows_imported(client, scientist, owner, project, version,
                                                                        celery_worker):
    client.force_login(scientist)
    response = client.post(edit_url(version), {"edits": {"1": {"response": "a better answer", "label": "fixed"}},
                                               "drops": [4], "message": "fix 1, drop 4"},
                           content_type="application/json")
    assert response.status_code == 202, response.content

    def finished():
        job = client.get(f"/api/derive-jobs/{response.json()['id']}/").json()
        return job if job["state"] in ("succeeded", "failed") else None

    job = wait_for(finished, timeout=60, what="the edit")
    assert job["state"] == "succeeded", job["error"]
    new = DatasetVersion.objects.get(dataset=version.dataset, number=2)
    assert new.parent_id == version.pk and new.row_count == 5 and new.message == "fix 1, drop 4"
    rows = list(DatasetRow.objects.filter(version=new).order_by("position"))
    assert [r.ext_id for r in rows] == ["r0", "r1", "r2", "r3", "r5"]  # renumbered without r4
    assert (rows[1].response, rows[1].label) == ("a better answer", "fixed")
    assert DatasetRow.objects.get(version=version, position=1).response == "answer 1"  # the old one is untouched
    expected = records()
    expected[1].update(response="a better answer", label="fixed")
    del expected[4]
    same = write_version(dataset=Dataset.objects.create(project=project, name="Same", created_by=owner),
                         records=expected, roles=ROLES)
    assert new.content_hash == same.content_hash != version.content_hash


@pytest.mark.django_db
@pytest.mark.parametrize("body, field", [
    ({"edits": {"99": {"response": "x"}}}, "edits"),
    ({"edits": {"1": {"metadata": "x"}}}, "edits.1.metadata"),
    ({"edits": {"1": {"response": 5}}}, "edits.1.response"),
    ({"edits": {"1": {"label": "l" * 201}}}, "edits.1.label"),
    ({"edits": {"1": {"prompt": None}}}, "edits.1.prompt"),
    ({"drops": [0, 1, 2, 3, 4, 5]}, "drops"),
    ({"drops": [6]}, "drops"),
    ({}, "edits"),
])
def test_bad_edits_are_refused_naming_the_field_and_no_job_is_made(client, scientist, version, body, field):
    from apps.datasets.models import DeriveJob

    client.force_login(scientist)
    response = client.post(edit_url(version), body, content_type="application/json")
    assert response.status_code == 400, response.content
    got = response.json().get("field") or next(iter(response.json()))
    assert got.startswith(field.split(".")[0]) and (got == field or field == "edits")
    assert not DeriveJob.objects.exists()


@pytest.mark.django_db
def test_rows_filter_by_a_metadata_field(client, viewer, version):
    client.force_login(viewer)
    url = f"/api/datasets/{version.dataset_id}/versions/{version.number}/rows/"
    south = client.get(url, {"meta_key": "shop", "meta_value": "south"}).json()["results"]
    assert [r["ext_id"] if "ext_id" in r else r["id"] for r in south] == ["r3", "r4", "r5"]
    unknown = client.get(url, {"meta_key": "weather", "meta_value": "x"})
    assert unknown.status_code == 400 and unknown.json()["field"] == "meta_key"
    page = client.get(f"/projects/{version.dataset.project_id}/datasets/{version.dataset_id}/versions/1/",
                      {"meta_key": "shop", "meta_value": "north"}).content.decode()
    assert "question 0" in page and "question 4" not in page
