"""PII scan and redaction of a version, run by the real worker."""

import pytest

from apps.datasets.models import DatasetRow, DatasetVersion
from tests.conftest import wait_for
from tests.datasets.test_imports import jsonl, run_import

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROWS = [
    {"id": "a", "prompt": "Mail me at jane.doe@example.com please", "response": "Sure."},
    {"id": "b", "prompt": "My card is 4242 4242 4242 4242", "response": "Never share cards."},
    {"id": "c", "prompt": "Nothing personal here", "response": "Indeed.", "note": "server 10.1.2.3"},
    {"id": "d", "prompt": "key AKIAIOSFODNN7EXAMPLE leaked", "response": "Rotate it."},
]


def _finished(client, job_id):
    body = client.get(f"/api/derive-jobs/{job_id}/").json()
    return body if body["state"] in ("succeeded", "failed", "cancelled") else None


@pytest.fixture
def version(client, scientist, project, celery_worker):
    from apps.datasets.services import dataset_create

    client.force_login(scientist)
    dataset = dataset_create(user=scientist, project=project, name="Chats")
    job = run_import(client, dataset, jsonl(ROWS), "chats.jsonl",
                     mapping={"id": "id", "prompt": "prompt", "response": "response", "note": ""})
    assert job["state"] == "succeeded", job["error"]
    return DatasetVersion.objects.get(dataset=dataset, number=job["version"])


def test_a_scan_reports_counts_per_type_and_column_with_masked_examples(client, version):
    answer = client.post(f"/api/datasets/{version.dataset_id}/versions/{version.number}/pii-scan/")
    assert answer.status_code == 202
    job = wait_for(lambda: _finished(client, answer.json()["id"]), timeout=60, what="the scan")
    assert job["state"] == "succeeded", job["error"]
    report = job["result"]
    assert report["counts"]["email"] == 1 and report["counts"]["credit_card"] == 1
    assert report["counts"]["ipv4"] == 1 and report["counts"]["secret"] == 1
    assert report["counts_by_column"]["metadata.note"] == {"ipv4": 1}
    assert report["rows_with_pii"] == 4
    shown = str(report["examples"])
    for raw in ("jane.doe@example.com", "4242 4242 4242 4242", "AKIAIOSFODNN7EXAMPLE"):
        assert raw not in shown  # examples are masked
    assert job["version"] is None  # a scan makes no version


def test_redaction_makes_a_new_version_with_typed_placeholders(client, version):
    answer = client.post(f"/api/datasets/{version.dataset_id}/versions/{version.number}/redact/")
    job = wait_for(lambda: _finished(client, answer.json()["id"]), timeout=60, what="the redaction")
    assert job["state"] == "succeeded", job["error"]
    redacted = DatasetVersion.objects.get(dataset=version.dataset, number=job["version"])
    assert redacted.parent == version and redacted.content_hash != version.content_hash
    prompts = list(DatasetRow.objects.filter(version=redacted).order_by("position").values_list("prompt", flat=True))
    assert prompts == ["Mail me at [EMAIL] please", "My card is [CREDIT_CARD]", "Nothing personal here",
                       "key [SECRET] leaked"]
    note = DatasetRow.objects.get(version=redacted, position=2).metadata["note"]
    assert note == "server [IPV4]"
    original = list(DatasetRow.objects.filter(version=version).order_by("position").values_list("prompt", flat=True))
    assert original[0] == ROWS[0]["prompt"]  # the parent version never changes
    assert job["result"]["rows_changed"] == 4
