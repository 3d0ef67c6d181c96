"""The review queue's disagreement filter is counted by the database; it must pick exactly the
examples the agreement numbers call disagreements (a pass over every answer in Python), over
every field type agreement is measured on, with skipped answers, unanswered optional fields and
adjudicated examples."""

import random
import uuid

import pytest

from apps.annotation import agreement, quality, services
from apps.annotation.models import Annotation, Item
from tests.conftest import _member

pytestmark = pytest.mark.django_db

FIELDS = [{"name": "sentiment", "type": "single_label", "labels": ["positive", "negative", "neutral"]},
          {"name": "helpfulness", "type": "rating", "min": 1, "max": 5},
          {"name": "better", "type": "preference", "candidates": ["response", "metadata.response_b"]},
          {"name": "topics", "type": "multi_label", "labels": ["billing", "shipping", "returns"], "required": False},
          {"name": "ideal", "type": "text", "required": False}]


def test_the_database_finds_exactly_the_disagreements_the_numbers_count(project, owner, review_version):
    schema = services.schema_create(user=owner, project=project, name="Review", fields=FIELDS)
    campaign = services.campaign_create(user=owner, project=project, name="Replies", overlap=3,
                                        dataset_version_id=review_version.pk, schema_id=schema.pk)
    people = [_member(project, "annotator", f"annotator-{n}") for n in range(3)]
    rng = random.Random(5)
    answers = []
    for item in Item.objects.filter(campaign=campaign):
        for person in people[:rng.randint(1, 3)]:
            values = {"sentiment": rng.choice(["positive", "positive", "negative"]),
                      "helpfulness": rng.choice([4, 4, 5]), "better": rng.choice(["A", "A", "B"]),
                      "ideal": f"free text {rng.random()}"}  # text is not compared: never a disagreement
            if rng.random() < 0.7:  # an optional field left out by some
                values["topics"] = rng.choice([["billing"], ["billing"], ["billing", "shipping"]])
            answers.append(Annotation(item=item, annotator=person, schema=schema, client_id=uuid.uuid4(),
                                      values=values, skipped=rng.random() < 0.1))
    Annotation.objects.bulk_create(answers)
    units = quality.field_units(FIELDS, quality.answer_rows(campaign))
    disagreements = sorted({item for field in units.values() for item in agreement.disagreements(field)})
    settled = disagreements[0]  # adjudicated: no longer waiting for a reviewer
    Item.objects.filter(pk=settled).update(adjudicated_values={"sentiment": "positive"})
    expected = disagreements[1:]
    assert 3 <= len(expected) < Item.objects.filter(campaign=campaign).count()  # a real mix, not all or none
    assert quality.disagreement_item_ids(campaign) == expected
