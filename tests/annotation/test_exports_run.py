"""Exports and model suggestions run by real Celery worker processes."""

import pytest

from apps.annotation.models import Annotation, Item
from apps.datasets.models import DatasetRow, DatasetVersion
from tests.annotation.fixtures import answer, make_campaign, make_schema, next_item, submit
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def ended_export(client, export_id) -> dict:
    def check():
        export = client.get(f"/api/annotation-exports/{export_id}/").json()
        return export if export["state"] in ("succeeded", "failed") else None
    return wait_for(check, timeout=60, interval=0.2, what=f"export {export_id}")


def annotate_all(client, campaign, users, choose):
    """Each user works the queue to the end; choose(user, item) gives their answer."""
    for user in users:
        client.force_login(user)
        while (response := next_item(client, campaign)).status_code == 200:
            item = response.json()
            assert submit(client, campaign, item["id"], choose(user, item)).status_code == 201


def test_resolved_answers_become_a_new_version_keeping_only_agreed_or_accepted_examples(
        client, scientist, annotator, second_annotator, project, review_version, celery_worker):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, overlap=2, sample=4, seed=3)

    def choose(user, item):  # both agree, except on the first sampled example
        label = "neutral" if item["position"] == 0 and user == annotator else "negative"
        return answer(sentiment=label, ideal=f"Improved reply {item['position']}")

    annotate_all(client, campaign, [annotator, second_annotator], choose)
    client.force_login(scientist)
    response = client.post(f"/api/campaigns/{campaign['id']}/exports/",
                           {"mode": "majority", "min_agreement": 1.0, "message": "agreed only"},
                           content_type="application/json")
    assert response.status_code == 202, response.content
    export = ended_export(client, response.json()["id"])
    assert export["state"] == "succeeded", export["error"]
    version = DatasetVersion.objects.get(pk=export["version"])
    assert version.dataset_id == review_version.dataset_id and version.parent_id == review_version.pk
    assert version.row_count == 3 and export["rows"] == 3  # the disagreement is left out
    rows = list(DatasetRow.objects.filter(version=version).order_by("position"))
    assert {r.label for r in rows} == {"negative"}
    assert rows[0].response.startswith("Improved reply") and rows[0].metadata["original_response"].startswith("Thanks")
    # Scalar metadata is text, as in any import (the canonical row rules).
    assert rows[0].metadata["annotation.helpfulness"] == "4" and rows[0].metadata["annotation.agreement"] == "1.0"

    # An adjudicated example is exported with the reviewer's answer even below the threshold.
    first = Item.objects.get(campaign_id=campaign["id"], position=0)
    client.post(f"/api/campaigns/{campaign['id']}/items/{first.pk}/adjudicate/",
                {"values": answer(sentiment="neutral")}, content_type="application/json")
    again = ended_export(client, client.post(f"/api/campaigns/{campaign['id']}/exports/", {"mode": "adjudicated"},
                                             content_type="application/json").json()["id"])
    assert again["rows"] == 1
    assert DatasetRow.objects.get(version_id=again["version"]).label == "neutral"


def test_preferences_export_as_prompt_chosen_rejected_rows_in_a_new_dataset(
        client, scientist, annotator, project, review_version, celery_worker):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, sample=3, seed=5)
    picks = iter(["A", "B", "tie"])
    annotate_all(client, campaign, [annotator], lambda user, item: answer(better=next(picks)))
    client.force_login(scientist)
    export = ended_export(client, client.post(f"/api/campaigns/{campaign['id']}/exports/",
                                              {"kind": "preferences", "new_dataset_name": "Reply preferences"},
                                              content_type="application/json").json()["id"])
    assert export["state"] == "succeeded", export["error"]
    rows = list(DatasetRow.objects.filter(version_id=export["version"]).order_by("position"))
    assert len(rows) == 2  # a tie teaches no preference
    assert rows[0].response.startswith("Thanks") and rows[0].metadata["rejected"].startswith("Noted")
    assert rows[1].response.startswith("Noted") and rows[1].metadata["rejected"].startswith("Thanks")
    assert rows[0].metadata["annotators"] == ["anna"]
    assert DatasetVersion.objects.get(pk=export["version"]).dataset.name == "Reply preferences"


