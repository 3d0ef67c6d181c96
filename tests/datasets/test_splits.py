"""Seeded, stratified splits: the engine's determinism, and the worker job end to end."""

import pytest

from apps.datasets.models import Dataset, DatasetRow, DatasetVersion
from apps.datasets.selectors import version_diff
from apps.datasets.writer import write_version
from tests.conftest import wait_for
from tests.datasets.test_imports import jsonl, run_import
from workers.ingest.splits import assign_splits, check_ratios


def _rows(n, labels=("a", "b")):
    return [(i, labels[i % len(labels)] if labels else None, f"{i:064x}") for i in range(n)]


def test_the_same_seed_gives_the_same_split_and_another_seed_another():
    ratios = {"train": 0.8, "validation": 0.1, "test": 0.1}
    first = assign_splits(_rows(1000), ratios, seed=3, stratify=True)
    assert first == assign_splits(_rows(1000), ratios, seed=3, stratify=True)
    assert first != assign_splits(_rows(1000), ratios, seed=4, stratify=True)


def test_counts_follow_the_ratios_exactly_within_each_label():
    rows = _rows(1000, labels=("a", "a", "a", "b"))  # 750 a, 250 b
    assignment = assign_splits(rows, {"train": 0.8, "validation": 0.1, "test": 0.1}, seed=1, stratify=True)
    for label, size in (("a", 750), ("b", 250)):
        names = [assignment[p] for p, lab, _ in rows if lab == label]
        assert names.count("train") == round(size * 0.8)
        assert names.count("validation") + names.count("test") == size - round(size * 0.8)
    assert len(assignment) == 1000


def test_uneven_sizes_still_add_up():
    assignment = assign_splits(_rows(7, labels=None), {"train": 0.5, "test": 0.5}, seed=0, stratify=False)
    assert sorted(assignment.values()).count("train") in (3, 4) and len(assignment) == 7


@pytest.mark.parametrize("ratios, complaint", [
    ({"train": 0.5, "test": 0.4}, "add up to 0.9"),
    ({"train": 1.2, "test": -0.2}, "between 0 and 1"),
    ({"holdout": 1.0}, "unknown split name"),
    ({}, "ratios are"),
])
def test_bad_ratios_are_refused_with_the_reason(ratios, complaint):
    with pytest.raises(ValueError, match=complaint):
        check_ratios(ratios)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_split_job_makes_a_new_version_with_the_same_rows_and_split_counts(client, scientist, project,
                                                                              celery_worker):
    from apps.datasets.services import dataset_create

    client.force_login(scientist)
    dataset = dataset_create(user=scientist, project=project, name="Labelled")
    rows = [{"id": f"r{i}", "prompt": f"text {i}", "label": "pos" if i % 4 else "neg"} for i in range(400)]
    job = run_import(client, dataset, jsonl(rows), "l.jsonl", mapping={"id": "id", "prompt": "prompt", "label": "label"})
    answer = client.post(f"/api/datasets/{dataset.pk}/versions/{job['version']}/split/",
                         {"ratios": {"train": 0.8, "validation": 0.1, "test": 0.1}, "seed": 42},
                         content_type="application/json")
    assert answer.status_code == 202, answer.content
    derive_id = answer.json()["id"]
    done = wait_for(lambda: (lambda body: body if body["state"] in ("succeeded", "failed") else None)(
        client.get(f"/api/derive-jobs/{derive_id}/").json()), timeout=60, what="the split job")
    assert done["state"] == "succeeded", done["error"]
    parent = DatasetVersion.objects.get(dataset=dataset, number=job["version"])
    child = DatasetVersion.objects.get(dataset=dataset, number=done["version"])
    assert child.parent == parent and child.row_count == 400
    # The split is part of the version's identity: a new hash, the one the same rows in the same
    # splits get however they are written.
    assert child.content_hash != parent.content_hash
    rows_in_order = list(DatasetRow.objects.filter(version=child).order_by("position"))
    same = write_version(dataset=dataset, records=[{"id": r.ext_id, "prompt": r.prompt, "label": r.label}
                                                   for r in rows_in_order],
                         roles={"id": "id", "prompt": "prompt", "label": "label"},
                         splits=[r.split for r in rows_in_order])
    assert same.content_hash == child.content_hash
    diff = client.get(f"/projects/{dataset.project_id}/datasets/{dataset.pk}/diff/",
                      {"old": parent.number, "new": child.number}).context["diff"]
    assert (diff["added"], diff["removed"], diff["changed"], diff["moved"]) == (0, 0, 0, 400)
    assert {(m["before"], m["after"]) for m in diff["moved_examples"]} <= {("", "train"), ("", "validation"),
                                                                            ("", "test")}
    assert child.schema["splits"]["counts"] == {"train": 320, "validation": 40, "test": 40}
    assert child.schema["splits"]["stratified"] is True
    neg_train = DatasetRow.objects.filter(version=child, label="neg", split="train").count()
    assert neg_train == 80  # 100 negatives, 80% of them
    assert not DatasetRow.objects.filter(version=parent).exclude(split="").exists()  # the parent never changes
    page = client.get(f"/api/datasets/{dataset.pk}/versions/{child.number}/rows/", {"split": "test", "limit": 500})
    assert len(page.json()["results"]) == 40


