"""Exports written by a real worker: Parquet and a `datasets` directory read back with the same
rows, CSV neutralised for spreadsheets; who may export and download."""

import functools
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
    assert parquet[1]["messages"] == ROWS[1]["messages"] and (parquet[0]["shop"], parquet[1]["shop"]) == ("north", None)

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


UPLOAD = [  # what a person uploads: their own column names, a split column, metadata fields
    {"qid": f"q{i}", "question": f"Question {i}?", "answer": f"Answer {i}.", "part": ["train", "test"][i % 2],
     "topic": ["billing", "account"][i % 3 % 2], "prompt": f"template {i % 2}", **({"lang": "fr"} if i % 4 else {})}
    for i in range(12)
]
UPLOAD_MAPPING = {"qid": "id", "question": "prompt", "answer": "response", "part": "split"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_every_export_format_reimports_to_the_uploaded_rows_and_columns(client, scientist, project, tmp_path,
                                                                        settings, celery_worker):
    """One layout in every format: the role columns, then each metadata field as a column of the
    upload's own name (one named like a role column as metadata.<name>), read with pyarrow and
    datasets themselves; importing any export with the suggested mapping gives the same version."""
    import datasets
    import pyarrow.parquet as pq

    from apps.datasets.models import DatasetRow, DatasetVersion
    from tests.datasets.test_imports import _finished as finished
    from tests.datasets.test_imports import jsonl, run_import, upload

    client.force_login(scientist)
    dataset = Dataset.objects.create(project=project, name="Round trip", created_by=scientist)
    job = run_import(client, dataset, jsonl(UPLOAD), "upload.jsonl", mapping=UPLOAD_MAPPING)
    assert job["state"] == "succeeded", job["error"]
    original = DatasetVersion.objects.get(dataset=dataset, number=job["version"])
    assert original.schema["metadata_keys"] == ["lang", "prompt", "topic"]
    columns = ["id", "prompt", "response", "messages", "label", "reference", "split", "lang", "metadata.prompt",
               "topic"]

    files = {}
    for export_format in ("jsonl", "csv", "parquet", "datasets"):
        files[export_format] = tmp_path / f"export.{export_format}"
        files[export_format].write_bytes(download(client, export(client, original, export_format)))
    table = pq.read_table(files["parquet"])
    assert table.column_names == columns
    assert table.slice(0, 2).select(["lang", "metadata.prompt", "topic"]).to_pylist() == [
        {"lang": None, "metadata.prompt": "template 0", "topic": "billing"},
        {"lang": "fr", "metadata.prompt": "template 1", "topic": "account"}]
    folder = settings.DATA_ROOTS[0] / "round-trip"
    with zipfile.ZipFile(files["datasets"]) as archive:
        archive.extractall(folder)
    (saved,) = [p for p in folder.iterdir() if p.is_dir()]
    loaded = datasets.load_from_disk(str(saved))
    assert loaded.column_names == columns and loaded.to_list() == table.to_pylist()
    assert json.loads(files["jsonl"].read_text().splitlines()[1]) == {
        "id": "q1", "prompt": "Question 1?", "response": "Answer 1.", "split": "test", "topic": "account",
        "metadata.prompt": "template 1", "lang": "fr"}
    assert files["csv"].read_text().splitlines()[0] == ",".join(columns)

    hashes = set()
    for export_format, path in files.items():
        if export_format == "datasets":
            created = client.post(f"/api/projects/{project.pk}/datasets/{dataset.pk}/imports/",
                                  {"server_path": str(saved)})
        else:
            created = upload(client, dataset, path.read_bytes(), path.name)
        assert created.status_code == 201, created.content
        suggested = created.json()["preview"]["suggested_mapping"]
        present = ("id", "prompt", "response", "split") if export_format == "jsonl" else columns[:7]  # JSONL: no nulls
        assert suggested == {name: name for name in present}, export_format
        started = client.post(f"/api/imports/{created.json()['id']}/start/", {"mapping": suggested},
                              content_type="application/json")
        assert started.status_code == 202, started.content
        done = wait_for(functools.partial(finished, client, created.json()["id"]), timeout=60,
                        what=f"the {export_format} import")
        assert done["state"] == "succeeded", (export_format, done["error"])
        again = DatasetVersion.objects.get(dataset=dataset, number=done["version"])
        assert again.schema["metadata_keys"] == ["lang", "metadata.prompt", "topic"]
        # The same rows in the same splits; only the field named like a role column kept its prefix.
        assert DatasetRow.objects.get(version=again, position=1).metadata == {
            "lang": "fr", "metadata.prompt": "template 1", "topic": "account"}
        assert [(r.ext_id, r.prompt, r.response, r.split) for r in again.rows.order_by("position")] == [
            (r.ext_id, r.prompt, r.response, r.split) for r in original.rows.order_by("position")], export_format
        hashes.add(again.content_hash)
    assert len(hashes) == 1  # the four formats carry the same version
