"""Exports written by a real worker: Parquet and a `datasets` directory read back with the same
rows, CSV neutralised for spreadsheets; who may export and download."""

import io
import json
import zipfile

import pytest

from apps.datasets.models import Dataset
from apps.datasets.writer import write_version
from tests.conftest import wait_for

ROWS = [
    {"id": "a", "prompt": "=HYPERLINK(\"http://x\")", "response": "ok", "label": "l1", "shop": "north"},
    {"id": "b", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
     "label": "l2"},
]


@pytest.fixture
def version(project, owner):
    return write_version(dataset=Dataset.objects.create(project=project, name="Mixed", created_by=owner),
                         records=ROWS, author=owner,
                         roles={"id": "id", "prompt": "prompt", "response": "response", "messages": "messages",
                                "label": "label"})


def export(client, version, export_format) -> dict:
    response = client.post(f"/api/datasets/{version.dataset_id}/versions/{version.number}/exports/",
                           {"format": export_format}, content_type="application/json")
    assert response.status_code == 202, response.content

    def done():
        job = client.get(f"/api/dataset-exports/{response.json()['id']}/").json()
        return job if job["state"] in ("succeeded", "failed") else None

    job = wait_for(done, timeout=60, what=f"the {export_format} export")
    assert job["state"] == "succeeded", job["error"]
    return job


def download(client, job) -> bytes:
    response = client.get(job["download"])
    assert response.status_code == 200
    return b"".join(response.streaming_content)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_parquet_datasets_and_csv_exports_read_back_with_the_same_rows(client, scientist, version, tmp_path,
                                                                       celery_worker):
    import datasets
    import pyarrow.parquet as pq

    client.force_login(scientist)
    parquet = pq.read_table(io.BytesIO(download(client, export(client, version, "parquet")))).to_pylist()
    assert [r["id"] for r in parquet] == ["a", "b"] and parquet[0]["prompt"] == ROWS[0]["prompt"]
    assert parquet[1]["messages"] == ROWS[1]["messages"] and json.loads(parquet[0]["metadata"]) == {"shop": "north"}

    job = export(client, version, "datasets")
    with zipfile.ZipFile(io.BytesIO(download(client, job))) as archive:
        archive.extractall(tmp_path)
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    loaded = datasets.load_from_disk(str(folder))
    assert loaded.num_rows == 2 and list(loaded) == parquet  # the same rows, whatever the format

    csv_text = download(client, export(client, version, "csv")).decode()
    assert "'=HYPERLINK" in csv_text  # neutralised for spreadsheets


@pytest.mark.django_db
def test_who_may_export_and_what_is_refused(client, scientist, viewer, outsider, version):
    url = f"/api/datasets/{version.dataset_id}/versions/{version.number}/exports/"
    client.force_login(viewer)  # may read the dataset, not export it
    assert client.post(url, {"format": "parquet"}, content_type="application/json").status_code == 403
    client.force_login(scientist)
    assert client.post(url, {"format": "xlsx"}, content_type="application/json").status_code == 400
    job = client.post(url, {"format": "parquet"}, content_type="application/json").json()
    early = client.get(f"/api/dataset-exports/{job['id']}/download/")
    assert early.status_code == 400 and early.json()["field"] == "state"  # not written yet (no worker here)
    client.force_login(outsider)
    assert client.get(f"/api/dataset-exports/{job['id']}/").status_code == 404
    assert client.get(f"/api/dataset-exports/{job['id']}/download/").status_code == 404
