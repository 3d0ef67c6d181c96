"""Seeded, stratified splits: the engine's determinism, and the worker job end to end."""

import pytest

from apps.datasets.models import DatasetRow, DatasetVersion
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
    assert child.parent == parent and child.content_hash == parent.content_hash and child.row_count == 400
    assert child.schema["splits"]["counts"] == {"train": 320, "validation": 40, "test": 40}
    assert child.schema["splits"]["stratified"] is True
    neg_train = DatasetRow.objects.filter(version=child, label="neg", split="train").count()
    assert neg_train == 80  # 100 negatives, 80% of them
    assert not DatasetRow.objects.filter(version=parent).exclude(split="").exists()  # the parent never changes
    page = client.get(f"/api/datasets/{dataset.pk}/versions/{child.number}/rows/", {"split": "test", "limit": 500})
    assert len(page.json()["results"]) == 40
