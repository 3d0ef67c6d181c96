"""Live campaign progress (ws/campaigns/<id>/): the counts on connect, then again after answers,
at most once a second and never missing the last one; who may listen is the campaign's rule."""

import time
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from apps.annotation import services
from apps.annotation.models import Campaign, Item
from apps.projects.sockets import CLOSE_NOT_FOUND
from tests.annotation.fixtures import answer
from tests.projects.test_activity_socket import TIMEOUT_S, headers_for, next_close, run
from workbench.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

FIELDS = [{"name": "sentiment", "type": "single_label", "labels": ["positive", "negative", "neutral"]},
          {"name": "helpfulness", "type": "rating", "min": 1, "max": 5},
          {"name": "better", "type": "preference", "candidates": ["response", "metadata.response_b"]}]


@pytest.fixture
def campaign(project, owner, review_version):
    schema = services.schema_create(user=owner, project=project, name="Review", fields=FIELDS)
    return services.campaign_create(user=owner, project=project, name="Replies",
                                    dataset_version_id=review_version.pk, schema_id=schema.pk, overlap=1)


def socket_for(campaign, headers, query: str = "") -> WebsocketCommunicator:
    return WebsocketCommunicator(application, f"/ws/campaigns/{campaign.pk}/{query}", headers=headers)


def answer_one(user, campaign) -> None:
    campaign = Campaign.objects.get(pk=campaign.pk)
    item = services.next_item(user=user, campaign=campaign)
    services.submit(user=user, campaign=campaign, item=item, client_id=str(uuid.uuid4()), values=answer())


