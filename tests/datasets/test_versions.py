"""Versions: statistics recorded at import, and diffs between any two versions."""

import pytest

from apps.datasets.models import DatasetVersion
from tests.datasets.test_imports import ROWS, jsonl, run_import

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def scientist_client(client, scientist):
    client.force_login(scientist)
    return client


@pytest.fixture
def dataset(scientist, project):
    from apps.datasets.services import dataset_create

    return dataset_create(user=scientist, project=project, name="Questions")


def test_statistics_are_recorded_when_a_version_is_made(scientist_client, dataset, celery_worker):
    rows = ROWS + [{**ROWS[0], "id": "copy-of-r1"}, {"id": "r9", "prompt": "x" * 300, "response": "", "label": "geo",
                                                      "lang": "en"}]
    job = run_import(scientist_client, dataset, jsonl(rows), "q.jsonl")
    assert job["state"] == "succeeded", job["error"]
    stats = DatasetVersion.objects.get(dataset=dataset, number=job["version"]).stats
    assert stats["rows"] == 5
    assert stats["labels"] == {"geo": 4, "code": 1}
    assert stats["duplicates"] == 1 and stats["duplicate_examples"] == [3]
    assert stats["missing"]["response"] == 1 and stats["missing"]["messages"] == 5
    assert sum(stats["lengths"]["prompt"]) == 5
    assert stats["lengths"]["prompt"][stats["length_bins"].index(256)] == 1  # the 300-character prompt
    page = scientist_client.get(f"/projects/{dataset.project_id}/datasets/{dataset.pk}/versions/{job['version']}/stats/")
    assert page.status_code == 200
    assert 'id="version-stats"' in page.content.decode()


def test_a_diff_shows_rows_added_removed_and_changed(scientist_client, dataset, celery_worker):
    first = run_import(scientist_client, dataset, jsonl(ROWS), "v1.jsonl")
    edited = [ROWS[0], {**ROWS[1], "response": "Use textContent, never innerHTML."},
              {"id": "r4", "prompt": "A brand new question", "response": "New.", "label": "new", "lang": "en"}]
    second = run_import(scientist_client, dataset, jsonl(edited), "v2.jsonl")
    assert first["state"] == second["state"] == "succeeded"
    url = f"/projects/{dataset.project_id}/datasets/{dataset.pk}/diff/"
    page = scientist_client.get(url, {"old": first["version"], "new": second["version"]})
    assert page.status_code == 200
    diff = page.context["diff"]
    assert (diff["added"], diff["removed"], diff["changed"]) == (1, 1, 1)
    assert [row.ext_id for row in diff["added_examples"]] == ["r4"]
    assert [row.ext_id for row in diff["removed_examples"]] == ["r3"]
    change = diff["changed_examples"][0]
    assert change["id"] == "r2" and change["after"].response == "Use textContent, never innerHTML."
    (field,) = change["fields"]  # only the response changed: its word diff
    assert field["name"] == "response" and [op for op, _ in field["hunks"][0].parts] == ["del", "ins"]
    html = page.content.decode()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_labels_and_duplicates_are_counted_where_the_rows_are_stored(dataset, owner):
    """The writer keeps nothing per row; the database counts (top 50 labels, all distinct ones,
    exact duplicates: same content whatever the id or metadata)."""
    from apps.datasets.writer import write_version

    records = [{"id": f"r{i}", "prompt": f"q{i}", "label": f"label-{i:02d}"} for i in range(60)]
    records += [{"id": "again", "prompt": "q7", "label": "label-07", "shop": "north"},  # r7's content again
                {"id": "relabelled", "prompt": "q8", "label": "label-09"}]  # r8's prompt, another label
    version = write_version(dataset=dataset, author=owner, records=records,
                            roles={"id": "id", "prompt": "prompt", "response": "response", "label": "label"})
    stats = version.stats
    assert stats["labels_distinct"] == 60 and len(stats["labels"]) == 50
    assert list(stats["labels"].items())[:2] == [("label-07", 2), ("label-09", 2)]
    assert stats["duplicates"] == 1 and stats["duplicate_examples"] == [60]


def test_a_version_lists_at_most_a_thousand_metadata_fields(dataset, owner):
    from apps.datasets.bulk import MAX_METADATA_KEYS
    from apps.datasets.writer import write_version

    records = [{"prompt": f"q{i}", f"field_{i}": "x"} for i in range(MAX_METADATA_KEYS + 50)]
    version = write_version(dataset=dataset, author=owner, records=records, roles={"prompt": "prompt"})
    assert len(version.schema["metadata_keys"]) == MAX_METADATA_KEYS
    assert version.rows.get(position=MAX_METADATA_KEYS + 10).metadata == {f"field_{MAX_METADATA_KEYS + 10}": "x"}
