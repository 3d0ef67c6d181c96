"""Imports end to end: upload through the API, a real Celery worker, rows in the database."""

import csv
import io
import json
import os

import pytest

from apps.datasets.models import DatasetRow, DatasetVersion, ImportJob
from apps.datasets.services import dataset_create
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = [
    {"id": "r1", "prompt": "What is the capital of France?", "response": "Paris.", "label": "geo", "lang": "en"},
    {"id": "r2", "prompt": "Write <script>alert(1)</script> safely", "response": "=SUM(A1:A9)", "label": "code",
     "lang": "en"},
    {"id": "r3", "prompt": "Quelle est la capitale de l'Italie ?", "response": "Rome.", "label": "geo", "lang": "fr"},
]


def jsonl(rows) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def csv_bytes(rows) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


def upload(client, dataset, content: bytes, name: str):
    return client.post(f"/api/projects/{dataset.project_id}/datasets/{dataset.pk}/imports/",
                       {"file": _named(content, name)})


def _named(content: bytes, name: str):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, content)


MAPPING = {"id": "id", "prompt": "prompt", "response": "response", "label": "label", "lang": ""}


def run_import(client, dataset, content, name, mapping=MAPPING, **options):
    created = upload(client, dataset, content, name)
    assert created.status_code == 201, created.content
    job_id = created.json()["id"]
    started = client.post(f"/api/imports/{job_id}/start/", {"mapping": mapping, **options},
                          content_type="application/json")
    assert started.status_code == 202, started.content
    return wait_for(lambda: _finished(client, job_id), timeout=60, what=f"import {job_id} to finish")


def _finished(client, job_id):
    body = client.get(f"/api/imports/{job_id}/").json()
    return body if body["state"] in ("succeeded", "failed", "cancelled") else None


@pytest.fixture
def dataset(scientist, project):
    return dataset_create(user=scientist, project=project, name="Questions")


@pytest.fixture
def scientist_client(client, scientist):
    client.force_login(scientist)
    return client


@pytest.mark.slow
def test_a_jsonl_upload_previews_maps_and_imports_into_a_new_version(scientist_client, dataset, celery_worker):
    created = upload(scientist_client, dataset, jsonl(ROWS), "questions.jsonl")
    assert created.status_code == 201
    preview = created.json()["preview"]
    assert preview["columns"] == ["id", "prompt", "response", "label", "lang"]
    assert preview["suggested_mapping"]["prompt"] == "prompt"
    assert len(preview["records"]) == 3

    job = run_import(scientist_client, dataset, jsonl(ROWS), "questions.jsonl", message="first import")
    assert job["state"] == "succeeded", job["error"]
    assert job["rows_done"] == 3
    version = DatasetVersion.objects.get(dataset=dataset, number=job["version"])
    assert version.status == "ready" and version.row_count == 3 and len(version.content_hash) == 64
    assert version.message == "first import"

    rows = scientist_client.get(f"/api/datasets/{dataset.pk}/versions/{version.number}/rows/").json()["results"]
    assert [r["ext_id"] for r in rows] == ["r1", "r2", "r3"]
    assert rows[1]["prompt"] == "Write <script>alert(1)</script> safely"  # stored as text, verbatim
    assert rows[0]["metadata"] == {"lang": "en"}


@pytest.mark.slow
def test_the_same_content_as_jsonl_and_csv_gets_the_same_hash(scientist_client, dataset, celery_worker):
    first = run_import(scientist_client, dataset, jsonl(ROWS), "a.jsonl")
    second = run_import(scientist_client, dataset, csv_bytes(ROWS), "a.csv")
    assert first["state"] == second["state"] == "succeeded", (first["error"], second["error"])
    v1, v2 = DatasetVersion.objects.filter(dataset=dataset).order_by("number")
    assert v2.parent == v1
    assert v1.content_hash == v2.content_hash


@pytest.mark.slow
def test_a_malformed_line_fails_the_import_naming_the_line_and_leaves_nothing(scientist_client, dataset,
                                                                             celery_worker):
    content = jsonl(ROWS[:2]) + b'{"id": "r3", "prompt": broken}\n' + jsonl(ROWS[2:])
    job = run_import(scientist_client, dataset, content, "bad.jsonl")
    assert job["state"] == "failed"
    assert "line 3" in job["error"]
    assert not DatasetVersion.objects.filter(dataset=dataset).exists()
    assert not DatasetRow.objects.exists()


@pytest.mark.slow
def test_skipping_bad_rows_imports_the_rest_and_reports_them(scientist_client, dataset, celery_worker):
    content = jsonl(ROWS[:2]) + b"not json at all\n" + jsonl(ROWS[2:])
    job = run_import(scientist_client, dataset, content, "bad.jsonl", skip_bad_rows=True)
    assert job["state"] == "succeeded", job["error"]
    assert job["rows_done"] == 3
    assert [bad["line"] for bad in job["bad_rows"]] == [3]


