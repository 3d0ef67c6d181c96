"""A large campaign's agreement numbers are computed by a real Celery worker, never by the
request: the API answers at once with the last numbers it has (`computing`), and the worker's
numbers are the ones the web process would have computed itself."""

import pytest

from apps.annotation import quality
from apps.annotation.models import Annotation, Campaign
from tests.annotation.fixtures import answer, make_campaign, next_item, submit
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _answer_all(client, campaign, people, sentiments):
    for person, sentiment in zip(people, sentiments, strict=True):
        client.force_login(person)
        item = next_item(client, campaign).json()
        assert submit(client, campaign, item["id"], answer(sentiment=sentiment)).status_code == 201


def assert_as_computed_inline(campaign, numbers):
    """The worker's numbers are the ones computed here, now, from the database (not the cache)."""
    row = Campaign.objects.select_related("schema").get(pk=campaign["id"])
    gold, _, answers = quality._quality_inputs(row)
    inline = quality._campaign_quality(row, gold)
    assert numbers["fields"] == inline["fields"] and numbers["annotators"] == inline["annotators"]
    assert numbers["answers"] == answers


def _fresh(client, campaign):
    numbers = client.get(f"/api/campaigns/{campaign['id']}/quality/").json()
    return numbers if not numbers["computing"] else None


def test_past_the_limit_a_worker_computes_the_numbers_and_the_last_ones_show_meanwhile(
        settings, celery_worker, client, scientist, annotator, second_annotator, project, review_version):
    settings.QUALITY_INLINE_MAX_ANSWERS = 1
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, overlap=2, sample=2, seed=1)
    _answer_all(client, campaign, [annotator, second_annotator], ["positive", "negative"])

    client.force_login(scientist)
    first = client.get(f"/api/campaigns/{campaign['id']}/quality/").json()
    # Nothing computed yet for this campaign: the request did not compute either.
    assert first["computing"] is True and first["answers"] == 2
    assert first["fields"] == [] and first["annotators"] == []
    assert first["progress"]["annotations"] == 2

    ready = wait_for(lambda: _fresh(client, campaign), timeout=60, what="the worker's numbers")
    assert_as_computed_inline(campaign, ready)
    assert {p["annotations"] for p in ready["annotators"]} == {1}

    # A new answer: the request answers with the numbers before it, marked as being recomputed...
    settings.QUALITY_INLINE_MAX_ANSWERS = 1
    _answer_all(client, campaign, [annotator, second_annotator], ["positive", "positive"])
    client.force_login(scientist)
    stale = client.get(f"/api/campaigns/{campaign['id']}/quality/").json()
    assert stale["computing"] is True and stale["answers"] == 4
    assert stale["fields"] == ready["fields"]
    # ... and the worker's next numbers count it.
    updated = wait_for(lambda: _fresh(client, campaign), timeout=60, what="the recomputed numbers")
    assert_as_computed_inline(campaign, updated)
    assert updated["fields"][0]["items_with_2_plus"] == 2
    assert {p["annotations"] for p in updated["annotators"]} == {2}
    assert Annotation.objects.filter(item__campaign_id=campaign["id"]).count() == 4


def test_the_campaign_page_says_a_worker_is_computing(settings, client, scientist, annotator, second_annotator,
                                                        project, review_version):
    # No worker here: the page must still answer at once, and say why the tables are empty.
    settings.QUALITY_INLINE_MAX_ANSWERS = 1
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, overlap=2, sample=1, seed=1)
    _answer_all(client, campaign, [annotator, second_annotator], ["positive", "negative"])
    client.force_login(scientist)
    page = client.get(f"/projects/{project.pk}/campaigns/{campaign['id']}/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "A worker is computing these numbers over 2 answers" in text
    assert "No annotations yet." not in text and "no field agreement is measured on" not in text
