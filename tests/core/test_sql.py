"""apps.core.sql: instances from hand-written SQL equal what the ORM loads, field by field,
on whichever database the suite runs (JSON parsed, dates aware, booleans and UUIDs typed)."""

import uuid

import pytest
from django.utils import timezone

from apps.annotation import queue
from apps.annotation.models import Draft
from apps.core.sql import columns, execute, instance
from apps.projects.models import Role
from tests.annotation.fixtures import answer, make_campaign, next_item, submit

pytestmark = pytest.mark.django_db


def _fields(obj) -> dict:
    return {field.attname: getattr(obj, field.attname) for field in obj._meta.concrete_fields}


def test_an_instance_read_by_hand_equals_the_orms(project, owner):
    role = Role.objects.create(project=project, name="Labeler <b>", permissions=["project.view", "annotation.submit"],
                               created_by=owner)
    with execute(f"SELECT {columns(Role, 'r')} FROM {Role._meta.db_table} r WHERE r.id = %s", [role.pk]) as cursor:
        by_hand = instance(Role, cursor.fetchone())
    loaded = Role.objects.get(pk=role.pk)
    assert _fields(by_hand) == _fields(loaded)
    assert by_hand.permissions == ["project.view", "annotation.submit"]
    assert timezone.is_aware(by_hand.created_at)
    assert not by_hand._state.adding  # a saved row, as the ORM marks it


def test_the_queue_reads_items_drafts_and_answers_as_the_orm_does(client, scientist, annotator, project,
                                                                 review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    first = next_item(client, campaign).json()
    draft_values = {"sentiment": "neutral", "ideal": "<script>x</script> \u00e9"}
    assert client.put(f"/api/campaigns/{campaign['id']}/items/{first['id']}/draft/", {"values": draft_values},
                      content_type="application/json").status_code == 200

    loaded = queue.campaign(campaign["id"])
    orm_campaign = type(loaded).objects.select_related("project", "schema").get(pk=campaign["id"])
    assert _fields(loaded) == _fields(orm_campaign)
    assert _fields(loaded.project) == _fields(orm_campaign.project)
    assert _fields(loaded.schema) == _fields(orm_campaign.schema)
    for not_an_id in ("7x", None, 0, -1, 2**63, 10**30):
        assert queue.campaign(not_an_id) is None and queue.item(campaign["id"], not_an_id) is None
    huge = 10**30  # past 64 bits: 404, not a database error
    assert client.post(f"/api/campaigns/{huge}/next/", content_type="application/json").status_code == 404
    assert client.get(f"/api/campaigns/{campaign['id']}/items/{huge}/").status_code == 404

    item = queue.item(campaign["id"], first["id"])
    orm_item = type(item).objects.select_related("row").get(pk=first["id"])
    assert _fields(item) == _fields(orm_item)
    assert _fields(item.row) == _fields(orm_item.row)
    assert queue.item(campaign["id"], 10**9) is None

    draft = queue.draft(first["id"], annotator.pk)
    assert _fields(draft) == _fields(Draft.objects.get(item_id=first["id"], annotator=annotator))
    assert draft.values["ideal"] == "<script>x</script> \u00e9"

    client_id = uuid.uuid4()
    assert submit(client, campaign, first["id"], answer(), client_id=client_id).status_code == 201
    assert queue.answered_with(annotator.pk, client_id) == first["id"]
    assert queue.answered_with(annotator.pk, uuid.uuid4()) is None
    assert queue.draft(first["id"], annotator.pk) is None  # submitting removed it
    assert queue.my_counts(campaign["id"], annotator.pk) == {"mine": 1, "my_skipped": 0}