@pytest.mark.slow
def test_duplicate_ids_fail_the_import_naming_the_line(scientist_client, dataset, celery_worker):
    job = run_import(scientist_client, dataset, jsonl(ROWS + [ROWS[0]]), "dup.jsonl")
    assert job["state"] == "failed"
    assert "duplicate id 'r1'" in job["error"] and "line 4" in job["error"]
    assert not DatasetRow.objects.exists()


@pytest.mark.slow
def test_a_running_import_can_be_cancelled_and_leaves_nothing(scientist_client, dataset, celery_worker):
    many = [{"id": f"r{i}", "prompt": f"question number {i} " * 5, "response": "answer " * 10} for i in range(300_000)]
    created = upload(scientist_client, dataset, jsonl(many), "big.jsonl")
    job_id = created.json()["id"]
    scientist_client.post(f"/api/imports/{job_id}/start/", {"mapping": {"id": "id", "prompt": "prompt",
                                                                          "response": "response"}},
                          content_type="application/json")
    wait_for(lambda: scientist_client.get(f"/api/imports/{job_id}/").json()["rows_done"] > 0, timeout=60,
             what="the import to make progress")
    assert scientist_client.post(f"/api/imports/{job_id}/cancel/").status_code == 202
    job = wait_for(lambda: _finished(scientist_client, job_id), timeout=60, what="the cancel")
    assert job["state"] == "cancelled"
    assert not DatasetVersion.objects.filter(dataset=dataset).exists()
    assert not DatasetRow.objects.exists()


@pytest.mark.slow
def test_search_and_keyset_pages_over_a_version(scientist_client, dataset, celery_worker):
    rows = [{"id": f"r{i}", "prompt": f"row {i} about {'llamas' if i % 10 == 0 else 'alpacas'}"} for i in range(120)]
    job = run_import(scientist_client, dataset, jsonl(rows), "animals.jsonl", mapping={"id": "id", "prompt": "prompt"})
    assert job["state"] == "succeeded", job["error"]
    base = f"/api/datasets/{dataset.pk}/versions/{job['version']}/rows/"
    first = scientist_client.get(base, {"limit": 50}).json()
    second = scientist_client.get(base, {"limit": 50, "after": first["next_after"]}).json()
    assert [r["position"] for r in first["results"]] == list(range(50))
    assert [r["position"] for r in second["results"]] == list(range(50, 100))
    found = scientist_client.get(base, {"q": "llamas"}).json()["results"]
    assert [r["ext_id"] for r in found] == [f"r{i}" for i in range(0, 120, 10)]
    assert scientist_client.get(base, {"q": '" OR 1=1 --'}).status_code == 200  # never query syntax


@pytest.mark.slow
def test_exports_round_trip_and_neutralise_formulas(scientist_client, dataset, celery_worker):
    job = run_import(scientist_client, dataset, jsonl(ROWS), "q.jsonl")
    base = f"/api/datasets/{dataset.pk}/versions/{job['version']}/export"
    exported = b"".join(scientist_client.get(base + ".jsonl").streaming_content).decode().splitlines()
    records = [json.loads(line) for line in exported]
    assert [r["prompt"] for r in records] == [r["prompt"] for r in ROWS]
    assert records[0]["lang"] == "en"  # a metadata field under its own column name, as uploaded
    table = list(csv.DictReader(io.StringIO(b"".join(scientist_client.get(base + ".csv").streaming_content).decode())))
    assert table[1]["response"] == "'=SUM(A1:A9)"


def test_bad_mappings_are_refused_naming_the_field(scientist_client, dataset):
    job_id = upload(scientist_client, dataset, jsonl(ROWS), "q.jsonl").json()["id"]
    for mapping, complaint in [({"id": "id"}, "prompt"), ({"prompt": "nonsense"}, "nonsense"),
                               ({"prompt": "prompt", "response": "prompt"}, "prompt")]:
        answer = scientist_client.post(f"/api/imports/{job_id}/start/", {"mapping": mapping},
                                       content_type="application/json")
        assert answer.status_code == 400, mapping
        assert answer.json()["field"] == "mapping" and complaint in answer.json()["detail"]
    assert ImportJob.objects.get(pk=job_id).state == "draft"


