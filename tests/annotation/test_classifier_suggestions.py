"""A classifier adapter as a campaign's suggestion model, and the queue that hands out its least
confident suggestions first (active learning): the checks made when such a campaign is created, and
the order "next" follows on the test database (SQLite here, PostgreSQL with DATABASE_URL)."""

import pytest

from apps.annotation.models import Campaign, Item, SuggestionRun
from tests.annotation.classifier import classifier_stub
from tests.annotation.fixtures import answer, make_campaign, make_schema, next_item, submit

pytestmark = pytest.mark.django_db

SENTIMENTS = ["positive", "negative", "neutral"]  # the review schema's single label (tests/annotation/fixtures.py)


def create(client, project, version, **options):
    body = {"name": "Suggested", "dataset_version": version.pk, **options}
    return client.post(f"/api/projects/{project.pk}/campaigns/", body, content_type="application/json")


def test_a_classifier_whose_labels_match_a_single_label_field_is_taken_in_any_order(
        client, scientist, owner, project, review_version, tiny_model):
    classifier = classifier_stub(project, owner, tiny_model, ["neutral", "positive", "negative"])
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, suggestion_model=classifier.pk, order="uncertain_first")
    assert campaign["suggestion_model"] == classifier.pk and campaign["order"] == "uncertain_first"
    assert campaign["suggestion_state"] == "queued" and SuggestionRun.objects.filter(pk=campaign["id"]).exists()
    assert make_campaign(client, project, review_version)["order"] == "default"


@pytest.mark.parametrize("fields, classes, words", [
    # The labels that differ are named, on each side.
    ([{"name": "sentiment", "type": "single_label", "labels": SENTIMENTS}], ["positive", "negative", "mixed"],
     "the classifier has 'mixed', which 'sentiment' lacks; 'sentiment' has 'neutral', which the classifier lacks"),
    ([{"name": "sentiment", "type": "single_label", "labels": SENTIMENTS}], ["positive", "negative"],
     "'sentiment' has 'neutral', which the classifier lacks"),
    ([{"name": "score", "type": "rating", "min": 1, "max": 5}], ["positive", "negative"],
     "this form has no single-label field"),
    ([{"name": "sentiment", "type": "single_label", "labels": ["positive", "negative"]},
      {"name": "ideal", "type": "text", "prefill": "suggestion"}], ["positive", "negative"],
     "writes no text, and this form starts 'ideal' from the model's response"),
])
def test_a_classifier_that_cannot_fill_the_form_is_refused_naming_the_labels(
        client, scientist, owner, project, review_version, tiny_model, fields, classes, words):
    classifier = classifier_stub(project, owner, tiny_model, classes)
    client.force_login(scientist)
    schema = make_schema(client, project, fields)
    response = create(client, project, review_version, schema=schema["id"], suggestion_model=classifier.pk)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "suggestion_model" and words in response.json()["detail"], response.json()
    assert not Campaign.objects.exists() and not Item.objects.exists() and not SuggestionRun.objects.exists()


@pytest.mark.parametrize("order, model, field, words", [
    ("random", "classifier", "order", "not a valid choice"),
    (7, "classifier", "order", "not a valid choice"),
    ([], "classifier", "order", "not a valid choice"),
    ("x" * 10_000, "classifier", "order", "not a valid choice"),
    ("uncertain_first", None, "order", "choose a classifier"),
    ("uncertain_first", "generative", "order", "choose a classifier"),
    ("default", "elsewhere", "suggestion_model", "no such model in this project"),
    ("default", "a' OR 1=1 --", "suggestion_model", "A valid integer is required"),
])
def test_bad_ordering_or_suggestion_model_is_refused_naming_the_field(
        client, scientist, owner, project, other_project, review_version, tiny_model, order, model, field, words):
    models = {"classifier": classifier_stub(project, owner, tiny_model, SENTIMENTS).pk, "generative": tiny_model.pk,
              "elsewhere": classifier_stub(other_project, owner, tiny_model, SENTIMENTS).pk, None: None}
    client.force_login(scientist)
    schema = make_schema(client, project)
    response = create(client, project, review_version, schema=schema["id"], order=order,
                      suggestion_model=models.get(model, model))
    assert response.status_code == 400, response.content
    body = response.json()
    assert words in str(body.get("detail", body.get(field))) and (body.get("field") == field or field in body), body
    assert not Campaign.objects.exists() and not Item.objects.exists()