ROLES = {"id": "id", "prompt": "prompt", "label": "label", "part": "split"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_files_split_column_imports_as_the_rows_splits_and_counts_in_the_hash(client, scientist, project,
                                                                                 celery_worker):
    client.force_login(scientist)
    dataset = Dataset.objects.create(project=project, name="Presplit", created_by=scientist)
    records = [{"id": f"r{i}", "prompt": f"text {i}", "label": "a", "part": ["train", "train", "dev"][i % 3]}
               for i in range(9)]
    job = run_import(client, dataset, jsonl(records), "p.jsonl", mapping=ROLES)
    assert job["state"] == "succeeded", job["error"]
    version = DatasetVersion.objects.get(dataset=dataset, number=job["version"])
    rows = list(DatasetRow.objects.filter(version=version).order_by("position"))
    assert [r.split for r in rows] == [r["part"] for r in records]
    assert all(r.metadata == {} for r in rows)  # the split column is no metadata
    assert version.stats["splits"] == {"dev": 3, "train": 6}
    unsplit = run_import(client, dataset, jsonl(records), "p.jsonl", mapping={**ROLES, "part": ""})
    moved = [{**r, "part": "train"} for r in records]
    other = run_import(client, dataset, jsonl(moved), "q.jsonl", mapping=ROLES)
    hashes = {DatasetVersion.objects.get(dataset=dataset, number=j["version"]).content_hash for j in (unsplit, other)}
    assert len(hashes | {version.content_hash}) == 3  # same rows, other splits: other versions
    written = write_version(dataset=dataset, records=[{k: v for k, v in r.items() if k != "part"} for r in records],
                            roles={"id": "id", "prompt": "prompt", "label": "label"},
                            splits=[r["part"] for r in records])
    assert written.content_hash == version.content_hash
    page = client.get(f"/projects/{project.pk}/datasets/{dataset.pk}/versions/{version.number}/")
    assert "Splits (from the file): train 6, dev 3" in page.content.decode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_bad_split_name_fails_the_import_naming_the_line_and_column(client, scientist, project, celery_worker):
    client.force_login(scientist)
    dataset = Dataset.objects.create(project=project, name="Badsplit", created_by=scientist)
    records = [{"prompt": "a", "part": "train"}, {"prompt": "b", "part": "hold out"}]
    job = run_import(client, dataset, jsonl(records), "b.jsonl", mapping={"prompt": "prompt", "part": "split"})
    assert job["state"] == "failed"
    assert job["error"].startswith("line 2, column 'part': the split 'hold out' is not a split name")
    assert not DatasetVersion.objects.filter(dataset=dataset).exists()


@pytest.mark.django_db
def test_a_diff_counts_and_lists_rows_that_moved_between_splits(project, owner):
    dataset = Dataset.objects.create(project=project, name="Moves", created_by=owner)
    records = [{"id": f"r{i}", "prompt": f"text {i}"} for i in range(4)]
    roles = {"id": "id", "prompt": "prompt"}
    old = write_version(dataset=dataset, records=records, roles=roles, splits=["train", "train", "test", "test"])
    edited = [records[0], {**records[1], "prompt": "text one, fixed"}, records[2], records[3]]
    new = write_version(dataset=dataset, records=edited, roles=roles, parent=old,
                        splits=["train", "train", "train", "test"])
    diff = version_diff(old=old, new=new)
    assert (diff["added"], diff["removed"], diff["changed"], diff["moved"]) == (0, 0, 1, 1)
    (move,) = diff["moved_examples"]
    assert (move["row"].ext_id, move["before"], move["after"]) == ("r2", "test", "train")
    assert version_diff(old=old, new=old)["moved"] == 0


def test_parts_tallied_apart_hash_their_splits_as_one_reader_does(tmp_path):
    """The parallel import's parts write their rows' hash entries to files that the whole merges:
    the splits must be in those entries, in order."""
    from apps.datasets.bulk import VersionTally
    from workers.ingest import ColumnMapping, canonical_row

    mapping = ColumnMapping({"prompt": "prompt"})
    rows = [(canonical_row({"prompt": f"q{i}", "lang": "en"}, mapping, i), ["train", "", "test"][i % 3])
            for i in range(10)]
    whole = VersionTally()
    for position, (row, split) in enumerate(rows):
        whole.row(1, position, row, split)
    merged = VersionTally()
    for index, part in enumerate((rows[:4], rows[4:])):
        with open(tmp_path / f"{index}.digests", "wb") as digests:
            tally = VersionTally(digests_to=digests)
            for row, split in part:
                tally.row(1, 0, row, split)
        merged.merge_part(tally.part(), tmp_path / f"{index}.digests")
    assert merged.hasher.hexdigest() == whole.hasher.hexdigest() and merged.hasher.count == 10


@pytest.mark.django_db(transaction=True)
def test_an_edit_of_a_split_version_keeps_the_splits_in_its_hash_and_counts(project, owner):
    from apps.datasets.derive import run_derive
    from apps.datasets.models import DeriveJob

    dataset = Dataset.objects.create(project=project, name="Edited split", created_by=owner)
    records = [{"id": f"r{i}", "prompt": f"text {i}"} for i in range(6)]
    roles = {"id": "id", "prompt": "prompt"}
    splits = ["train", "train", "test", "train", "test", "validation"]
    version = write_version(dataset=dataset, records=records, roles=roles, splits=splits)
    job = DeriveJob.objects.create(parent=version, kind=DeriveJob.Kind.EDIT, created_by=owner,
                                   params={"edits": {"1": {"prompt": "text one"}}, "drops": [2], "message": "fix"})
    run_derive(job.pk)  # in this process, as the worker would
    job.refresh_from_db()
    assert job.state == "succeeded", job.error
    kept = [records[0], {**records[1], "prompt": "text one"}, *records[3:]]
    same = write_version(dataset=dataset, records=kept, roles=roles, splits=splits[:2] + splits[3:])
    assert job.version.content_hash == same.content_hash
    assert job.version.stats["splits"] == {"test": 1, "train": 3, "validation": 1}  # the dropped row uncounted