@pytest.mark.parametrize("content, name, complaint", [
    (b"", "empty.jsonl", "empty"),
    (b"\xff\xfe\x00garbage\n", "bad.jsonl", "UTF-8"),
    (b'{"a": 1}\n', "lying.parquet", "JSON Lines"),
])
def test_unreadable_uploads_are_refused_with_a_clear_error(scientist_client, dataset, content, name, complaint):
    answer = upload(scientist_client, dataset, content, name)
    assert answer.status_code == 400
    assert complaint in json.dumps(answer.json())
    assert "file" in answer.json() or answer.json()["field"] == "file"
    assert not ImportJob.objects.exists()


def test_server_paths_outside_the_data_roots_are_refused(scientist_client, dataset, settings, tmp_path):
    settings.DATA_ROOTS = [tmp_path / "roots"]
    (tmp_path / "roots").mkdir()
    (tmp_path / "secret.jsonl").write_bytes(jsonl(ROWS))
    os.symlink(tmp_path / "secret.jsonl", tmp_path / "roots" / "link.jsonl")
    url = f"/api/projects/{dataset.project_id}/datasets/{dataset.pk}/imports/"
    for path in ["/etc/passwd", str(tmp_path / "roots" / ".." / "secret.jsonl"), str(tmp_path / "roots" / "link.jsonl")]:
        answer = scientist_client.post(url, {"server_path": path}, content_type="application/json")
        assert answer.status_code == 400, path
        assert "outside the configured data roots" in answer.json()["detail"]
    (tmp_path / "roots" / "ok.jsonl").write_bytes(jsonl(ROWS))
    answer = scientist_client.post(url, {"server_path": str(tmp_path / "roots" / "ok.jsonl")},
                                   content_type="application/json")
    assert answer.status_code == 201, answer.content


def test_people_without_dataset_import_cannot_upload(client, annotator, viewer, outsider, dataset):
    for person, expected in [(viewer, 403), (outsider, 404), (annotator, 403)]:
        client.force_login(person)
        answer = upload(client, dataset, jsonl(ROWS), "q.jsonl")
        assert answer.status_code == expected, person.username
    assert not ImportJob.objects.exists()


@pytest.mark.slow
def test_skipping_bad_rows_also_skips_rows_without_a_prompt(scientist_client, dataset, celery_worker):
    content = jsonl(ROWS[:1]) + jsonl([{"id": "x", "prompt": "", "response": "orphan"}]) + jsonl(ROWS[1:])
    failed = run_import(scientist_client, dataset, content, "holes.jsonl")
    assert failed["state"] == "failed" and "line 2" in failed["error"]
    job = run_import(scientist_client, dataset, content, "holes.jsonl", skip_bad_rows=True)
    assert job["state"] == "succeeded", job["error"]
    assert job["rows_done"] == 3 and [bad["line"] for bad in job["bad_rows"]] == [2]


@pytest.mark.slow
def test_a_duplicate_id_many_batches_in_fails_and_leaves_no_row(scientist_client, dataset, celery_worker):
    """Batches already written by the time the bad row is read are removed with the version."""
    many = [{"id": f"r{i}", "prompt": f"question {i}"} for i in range(9000)] + [{"id": "r5", "prompt": "again"}]
    job = run_import(scientist_client, dataset, jsonl(many), "late-dup.jsonl",
                     mapping={"id": "id", "prompt": "prompt"})
    assert job["state"] == "failed"
    assert "duplicate id 'r5'" in job["error"] and "line 9001" in job["error"]
    assert not DatasetVersion.objects.filter(dataset=dataset).exists()
    assert not DatasetRow.objects.exists()


def test_a_row_the_database_refuses_is_raised_by_the_row_writer(dataset):
    """An error inside the writer's own thread (PostgreSQL) reaches the import, which fails."""
    from django.db import IntegrityError

    from apps.datasets.bulk import RowWriter, row_tuple

    row = {"ext_id": None, "prompt": "p", "response": None, "messages": None, "label": None, "reference": None,
           "metadata": {}}
    with pytest.raises(IntegrityError):
        with RowWriter() as writer:
            writer.write([row_tuple(987654, 0, "0" * 64, row)])  # no such version
            writer.write([row_tuple(987654, 1, "0" * 64, row)])
    assert not DatasetRow.objects.exists()


def test_an_uploaded_gzip_bomb_is_refused_at_upload_and_leaves_no_import(scientist_client, dataset, tmp_path):
    from apps.datasets.models import ImportJob
    from tests.workers.test_ingest_archives import _rows_bomb

    bomb = _rows_bomb(tmp_path / "rows.jsonl.gz", 256, trailer_size=1000).read_bytes()
    response = upload(scientist_client, dataset, bomb, "rows.jsonl.gz")
    assert response.status_code == 400
    assert response.json()["field"] == "file"
    assert "likely compression bomb" in response.json()["detail"]
    assert not ImportJob.objects.filter(dataset=dataset).exists()
