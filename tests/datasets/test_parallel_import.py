"""A large JSON Lines import read by several processes at once (PostgreSQL) gives exactly what
reading it in one process gives: the same rows at the same positions, the same hashes and
statistics, and the same error naming the same line when a line is bad."""

import json
from pathlib import Path

import pytest
from django.core.files import File
from django.db import connection

from apps.datasets import importer
from apps.datasets.models import Dataset, DatasetRow, DatasetVersion, ImportJob
from apps.datasets.services import import_create

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(connection.vendor != "postgresql", reason="parts are read in parallel on PostgreSQL")]

MAPPING = {"id": "id", "prompt": "prompt", "response": "response", "label": "label", "part": "split"}


def write_file(path: Path, count: int, *, bad_line: int | None = None, blank_every: int = 0,
               line_end: str = "\n") -> Path:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        for i in range(count):
            if blank_every and i % blank_every == 5:
                handle.write("   " + line_end)
            if bad_line is not None and i == bad_line:
                handle.write('{"id": "broken", "prompt": ' + line_end)
                continue
            record = {"id": f"r{i}", "prompt": f"Question {i} é\twith a tab", "response": "line\nbreak" if i % 5 else None,
                      "label": ["a", "b", "c"][i % 3], "source": f"s{i % 7}", "part": ["train", "test", ""][i % 4 % 3]}
            handle.write(json.dumps(record, ensure_ascii=False) + line_end)
    return path


def import_file(owner, project, path: Path, name: str) -> ImportJob:
    dataset = Dataset.objects.create(project=project, name=name, created_by=owner)
    with open(path, "rb") as handle:
        job = import_create(user=owner, dataset=dataset, upload=File(handle, name=path.name))
    ImportJob.objects.filter(pk=job.pk).update(mapping=MAPPING, options={}, state=ImportJob.State.QUEUED)
    importer.run_import(job.pk)
    return ImportJob.objects.select_related("version").get(pk=job.pk)


def rows_of(version: DatasetVersion) -> list[tuple]:
    return list(DatasetRow.objects.filter(version=version).order_by("position").values_list(
        "position", "row_hash", "ext_id", "prompt", "response", "label", "metadata", "split"))


@pytest.fixture
def parallel(settings, monkeypatch):
    """Parts for any size of file, three processes whatever the machine's cores."""
    settings.IMPORT_PARALLEL_MIN_BYTES = 0
    settings.IMPORT_PROCESSES = 3
    monkeypatch.setattr(importer.os, "cpu_count", lambda: 3)
    seen = []
    original = importer._load_parts
    monkeypatch.setattr(importer, "_load_parts", lambda *args: seen.append(len(args[3])) or original(*args))
    return seen


@pytest.mark.parametrize("line_end", ["\n", "\r\n"])
def test_parts_read_in_parallel_give_what_one_reader_gives(owner, project, tmp_path, settings, parallel, line_end):
    path = write_file(tmp_path / "rows.jsonl", 5000, blank_every=97, line_end=line_end)
    settings.IMPORT_PARALLEL_MIN_BYTES = 10**12  # one reader
    one = import_file(owner, project, path, "one")
    assert parallel == []
    settings.IMPORT_PARALLEL_MIN_BYTES = 0
    several = import_file(owner, project, path, "several")
    assert parallel == [3]
    assert one.state == several.state == ImportJob.State.SUCCEEDED, (one.error, several.error)
    assert several.version.row_count == one.version.row_count == 5000
    assert several.version.content_hash == one.version.content_hash  # the splits mixed in alike
    assert set(several.version.stats["splits"]) == {"train", "test"}
    assert several.version.stats == one.version.stats
    assert several.version.schema == one.version.schema
    assert rows_of(several.version) == rows_of(one.version)
    assert several.rows_done == 5000


def test_a_bad_line_in_a_later_part_fails_the_import_naming_its_line_and_leaves_nothing(owner, project, tmp_path,
                                                                                         parallel):
    path = write_file(tmp_path / "bad.jsonl", 3000, bad_line=2500)
    job = import_file(owner, project, path, "bad")
    assert parallel == [3]
    assert job.state == ImportJob.State.FAILED
    assert job.error.startswith("line 2501"), job.error
    assert job.version is None and not DatasetRow.objects.exists()
    assert not DatasetVersion.objects.filter(dataset__name="bad").exists()


def test_an_id_repeated_across_parts_fails_naming_the_line_where_it_comes_again(owner, project, tmp_path, parallel):
    path = write_file(tmp_path / "dup.jsonl", 3000)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"id": "r10", "prompt": "again"}) + "\n")
    job = import_file(owner, project, path, "dup")
    assert job.state == ImportJob.State.FAILED
    assert "line 3001" in job.error and "duplicate id 'r10'" in job.error
    assert not DatasetRow.objects.exists()


def test_a_cancel_stops_every_part_and_leaves_nothing(owner, project, tmp_path, parallel, monkeypatch):
    path = write_file(tmp_path / "cancel.jsonl", 20000)
    original = importer._report

    def cancel_then_report(run, rows, elapsed_s):
        ImportJob.objects.filter(pk=run.job.pk).update(cancel_requested=True)
        return original(run, rows, elapsed_s)

    monkeypatch.setattr(importer, "_report", cancel_then_report)
    job = import_file(owner, project, path, "cancelled")
    assert job.state == ImportJob.State.CANCELLED
    assert not DatasetRow.objects.exists() and job.version is None