def test_an_export_with_nothing_to_write_fails_clearly_and_leaves_no_version(
        client, scientist, project, review_version, celery_worker):
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version)
    versions = DatasetVersion.objects.count()
    export = ended_export(client, client.post(f"/api/campaigns/{campaign['id']}/exports/", {"mode": "accepted"},
                                              content_type="application/json").json()["id"])
    assert export["state"] == "failed" and "no example" in export["error"]
    assert DatasetVersion.objects.count() == versions


def test_model_suggestions_prefill_items_and_are_kept_beside_the_answer(
        client, scientist, annotator, project, review_version, tiny_model, inference_worker):
    client.force_login(scientist)
    schema = make_schema(client, project, [
        {"name": "sentiment", "type": "single_label", "labels": ["positive", "negative"]},
        {"name": "ideal", "type": "text", "prefill": "suggestion"}])
    campaign = make_campaign(client, project, review_version, schema=schema, sample=3,
                             suggestion_model=tiny_model.pk)
    assert campaign["suggestion_state"] == "queued"
    state = wait_for(lambda: (c := client.get(f"/api/campaigns/{campaign['id']}/").json())["suggestion_state"]
                     in ("succeeded", "failed") and c, timeout=120, what="suggestions")
    assert state["suggestion_state"] == "succeeded", state["suggestion_progress"]
    assert state["suggestion_progress"] == {"done": 3, "total": 3}
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    suggestion = item["suggestion"]
    assert suggestion["model"] == tiny_model.pk and isinstance(suggestion["values"]["ideal"], str)
    submit(client, campaign, item["id"], {"sentiment": "positive", "ideal": "A human answer"})
    annotation = Annotation.objects.get()
    assert annotation.values["ideal"] == "A human answer" and annotation.suggestion == suggestion


def test_a_trained_classifier_suggests_labels_with_probabilities_and_the_least_confident_come_first(
        client, scientist, owner, annotator, project, tiny_model, inference_worker, tmp_path):
    from tests.annotation.classifier import CLASSES, trained_classifier
    from tests.training.test_classify_jobs import labelled_version

    classifier = trained_classifier(project, owner, tiny_model, tmp_path / "classifier")
    texts = ["paris", "france", "what is the capital of paris ?", "of the capital france is what",
             "paris france", "the of is", "france paris"]
    version = labelled_version(project, owner, [(text, "city") for text in texts])
    DatasetRow.objects.filter(version=version, position=5).update(prompt="")  # no text: nothing to suggest
    client.force_login(scientist)
    schema = make_schema(client, project, [{"name": "topic", "type": "single_label", "labels": ["country", "city"]},
                                           {"name": "note", "type": "text", "required": False}])
    campaign = make_campaign(client, project, version, schema=schema, suggestion_model=classifier.pk,
                             order="uncertain_first")
    state = wait_for(lambda: (c := client.get(f"/api/campaigns/{campaign['id']}/").json())["suggestion_state"]
                     in ("succeeded", "failed") and c, timeout=120, what="suggestions")
    assert state["suggestion_state"] == "succeeded", state["suggestion_progress"]
    assert state["suggestion_progress"] == {"done": 7, "total": 7}

    items = {item.row.prompt: item for item in Item.objects.filter(campaign_id=campaign["id"]).select_related("row")}
    for text, item in items.items():
        if not text:
            assert item.suggestion == {"model": classifier.pk, "values": {}} and item.confidence is None
            continue
        suggestion = item.suggestion
        assert suggestion["model"] == classifier.pk and set(suggestion["probabilities"]) == set(CLASSES)
        assert sum(suggestion["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
        top = max(suggestion["probabilities"], key=suggestion["probabilities"].get)
        assert suggestion["values"] == {"topic": top}  # the text field gets nothing from a classifier
        assert suggestion["confidence"] == item.confidence == suggestion["probabilities"][top] > 0.5
    assert items["paris"].suggestion["values"]["topic"] == "city"
    assert items["france"].suggestion["values"]["topic"] == "country"

    client.force_login(annotator)
    handed = []
    while (response := next_item(client, campaign)).status_code == 200:
        item = response.json()
        handed.append(item["example"]["prompt"])
        assert submit(client, campaign, item["id"], {"topic": "city"}).status_code == 201
    suggested = sorted((i for i in items.values() if i.confidence is not None), key=lambda i: (i.confidence, i.position))
    assert handed == [i.row.prompt for i in suggested] + [""]  # the one without a suggestion last
