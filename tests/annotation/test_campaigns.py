"""Campaigns through the API: the queue, leases, idempotent submits, edits, review, quality."""

import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from apps.annotation.models import Annotation, Campaign, Draft, Item, LabelSchema, Lease, SuggestionRun
from apps.projects.models import AuditEvent
from tests.annotation.fixtures import SCHEMA_FIELDS, answer, make_campaign, make_schema, next_item, submit

pytestmark = pytest.mark.django_db
User = get_user_model()


def test_a_scientist_creates_a_campaign_over_a_split_sample_of_a_version(client, scientist, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, sample=4, seed=7, overlap=2,
                             guidelines="# Rules\n<script>alert(1)</script>")
    assert campaign["item_count"] == 4 and campaign["overlap"] == 2 and campaign["assignment"] == "all"
    positions = list(Item.objects.filter(campaign_id=campaign["id"]).values_list("row__position", flat=True))
    again = make_campaign(client, project, review_version, sample=4, seed=7)
    assert positions == list(Item.objects.filter(campaign_id=again["id"]).values_list("row__position", flat=True))
    labelled = make_campaign(client, project, review_version, label="negative")
    assert labelled["item_count"] == 5
    north = make_campaign(client, project, review_version, meta_key="shop", meta_value="north", label="negative")
    assert north["item_count"] == 2 and north["selection"]["meta_key"] == "shop"  # rows 1 and 3
    assert AuditEvent.objects.filter(action="campaign.create").count() == 4