def test_only_campaign_managers_pick_a_classifier_and_only_of_models_they_see(
        client, scientist, annotator, viewer, outsider, owner, project, review_version, tiny_model):
    from apps.projects.models import Membership, Role
    from apps.projects.policy import forget_cached_permissions

    classifier = classifier_stub(project, owner, tiny_model, SENTIMENTS)
    client.force_login(scientist)
    schema = make_schema(client, project)
    body = {"schema": schema["id"], "suggestion_model": classifier.pk, "order": "uncertain_first"}
    for user, status in ((annotator, 403), (viewer, 403), (outsider, 404)):
        client.force_login(user)
        assert create(client, project, review_version, **body).status_code == status, user
    # A manager whose role does not show models may not run one over the project's examples.
    blind = Role.objects.create(project=project, name="Campaigns only",
                                permissions=["project.view", "dataset.view", "campaign.manage"])
    Membership.objects.filter(project=project, user=scientist).update(role="", custom_role=blind)
    forget_cached_permissions(scientist)
    client.force_login(scientist)
    response = create(client, project, review_version, **body)
    assert response.status_code == 400 and response.json()["field"] == "suggestion_model", response.content
    assert not Campaign.objects.exists()


def suggest(campaign: dict, confidences: dict[int, float | None]) -> None:
    """What a classifier's finished run leaves on the items at these positions (None: no suggestion)."""
    for position, confidence in confidences.items():
        probabilities = {"positive": confidence, "negative": round(1 - confidence, 6), "neutral": 0.0}
        Item.objects.filter(campaign_id=campaign["id"], position=position).update(
            confidence=confidence, suggestion={"model": None, "values": {"sentiment": "positive"},
                                               "probabilities": probabilities, "confidence": confidence})


def test_least_confident_suggestions_are_handed_out_first_then_the_rest_in_order(
        client, scientist, owner, annotator, second_annotator, project, review_version, tiny_model):
    classifier = classifier_stub(project, owner, tiny_model, SENTIMENTS)
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, suggestion_model=classifier.pk, order="uncertain_first")
    in_order = make_campaign(client, project, review_version, suggestion_model=classifier.pk)
    confidences = {0: 0.99, 1: 0.51, 2: 0.75, 3: 0.62, 5: 0.75, 8: 0.97}  # 4, 6, 7, 9: not suggested yet
    suggest(campaign, confidences)
    suggest(in_order, confidences)

    client.force_login(annotator)
    first = next_item(client, campaign).json()
    assert first["position"] == 1 and first["suggestion"]["confidence"] == 0.51
    client.force_login(second_annotator)  # the lease holds: the next least confident goes to another annotator
    assert next_item(client, campaign).json()["position"] == 3
    client.force_login(annotator)
    assert next_item(client, campaign).json()["position"] == 1  # my live lease comes back to me
    handed = []
    while (response := next_item(client, campaign)).status_code == 200:
        item = response.json()
        handed.append(item["position"])
        assert submit(client, campaign, item["id"], answer()).status_code == 201
    # Ties (0.75) by position; items without a suggestion last, in order; 3 stays leased to ben.
    assert handed == [1, 2, 5, 8, 0, 4, 6, 7, 9]

    handed = []
    while (response := next_item(client, in_order)).status_code == 200:
        handed.append(response.json()["position"])
        assert submit(client, in_order, response.json()["id"], answer()).status_code == 201
    assert handed == list(range(10))  # the default order ignores confidence


def test_with_overlap_two_fewest_answers_still_come_before_confidence(
        client, scientist, owner, annotator, second_annotator, project, review_version, tiny_model):
    classifier = classifier_stub(project, owner, tiny_model, SENTIMENTS)
    client.force_login(scientist)
    campaign = make_campaign(client, project, review_version, suggestion_model=classifier.pk,
                             order="uncertain_first", overlap=2, sample=3, seed=0)
    suggest(campaign, {0: 0.9, 1: 0.6, 2: 0.8})
    client.force_login(annotator)
    item = next_item(client, campaign).json()
    assert item["position"] == 1
    assert submit(client, campaign, item["id"], answer()).status_code == 201
    client.force_login(second_annotator)
    # Item 1 has one answer; 2 and 0 have none: they come first, least confident first.
    assert [next_item(client, campaign).json()["position"]] == [2]
    assert submit(client, campaign, Item.objects.get(campaign_id=campaign["id"], position=2).pk,
                  answer()).status_code == 201
    assert next_item(client, campaign).json()["position"] == 0
