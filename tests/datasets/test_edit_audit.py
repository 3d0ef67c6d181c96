"""A row edit's audit entry names the rows and fields and keeps a digest of each new value, never
the text: a later redaction of the data could not remove it from the append-only log."""

import hashlib
import json

import pytest

from apps.projects.models import AuditEvent
from tests.training.fixtures import make_version

pytestmark = pytest.mark.django_db


def test_the_audit_entry_of_a_row_edit_holds_digests_not_the_text(client, scientist, owner, project):
    version = make_version(project, owner)
    secret = "Call me at +1 415 555 0100, alice@example.com"
    client.force_login(scientist)
    answer = client.post(f"/api/datasets/{version.dataset_id}/versions/{version.number}/edit/",
                         {"edits": {"0": {"response": secret}}, "drops": [1]}, content_type="application/json")
    assert answer.status_code == 202, answer.content
    event = AuditEvent.objects.get(action="dataset.edit")
    stored = json.dumps([event.before, event.after])
    assert "alice@example.com" not in stored and "415 555 0100" not in stored
    assert event.after["edited"] == {"0": {"response": hashlib.sha256(secret.encode()).hexdigest()}}
    assert event.after["drops"] == [1] and event.actor == scientist


def test_an_edit_that_changes_nothing_or_repeats_a_saved_one_is_refused(client, scientist, owner, project):
    version = make_version(project, owner)
    row = version.rows.get(position=0)
    client.force_login(scientist)
    url = f"/api/datasets/{version.dataset_id}/versions/{version.number}/edit/"
    same = client.post(url, {"edits": {"0": {"response": row.response}}}, content_type="application/json")
    assert same.status_code == 400 and same.json()["field"] == "edits" and "Nothing changes" in same.json()["detail"]
    first = client.post(url, {"edits": {"0": {"response": "A better answer."}}}, content_type="application/json")
    assert first.status_code == 202, first.content
    again = client.post(url, {"edits": {"0": {"response": "A better answer."}}}, content_type="application/json")
    assert again.status_code == 409 and "already saved" in again.json()["detail"]
    other = client.post(url, {"edits": {"0": {"response": "Another answer."}}}, content_type="application/json")
    assert other.status_code == 202