@pytest.mark.parametrize("change, field", [
    ({"overlap": 0}, "overlap"),
    ({"overlap": 11}, "overlap"),
    ({"lease_seconds": 5}, "lease_seconds"),
    ({"dataset_version": 999999}, "dataset_version"),
    ({"label": "no-such-label"}, "label"),
    ({"assignees": ["nobody"]}, "assignees"),
    ({"assignees": ["sofia", "victor"]}, "assignees"),  # victor is a viewer: may not annotate
    ({"sample": 0}, "sample"),
    ({"meta_key": "weather", "meta_value": "x"}, "meta_key"),
    ({"meta_key": "shop", "meta_value": "east"}, "meta_key"),
])
def test_bad_campaign_settings_are_refused_naming_the_field(client, scientist, viewer, project, review_version,
                                                            change, field):
    client.force_login(scientist)
    schema = make_schema(client, project)
    body = {"name": "C", "dataset_version": review_version.pk, "schema": schema["id"], **change}
    response = client.post(f"/api/projects/{project.pk}/campaigns/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json().get("field", next(iter(response.json()))) == field
    assert not Item.objects.exists()


@pytest.mark.parametrize("fields, where", [
    ([], "fields"),
    ([{"name": "Bad Name", "type": "single_label", "labels": ["a"]}], "fields[0].name"),
    ([{"name": "x", "type": "slider"}], "fields[0].type"),
    ([{"name": "x", "type": "single_label", "labels": []}], "fields[0].labels"),
    ([{"name": "x", "type": "single_label", "labels": ["a", "a"]}], "fields[0].labels[1].value"),
    ([{"name": "x", "type": "rating", "min": 5, "max": 1}], "fields[0].max"),
    ([{"name": "x", "type": "preference", "candidates": ["response", "../../etc/passwd"]}], "fields[0].candidates"),
    ([{"name": "x", "type": "single_label", "labels": [{"value": "a", "hotkey": "s"}]}], "fields[0].labels[0].hotkey"),
    ([{"name": "x", "type": "single_label", "labels": ["a"]},
      {"name": "x", "type": "rating"}], "fields[1].name"),
])
def test_a_bad_schema_is_refused_naming_where(client, scientist, project, fields, where):
    client.force_login(scientist)
    response = client.post(f"/api/projects/{project.pk}/label-schemas/", {"name": "S", "fields": fields},
                           content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == where
    assert not LabelSchema.objects.exists()


def test_with_overlap_one_two_annotators_never_get_the_same_item(client, scientist, annotator, second_annotator,
                                                                 project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    first = next_item(client, campaign).json()
    assert first["position"] == 0 and first["lease_expires_at"]
    assert next_item(client, campaign).json()["id"] == first["id"]  # my live lease comes back to me
    client.force_login(second_annotator)
    second = next_item(client, campaign).json()
    assert second["id"] != first["id"]
    # The example is shown as safe HTML beside its raw text.
    assert second["example"]["prompt"].startswith("Review 1")
    assert second["example"]["candidates"]["better"][1]["text"] == "Noted (1)."


def test_with_overlap_two_each_item_goes_to_two_different_annotators_fewest_done_first(
        client, scientist, annotator, second_annotator, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, overlap=2)
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    assert submit(client, campaign, item["id"], answer()).status_code == 201
    assert next_item(client, campaign).json()["position"] == 1  # never the one I did
    client.force_login(second_annotator)
    # Items 0 (one answer) and 1 (leased to anna: room for one more) both need a second
    # annotator; the queue prefers the fewest completed, then the earliest.
    assert next_item(client, campaign).json()["position"] == 1
    second = next_item(client, campaign).json()
    assert second["position"] == 1  # still my lease
    assert submit(client, campaign, second["id"], answer()).status_code == 201
    assert next_item(client, campaign).json()["position"] == 2  # no answers yet: before item 0, which has one
    assert Item.objects.get(pk=item["id"]).completed == 1


def test_a_retried_submit_never_duplicates(client, scientist, annotator, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    client_id = uuid.uuid4()
    first = submit(client, campaign, item["id"], answer(), client_id=client_id)
    retry = submit(client, campaign, item["id"], answer(sentiment="negative"), client_id=client_id)
    assert first.status_code == 201 and retry.status_code == 200
    assert retry.json()["annotation"]["id"] == first.json()["annotation"]["id"]
    assert retry.json()["annotation"]["values"]["sentiment"] == "positive"  # the first answer stands
    assert Annotation.objects.count() == 1 and Item.objects.get(pk=item["id"]).completed == 1
    assert not Lease.objects.exists()
    # A second, different submission for the same item is an edit, not a new annotation.
    again = submit(client, campaign, item["id"], answer())
    assert again.status_code == 409 and "edit" in again.json()["detail"]


@pytest.mark.parametrize("values, field", [
    (answer(sentiment="ecstatic"), "values.sentiment"),
    (answer(sentiment=None), "values.sentiment"),
    (answer(helpfulness=6), "values.helpfulness"),
    (answer(helpfulness="5"), "values.helpfulness"),
    (answer(helpfulness=True), "values.helpfulness"),
    (answer(better="C"), "values.better"),
    (answer(ideal="x" * 2001), "values.ideal"),
    (answer(topics=["billing", "refunds"]), "values.topics"),
    (answer(pii=[{"start": 0, "end": 10_000, "label": "name"}]), "values.pii[0]"),
    (answer(pii=[{"start": 3, "end": 5, "label": "phone"}]), "values.pii[0].label"),
    (answer(mood="happy"), "values.mood"),
    ("positive", "values"),
])
def test_a_bad_answer_is_refused_naming_the_field_and_nothing_is_stored(client, scientist, annotator, project,
                                                                        review_version, values, field):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    response = submit(client, campaign, item["id"], values)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert not Annotation.objects.exists() and Item.objects.get(pk=item["id"]).completed == 0


def test_html_in_an_answer_is_stored_as_text_and_prompts_are_rendered_without_raw_html(
        client, scientist, annotator, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    hostile = '<img src=x onerror="alert(1)"><script>alert(2)</script>=HYPERLINK("http://x")'
    response = submit(client, campaign, item["id"], answer(ideal=hostile), comment=hostile)
    assert response.status_code == 201
    annotation = Annotation.objects.get()
    assert annotation.values["ideal"] == hostile and annotation.comment == hostile
    row = item["example"]
    assert "<p>" in row["html"]["prompt"] and "<script" not in str(row["html"])


def test_hostile_markdown_in_an_example_is_inert(client, scientist, annotator, project, owner):
    from apps.datasets.models import Dataset
    from apps.datasets.writer import write_version

    hostile = ('</script><script>alert(1)</script> [click](javascript:alert(2)) <img src=x onerror=alert(3)> '
               '![x](http://evil.example/track.png)')
    version = write_version(dataset=Dataset.objects.create(project=project, name="Hostile", created_by=owner),
                            records=[{"prompt": hostile, "response": hostile}],
                            roles={"prompt": "prompt", "response": "response"})
    client.force_login(scientist)
    campaign = make_campaign(client, project, version, guidelines=hostile)
    client.force_login(annotator)
    html = next_item(client, campaign).json()["example"]["html"]
    for rendered in (html["prompt"], html["response"]):
        assert "<script" not in rendered and "<img" not in rendered and 'href="javascript' not in rendered
        assert "&lt;script&gt;" in rendered  # shown as text
    page = client.get(f"/projects/{project.pk}/campaigns/{campaign['id']}/annotate/").content.decode()
    assert "<script>alert(1)" not in page and "onerror=alert(3)>" not in page


def test_another_projects_annotation_answers_404_and_stays_unchanged(client, scientist, annotator, outsider, project,
                                                                    review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    done = submit(client, campaign, item["id"], answer()).json()["annotation"]
    client.force_login(outsider)
    url = f"/api/annotations/{done['id']}/"
    assert client.get(url).status_code == 404
    assert client.patch(url, {"revision": 1, "values": answer(sentiment="negative")},
                        content_type="application/json").status_code == 404
    assert client.post(f"{url}review/", {"decision": "accept"}, content_type="application/json").status_code == 404
    assert Annotation.objects.get().values["sentiment"] == "positive" and Annotation.objects.get().revision == 1


def test_an_expired_lease_is_accepted_while_the_item_still_needs_answers(client, scientist, annotator,
                                                                        second_annotator, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    Lease.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert submit(client, campaign, item["id"], answer()).status_code == 201


def test_a_late_submit_for_an_item_done_by_someone_else_keeps_the_answer_as_a_draft(
        client, scientist, annotator, second_annotator, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    Lease.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    client.force_login(second_annotator)
    taken = next_item(client, campaign).json()
    assert taken["id"] == item["id"]  # the expired lease freed it
    assert submit(client, campaign, taken["id"], answer(sentiment="negative")).status_code == 201
    client.force_login(annotator)
    late = submit(client, campaign, item["id"], answer(ideal="my careful rewrite"))
    assert late.status_code == 409 and "draft" in late.json()["detail"]
    draft = Draft.objects.get(annotator=annotator)
    assert draft.values["ideal"] == "my careful rewrite"  # nothing lost
    assert client.get(f"/api/campaigns/{campaign['id']}/items/{item['id']}/").json()["draft"]["values"]["ideal"] \
        == "my careful rewrite"


def test_drafts_autosave_partial_answers_and_go_away_on_submit(client, scientist, annotator, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    url = f"/api/campaigns/{campaign['id']}/items/{item['id']}/draft/"
    assert client.put(url, {"values": {"sentiment": "neutral"}}, content_type="application/json").status_code == 200
    bad = client.put(url, {"values": {"sentiment": "furious"}}, content_type="application/json")
    assert bad.status_code == 400 and bad.json()["field"] == "values.sentiment"
    assert next_item(client, campaign).json()["draft"]["values"] == {"sentiment": "neutral"}
    submit(client, campaign, item["id"], answer())
    assert not Draft.objects.exists()


def test_skip_moves_on_and_going_back_lets_me_fix_an_answer_with_optimistic_concurrency(
        client, scientist, annotator, second_annotator, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    first = next_item(client, campaign).json()
    skip = client.post(f"/api/campaigns/{campaign['id']}/items/{first['id']}/skip/", {"client_id": str(uuid.uuid4())},
                       content_type="application/json")
    assert skip.status_code == 201
    second = next_item(client, campaign).json()
    assert second["position"] == 1
    done = submit(client, campaign, second["id"], answer()).json()["annotation"]
    mine = client.get(f"/api/campaigns/{campaign['id']}/mine/").json()["results"]
    assert [a["item"] for a in mine] == [second["id"], first["id"]]  # newest first: Backspace goes here
    url = f"/api/annotations/{done['id']}/"
    fixed = client.patch(url, {"revision": 1, "values": answer(sentiment="neutral")}, content_type="application/json")
    assert fixed.status_code == 200 and fixed.json()["revision"] == 2
    stale = client.patch(url, {"revision": 1, "values": answer(sentiment="negative")}, content_type="application/json")
    assert stale.status_code == 409
    assert stale.json()["current"]["values"]["sentiment"] == "neutral" and stale.json()["current"]["revision"] == 2
    # Nobody else edits my answer: another annotator may not even read it (no annotation.review),
    # and a reviewer corrects through review, not by editing it.
    for other, refusal in (("ben", 403), ("sofia", 404)):
        client.force_login(User.objects.get(username=other))
        assert client.patch(url, {"revision": 2, "values": answer()}, content_type="application/json").status_code \
            == refusal
    client.force_login(annotator)
    # The skipped item can still be answered later, and then counts.
    assert submit(client, campaign, first["id"], answer()).status_code == 201
    assert Item.objects.get(pk=first["id"]).completed == 1
    progress = client.get(f"/api/campaigns/{campaign['id']}/").json()["progress"]
    assert progress["mine"] == 2 and progress["annotations"] == 2 and progress["items"] == 10


def test_only_people_in_a_campaign_may_work_it(client, scientist, annotator, second_annotator, viewer, outsider,
                                               project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, assignees=["anna"])
    client.force_login(second_annotator)  # an annotator of the project, not assigned
    assert next_item(client, campaign).status_code == 404
    assert client.get(f"/api/campaigns/{campaign['id']}/").status_code == 404
    assert client.get(f"/api/projects/{project.pk}/campaigns/").json()["results"] == []
    client.force_login(viewer)
    assert next_item(client, campaign).status_code == 404
    client.force_login(outsider)
    assert next_item(client, campaign).status_code == 404
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    client.force_login(second_annotator)
    assert submit(client, campaign, item["id"], answer()).status_code == 404
    # Another campaign's item through this campaign's URL: 404.
    client.force_login(scientist)
    other = make_campaign(client, project, review_version)
    other_item = Item.objects.filter(campaign_id=other["id"]).first()
    client.force_login(annotator)
    assert submit(client, campaign, other_item.pk, answer()).status_code == 404


def test_review_adjudication_gold_and_quality_numbers(client, scientist, annotator, second_annotator, project,
                                                      review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, overlap=2, sample=3, seed=1)
    items = list(Item.objects.filter(campaign_id=campaign["id"]).order_by("position"))
    gold = client.put(f"/api/campaigns/{campaign['id']}/items/{items[0].pk}/gold/",
                      {"values": answer(sentiment="negative")}, content_type="application/json")
    assert gold.status_code == 200 and gold.json()["is_gold"]
    # anna and ben agree on the 2nd and 3rd examples and disagree on the first.
    for user, first_label in ((annotator, "positive"), (second_annotator, "negative")):
        client.force_login(user)
        for label in (first_label, "negative", "neutral"):
            item = next_item(client, campaign).json()
            assert submit(client, campaign, item["id"], answer(sentiment=label), time_spent_ms=1500).status_code == 201
        assert next_item(client, campaign).status_code == 204
    client.force_login(scientist)
    queue = client.get(f"/api/campaigns/{campaign['id']}/review/?disagreements=1").json()["results"]
    assert [i["id"] for i in queue] == [items[0].pk]
    assert {a["annotator"] for a in queue[0]["annotations"]} == {"anna", "ben"}
    quality = client.get(f"/api/campaigns/{campaign['id']}/quality/").json()
    sentiment = next(f for f in quality["fields"] if f["field"] == "sentiment")
    assert sentiment["disagreements"] == 1 and sentiment["items_with_2_plus"] == 3
    # Cohen's kappa by hand: pairs (pos,neg),(neg,neg),(neu,neu): p_o = 2/3;
    # anna pos,neg,neu / ben neg,neg,neu: p_e = (1*0 + 1*2 + 1*1)/9 = 1/3; kappa = (2/3-1/3)/(2/3) = 0.5
    assert sentiment["cohen_kappa"][0]["kappa"] == pytest.approx(0.5)
    people = {p["annotator"]: p for p in quality["annotators"]}
    # Gold accuracy counts each field of the gold answer: anna missed the sentiment, not the other two.
    assert people["ben"]["gold_accuracy"] == 1.0 and people["anna"]["gold_accuracy"] == pytest.approx(2 / 3)
    assert people["anna"]["annotations"] == 3 and people["anna"]["median_time_s"] == 1.5
    assert people["anna"]["per_hour"] == 2400  # 1.5 s an item
    # The reviewer settles the disagreement; it leaves the queue.
    settled = client.post(f"/api/campaigns/{campaign['id']}/items/{items[0].pk}/adjudicate/",
                          {"values": answer(sentiment="negative")}, content_type="application/json")
    assert settled.status_code == 200 and settled.json()["adjudicated_by"] == "sofia"
    assert client.get(f"/api/campaigns/{campaign['id']}/review/?disagreements=1").json()["results"] == []
    anna_answer = Annotation.objects.get(annotator=annotator, item=items[1])
    rejected = client.post(f"/api/annotations/{anna_answer.pk}/review/", {"decision": "reject"},
                           content_type="application/json")
    assert rejected.status_code == 400 and rejected.json()["field"] == "comment"
    accepted = client.post(f"/api/annotations/{anna_answer.pk}/review/", {"decision": "accept", "comment": "ok"},
                           content_type="application/json")
    assert accepted.status_code == 200 and accepted.json()["review"] == "accepted"
    # Annotators cannot review or read others' answers.
    client.force_login(second_annotator)
    assert client.post(f"/api/annotations/{anna_answer.pk}/review/", {"decision": "accept"},
                       content_type="application/json").status_code == 403
    assert client.get(f"/api/annotations/{anna_answer.pk}/").status_code == 403
    assert client.get(f"/api/campaigns/{campaign['id']}/quality/").status_code == 403


def test_editing_a_schema_after_annotations_exist_makes_a_new_version(client, scientist, annotator, project,
                                                                      review_version):
    client.force_login(scientist)
    schema = make_schema(client, project)
    unchanged = client.patch(f"/api/label-schemas/{schema['id']}/", {"fields": SCHEMA_FIELDS[:2]},
                             content_type="application/json")
    assert unchanged.json()["version"] == 1  # nothing answered yet: edited in place
    campaign = make_campaign(client, project, review_version, schema=schema)
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    submit(client, campaign, item["id"], {"sentiment": "positive", "helpfulness": 3})
    client.force_login(scientist)
    fields = [*SCHEMA_FIELDS[:2], {"name": "toxic", "type": "single_label", "labels": ["yes", "no"]}]
    changed = client.patch(f"/api/label-schemas/{schema['id']}/", {"fields": fields}, content_type="application/json")
    assert changed.status_code == 200 and changed.json()["version"] == 2 and changed.json()["parent"] == schema["id"]
    assert client.get(f"/api/campaigns/{campaign['id']}/").json()["schema"]["version"] == 2
    assert Annotation.objects.get().schema_id == schema["id"]  # the old answer keeps its version
    stale = client.patch(f"/api/label-schemas/{schema['id']}/", {"fields": fields}, content_type="application/json")
    assert stale.status_code == 409


def test_the_raw_export_lists_every_annotation_with_formula_safe_csv(client, scientist, annotator, project,
                                                                    review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    submit(client, campaign, item["id"], answer(), comment="=cmd|' /C calc'!A0", time_spent_ms=900)
    assert client.get(f"/api/campaigns/{campaign['id']}/annotations/").status_code == 403  # annotators: no
    client.force_login(scientist)
    csv_text = b"".join(client.get(f"/api/campaigns/{campaign['id']}/annotations/?export_format=csv")
                        .streaming_content).decode()
    assert "'=cmd|" in csv_text and "anna" in csv_text and ",900," in csv_text
    bad = client.get(f"/api/campaigns/{campaign['id']}/annotations/?export_format=xlsx")
    assert bad.status_code == 400 and bad.json()["field"] == "export_format"


def test_a_version_is_browsed_by_annotation_status(client, scientist, annotator, viewer, project, review_version):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    for _ in range(3):
        item = next_item(client, campaign).json()
        submit(client, campaign, item["id"], answer())
    url = f"/projects/{project.pk}/datasets/{review_version.dataset_id}/versions/1/"
    client.force_login(scientist)
    done = client.get(url, {"annotation": f"{campaign['id']}:done"}).content.decode()
    todo = client.get(url, {"annotation": f"{campaign['id']}:todo"}).content.decode()
    assert "Review 0:" in done and "Review 2:" in done and "Review 3:" not in done
    assert "Review 3:" in todo and "Review 0:" not in todo
    assert "Support replies: done" in done  # offered for this version's campaigns
    client.force_login(viewer)  # sees the dataset, not the campaigns: no such filter, all rows
    page = client.get(url, {"annotation": f"{campaign['id']}:done"}).content.decode()
    assert "Support replies" not in page and "Review 3:" in page


def test_an_annotators_pace_comes_from_time_per_item_else_from_a_long_enough_span():
    from datetime import datetime, timedelta, timezone

    from apps.annotation.quality import _per_hour

    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert _per_hour(10, start, start + timedelta(seconds=3), 2.0) == 1800  # recorded: 2 s an item
    assert _per_hour(3, start, start + timedelta(milliseconds=60), None) is None  # a burst is not a pace
    assert _per_hour(7, start, start + timedelta(minutes=3), None) == 120  # 6 gaps in 3 minutes
    assert _per_hour(1, start, start, None) is None


def test_a_reviewer_reads_each_kind_of_answer_in_words():
    from apps.annotation.selectors import answer_in_words

    fields = [{"name": "order", "type": "ranking", "candidates": ["response", "metadata.b"]},
              {"name": "better", "type": "preference", "candidates": ["response", "metadata.b"]},
              {"name": "topics", "type": "multi_label", "labels": []},
              {"name": "pii", "type": "spans", "source": "prompt", "labels": []},
              {"name": "missing_source", "type": "spans", "source": "response", "labels": []}]
    example = {"prompt": "\U0001F4E6 from Jo", "response": None}
    values = {"order": ["B", "A"], "better": "both_bad", "topics": ["billing", "shipping"], "helpfulness": 4,
              "pii": [{"start": 7, "end": 9, "label": "name"}], "missing_source": [{"start": 0, "end": 2, "label": "x"}]}
    assert answer_in_words(fields, values, example) == {
        "order": "B > A", "better": "both bad", "topics": "billing, shipping", "helpfulness": "4",
        "pii": "name: “Jo”", "missing_source": "x: “”"}
    assert answer_in_words(fields, {"better": "tie"}, example) == {"better": "tie"}
    assert answer_in_words(fields, {"better": "A"}, example) == {"better": "A is better"}


def test_only_reviewers_open_the_correction_form_and_only_for_their_campaigns_answers(
        client, scientist, annotator, viewer, outsider, project, review_version, other_project, owner):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    assert submit(client, campaign, item["id"], answer()).status_code == 201
    mine = Annotation.objects.get(annotator=annotator)
    url = f"/projects/{project.pk}/campaigns/{campaign['id']}/review/{mine.pk}/correct/"
    for user, status in ((annotator, 403), (viewer, 403), (outsider, 404)):  # members lacking annotation.review: 403
        client.force_login(user)
        assert client.get(url).status_code == status, user
    client.force_login(scientist)
    page = client.get(url)
    assert page.status_code == 200 and b'id="correcting"' in page.content
    assert client.get(f"/projects/{project.pk}/campaigns/{campaign['id']}/review/{mine.pk + 999}/correct/").status_code == 404
    assert client.get(f"/projects/{other_project.pk}/campaigns/{campaign['id']}/review/{mine.pk}/correct/").status_code == 404


def test_a_form_that_starts_from_suggestions_needs_a_model_and_nothing_is_made_without_one(
        client, scientist, project, review_version):
    client.force_login(scientist)
    schema = make_schema(client, project, [{"name": "ideal", "type": "text", "prefill": "suggestion"}])
    response = client.post(f"/api/projects/{project.pk}/campaigns/",
                           {"name": "Fix drafts", "dataset_version": review_version.pk, "schema": schema["id"]},
                           content_type="application/json")
    assert response.status_code == 400
    assert response.json()["field"] == "suggestion_model" and "choose the model" in response.json()["detail"]
    assert not Item.objects.exists()


def test_a_manager_stops_the_model_suggestions_and_the_worker_honours_it(client, scientist, annotator, project,
                                                                         review_version):
    from apps.annotation.suggestions import run_suggestions
    from apps.core.jobs import JobCancelled, JobRun

    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    SuggestionRun.objects.create(campaign_id=campaign["id"])  # as if a model were chosen
    client.force_login(annotator)
    assert client.post(f"/api/campaigns/{campaign['id']}/suggestions/stop/").status_code == 403
    client.force_login(scientist)
    stopped = client.post(f"/api/campaigns/{campaign['id']}/suggestions/stop/")
    assert stopped.status_code == 200 and stopped.json()["suggestion_state"] == "cancelled"
    again = client.post(f"/api/campaigns/{campaign['id']}/suggestions/stop/")
    assert again.status_code == 409 and "No model suggestions" in again.json()["detail"]
    run_suggestions(campaign["id"])  # the queued job, reaching a worker after the stop: it does nothing
    assert Campaign.objects.get(pk=campaign["id"]).suggestion_state == "cancelled"
    assert not Item.objects.filter(campaign_id=campaign["id"], suggestion__isnull=False).exists()
    with pytest.raises(JobCancelled):  # a running job's progress does not undo the stop: it ends there
        JobRun(SuggestionRun.objects.get(pk=campaign["id"]), every_s=0).progress(3, 10)
    assert Campaign.objects.get(pk=campaign["id"]).suggestion_state == "cancelled"
    assert AuditEvent.objects.filter(action="campaign.suggestions_stop").count() == 1
    client.force_login(annotator)
    assert next_item(client, campaign).status_code == 200  # annotating goes on


def test_agreement_with_consensus_counts_the_items_two_annotators_disagree_on(client, scientist, annotator,
                                                                            second_annotator, project, owner):
    from apps.datasets.models import Dataset
    from apps.datasets.writer import write_version

    version = write_version(dataset=Dataset.objects.create(project=project, name="Sixteen", created_by=owner),
                            records=[{"id": f"s{i}", "prompt": f"Text {i}"} for i in range(16)],
                            roles={"id": "id", "prompt": "prompt"})
    client.force_login(scientist)
    fields = [{"name": "sentiment", "type": "single_label", "labels": ["positive", "negative"]}]
    campaign = make_campaign(client, project, version, overlap=2, schema=make_schema(client, project, fields))
    # anna: positive on examples 1-8, negative on 9-16. ben agrees on 1-5 and 9-13 and says the
    # opposite on 6-8 and 14-16: 6 of 16 disagree.
    labels = {annotator: lambda p: "positive" if p < 8 else "negative",
              second_annotator: lambda p: ("positive" if p < 8 else "negative") if p % 8 < 5 else
              ("negative" if p < 8 else "positive")}
    for user, label_of in labels.items():
        client.force_login(user)
        while (response := next_item(client, campaign)).status_code == 200:
            item = response.json()
            assert submit(client, campaign, item["id"], {"sentiment": label_of(item["position"])}).status_code == 201
    client.force_login(scientist)
    quality = client.get(f"/api/campaigns/{campaign['id']}/quality/").json()
    sentiment = quality["fields"][0]
    assert sentiment["disagreements"] == 6 and sentiment["items_with_2_plus"] == 16
    # By hand: each agreed with the (shared) answer on the 10 agreed items; the 6 others have no
    # majority. 10/16 = 0.625. Cohen: p_o = 10/16, both said positive 8 times and negative 8 times,
    # p_e = (8*8 + 8*8)/256 = 0.5, kappa = (0.625 - 0.5)/(1 - 0.5) = 0.25.
    people = {p["annotator"]: p["consensus_agreement"] for p in quality["annotators"]}
    assert people == {"anna": 0.625, "ben": 0.625}
    assert sentiment["cohen_kappa"][0]["kappa"] == pytest.approx(0.25)


def classify_form(version, **changes) -> dict:
    return {"name": "Tone", "dataset_version": version.pk, "schema": "preset:classify", "labels": "",
            "overlap": 1, "lease_seconds": 600, "seed": 0, **changes}


def test_the_classify_form_takes_the_versions_labels_or_the_ones_typed_in(client, scientist, project, review_version,
                                                                         owner):
    from apps.datasets.models import Dataset
    from apps.datasets.writer import write_version

    client.force_login(scientist)
    url = f"/projects/{project.pk}/campaigns/new/"
    page = client.get(url)
    assert f'"{review_version.pk}": ["negative", "positive"]'.encode() in page.content  # where the editor starts
    assert client.post(url, classify_form(review_version)).status_code == 302
    # The version's labels (5 of each: then in alphabetical order), not positive/negative/neutral.
    labels = Campaign.objects.get().schema.fields[0]["labels"]
    assert [(label["value"], label["hotkey"]) for label in labels] == [("negative", "1"), ("positive", "2")]

    typed = client.post(url, classify_form(review_version, name="Tone 2", labels="late\n\n  early \nlost"))
    assert typed.status_code == 302
    assert [label["value"] for label in LabelSchema.objects.get(campaigns__name="Tone 2").fields[0]["labels"]] == [
        "late", "early", "lost"]

    unlabelled = write_version(dataset=Dataset.objects.create(project=project, name="Plain", created_by=owner),
                               records=[{"prompt": "hello"}], roles={"prompt": "prompt"})
    refused = client.post(url, classify_form(unlabelled, name="Tone 3"))
    assert refused.status_code == 400 and b"has no labels: add the labels" in refused.content
    twice = client.post(url, classify_form(review_version, name="Tone 4", labels="late\nlate"))
    assert twice.status_code == 400 and b"listed twice" in twice.content
    assert Campaign.objects.count() == 2


def test_every_label_gets_a_key_past_the_ninth_around_the_pages_own_and_the_forms_named_keys():
    from apps.annotation.field_types import RESERVED_KEYS
    from apps.annotation.schema import validate_schema

    fields = validate_schema([
        {"name": "topic", "type": "single_label", "labels": [f"t{i}" for i in range(30)]},
        {"name": "flag", "type": "multi_label", "labels": [{"value": "spam", "hotkey": "j"}]}])
    keys = [label["hotkey"] for label in fields[0]["labels"]]
    # 1-9, then the letters the page does not keep (not a-h, s, t, x; j is the other field's), then Shift+letter.
    assert keys == [*"123456789", *"iklmnopqruvwyz", *"IJKLMNO"]
    assert len(set(keys)) == 30 and not {key.lower() for key in keys} & RESERVED_KEYS
    assert fields[1]["labels"][0]["hotkey"] == "j"


def test_labels_past_the_single_keys_get_two_key_chords_and_a_form_too_big_to_key_is_refused():
    from apps.annotation.field_types import LABEL_KEYS
    from apps.annotation.schema import validate_schema
    from apps.core.errors import Invalid

    fields = validate_schema([
        {"name": "topic", "type": "single_label", "labels": [f"t{i}" for i in range(50)]},
        {"name": "more", "type": "multi_label", "labels": [{"value": "named", "hotkey": "0j"}, "free"]}])
    keys = [label["hotkey"] for label in fields[0]["labels"]]
    assert len(set(keys)) == 50 and keys[38] == "Z"  # 39 single keys, then chords
    assert keys[39:50] == ["01", "02", "03", "04", "05", "06", "07", "08", "09", "0i", "0k"]  # 0j is named elsewhere
    assert [label["hotkey"] for label in fields[1]["labels"]] == ["0j", "0l"]

    for bad in ("0", "-", "00", "0s", "s1", "x", "0 ", "abc"):
        with pytest.raises(Invalid) as refused:
            validate_schema([{"name": "t", "type": "single_label", "labels": [{"value": "a", "hotkey": bad}]}])
        assert refused.value.field == "fields[0].labels[0].hotkey" and "chord" in str(refused.value)

    # 20 fields of 16 labels: 320 labels, more than there are keys.
    too_many = [{"name": f"f{n}", "type": "multi_label", "labels": [f"l{i}" for i in range(16)]} for n in range(20)]
    with pytest.raises(Invalid) as refused:
        validate_schema(too_many)
    index = len(LABEL_KEYS)
    assert refused.value.field == f"fields[{index // 16}].labels[{index % 16}]"
    assert f"at most {index} labels in all" in str(refused.value)


def test_quality_is_computed_once_until_an_answer_or_the_gold_changes(
        client, scientist, annotator, second_annotator, project, review_version):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from apps.annotation import quality
    from apps.annotation.services import set_gold

    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, overlap=2, sample=1, seed=1)
    for person, sentiment in ((annotator, "positive"), (second_annotator, "negative")):
        client.force_login(person)
        item = next_item(client, campaign).json()
        assert submit(client, campaign, item["id"], answer(sentiment=sentiment)).status_code == 201
    row = Campaign.objects.select_related("schema").get(pk=campaign["id"])
    first = quality.campaign_quality(row)
    assert first["fields"][0]["disagreements"] == 1
    with CaptureQueriesContext(connection) as queries:  # a second dashboard: no pass over the answers
        assert quality.campaign_quality(row) == first
    assert len(queries) == 2 and not any("annotation_annotation\".\"values\"" in q["sql"] for q in queries)

    client.force_login(second_annotator)
    mine = Annotation.objects.get(annotator=second_annotator)
    edited = client.patch(f"/api/annotations/{mine.pk}/",
                          {"values": answer(sentiment="positive"), "revision": mine.revision},
                          content_type="application/json")
    assert edited.status_code == 200, edited.content
    assert quality.campaign_quality(row)["fields"][0]["disagreements"] == 0  # the edit is counted at once

    assert {p["gold_items"] for p in first["annotators"]} == {0}
    set_gold(user=scientist, item=Item.objects.get(pk=mine.item_id), values=answer(sentiment="negative"))
    anna = next(p for p in quality.campaign_quality(row)["annotators"] if p["annotator"] == annotator.username)
    # Three fields scored on the gold example; her sentiment is the one wrong.
    assert anna["gold_items"] == 3 and anna["gold_accuracy"] == pytest.approx(2 / 3)