def test_a_manager_sees_the_counts_then_the_answers_arrive_throttled(owner, annotator, campaign):
    headers = headers_for(owner)

    async def scenario():
        socket = socket_for(campaign, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        first = (await socket.receive_json_from(timeout=TIMEOUT_S))["progress"]
        assert (first["annotations"], first["annotations_needed"]) == (0, 10)
        await sync_to_async(answer_one)(annotator, campaign)
        after_one = (await socket.receive_json_from(timeout=TIMEOUT_S))["progress"]
        assert after_one["annotations"] == 1
        started = time.monotonic()
        for _ in range(3):  # a burst: counted once more, a second after the last count, with all of it
            await sync_to_async(answer_one)(annotator, campaign)
        burst = (await socket.receive_json_from(timeout=TIMEOUT_S))["progress"]
        assert burst["annotations"] == 4
        assert await socket.receive_nothing(timeout=1.5)  # one message for the burst
        assert time.monotonic() - started >= 0.5
        await socket.disconnect()

    run(scenario)


def test_annotators_of_the_campaign_listen_others_are_closed_with_nothing_sent(annotator, viewer, outsider,
                                                                               campaign):
    annotator_headers, strangers = headers_for(annotator), [headers_for(viewer), headers_for(outsider)]

    async def scenario():
        mine = socket_for(campaign, annotator_headers)
        assert (await mine.connect(timeout=TIMEOUT_S))[0]
        assert (await mine.receive_json_from(timeout=TIMEOUT_S))["progress"]["annotations"] == 0
        await mine.disconnect()
        for headers in strangers:  # a viewer of the project is not in the campaign
            socket = socket_for(campaign, headers)
            await socket.connect(timeout=TIMEOUT_S)
            close, before = await next_close(socket)
            assert close["code"] == CLOSE_NOT_FOUND and [m for m in before if m["type"] == "websocket.send"] == []

    run(scenario)


def test_a_skip_does_not_count(owner, annotator, campaign):
    headers = headers_for(owner)

    async def scenario():
        socket = socket_for(campaign, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        await socket.receive_json_from(timeout=TIMEOUT_S)

        def skip():
            fresh = Campaign.objects.get(pk=campaign.pk)
            item = services.next_item(user=annotator, campaign=fresh)
            services.submit(user=annotator, campaign=fresh, item=item, client_id=str(uuid.uuid4()), skipped=True)

        await sync_to_async(skip)()
        assert await socket.receive_nothing(timeout=1.5)
        await socket.disconnect()

    run(scenario)
    assert Item.objects.filter(campaign=campaign, completed__gt=0).count() == 0


def test_an_annotator_removed_from_the_project_while_watching_is_disconnected(owner, annotator, project, campaign):
    from apps.projects import services as project_services
    from apps.projects.models import Membership
    from apps.projects.sockets import CLOSE_FORBIDDEN

    membership = Membership.objects.get(project=project, user=annotator)
    headers = headers_for(annotator)

    async def scenario():
        socket = socket_for(campaign, headers)
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        await socket.receive_json_from(timeout=TIMEOUT_S)
        await sync_to_async(project_services.member_remove)(actor=owner, membership=membership)
        close, _ = await next_close(socket)
        assert close["code"] == CLOSE_FORBIDDEN
        await socket.disconnect(timeout=TIMEOUT_S)

    run(scenario)


def test_reviewers_asking_get_the_agreement_and_annotator_tables_live_and_annotators_do_not(owner, annotator,
                                                                                   second_annotator, campaign):
    Campaign.objects.filter(pk=campaign.pk).update(overlap=2)
    manager, worker = headers_for(owner), headers_for(annotator)

    async def scenario():
        watching = socket_for(campaign, manager, "?tables=1")
        assert (await watching.connect(timeout=TIMEOUT_S))[0]
        first = await watching.receive_json_from(timeout=TIMEOUT_S)
        assert first["quality"]["annotators"] == [] and "No annotations yet." in first["quality_html"]
        annotating = socket_for(campaign, worker, "?tables=1")  # asked, not given
        assert (await annotating.connect(timeout=TIMEOUT_S))[0]
        assert "quality" not in await annotating.receive_json_from(timeout=TIMEOUT_S)
        plain = socket_for(campaign, manager)  # the manager's own annotating page: counts only
        assert (await plain.connect(timeout=TIMEOUT_S))[0]
        assert "quality" not in await plain.receive_json_from(timeout=TIMEOUT_S)
        await plain.disconnect()
        # anna and ben answer the same first example differently: a disagreement, no consensus.
        await sync_to_async(answer_one)(annotator, campaign)
        await watching.receive_json_from(timeout=TIMEOUT_S)
        await sync_to_async(lambda: answer_first_with(second_annotator, campaign, "negative"))()
        message = await watching.receive_json_from(timeout=TIMEOUT_S)
        assert message["progress"]["annotations"] == 2
        sentiment = next(f for f in message["quality"]["fields"] if f["field"] == "sentiment")
        assert (sentiment["items_with_2_plus"], sentiment["disagreements"]) == (1, 1)
        people = {p["annotator"]: p for p in message["quality"]["annotators"]}
        assert people["anna"]["annotations"] == 1 and people["ben"]["annotations"] == 1
        assert '<td>ben</td><td>1</td>' in message["quality_html"]
        later = await annotating.receive_json_from(timeout=TIMEOUT_S)
        assert later["progress"]["annotations"] >= 1 and "quality" not in later and "quality_html" not in later
        await watching.disconnect()
        await annotating.disconnect()

    run(scenario)


def answer_first_with(user, campaign, sentiment) -> None:
    """Answer the campaign's first example (which the queue would hand to someone else first)."""
    campaign = Campaign.objects.get(pk=campaign.pk)
    item = Item.objects.select_related("row").get(campaign=campaign, position=0)
    services.submit(user=user, campaign=campaign, item=item, client_id=str(uuid.uuid4()),
                    values=answer(sentiment=sentiment))


def test_an_edited_answer_recounts_the_dashboards_agreement(owner, annotator, second_annotator, campaign):
    from apps.annotation.models import Annotation

    Campaign.objects.filter(pk=campaign.pk).update(overlap=2)
    answer_first_with(annotator, campaign, "positive")
    answer_first_with(second_annotator, campaign, "negative")
    headers = headers_for(owner)

    async def scenario():
        socket = socket_for(campaign, headers, "?tables=1")
        assert (await socket.connect(timeout=TIMEOUT_S))[0]
        before = (await socket.receive_json_from(timeout=TIMEOUT_S))["quality"]["fields"][0]
        assert before["field"] == "sentiment" and before["disagreements"] == 1

        def ben_changes_his_mind():
            mine = Annotation.objects.select_related("item__row", "item__campaign__project", "schema").get(
                annotator=second_annotator)
            services.edit(user=second_annotator, annotation=mine, revision=mine.revision,
                          values=answer(sentiment="positive"))

        await sync_to_async(ben_changes_his_mind)()
        after = (await socket.receive_json_from(timeout=TIMEOUT_S))["quality"]["fields"][0]
        assert after["disagreements"] == 0  # the count did not move; the agreement did
        await socket.disconnect()

    run(scenario)
