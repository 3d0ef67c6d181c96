"""The field type registry: every type has its class and its page renderer, and a new type is
its class alone (checked, measured, shown in words and exported with no other change)."""

import re
from pathlib import Path

import pytest
from django.conf import settings

from apps.annotation import services
from apps.annotation.exports import run_export
from apps.annotation.field_types import FIELD_TYPES, FieldType, fail, register, whole_number
from apps.annotation.models import AnnotationExport, Campaign
from apps.annotation.schema import validate_answer, validate_schema
from apps.core.errors import Invalid
from apps.datasets.models import DatasetRow
from tests.annotation.fixtures import make_campaign, make_schema, next_item, submit

TYPES = ("single_label", "multi_label", "text", "rating", "preference", "ranking", "spans")


def test_the_registry_holds_the_seven_types_each_with_a_page_renderer_of_its_name():
    assert sorted(FIELD_TYPES) == sorted(TYPES)
    fields_dir = Path(settings.BASE_DIR) / "static" / "js" / "annotation" / "fields"
    for name in FIELD_TYPES:
        script = (fields_dir / f"{name}.js").read_text()
        assert re.search(rf'register\("{name}",', script), f"{name}.js registers no renderer for {name}"
    assert sorted(p.stem for p in fields_dir.glob("*.js")) == sorted(TYPES)  # no renderer without a type


def test_a_registered_type_name_cannot_be_taken_twice():
    class AnotherSpans(FieldType):
        name = "spans"

    with pytest.raises(ValueError, match="registered twice"):
        register(AnotherSpans)
    assert type(FIELD_TYPES["spans"]).__name__ == "Spans"


def test_a_single_label_suggestion_is_the_label_the_reply_names_first_or_none():
    field = validate_schema([{"name": "sentiment", "type": "single_label", "labels": ["positive", "negative"]}])[0]
    single_label = FIELD_TYPES["single_label"]
    assert single_label.suggestion_question(field) == "Answer with one of: positive, negative."
    assert single_label.suggestion_from_reply(field, "Negative, not positive.") == "negative"
    assert single_label.suggestion_from_reply(field, "I cannot tell.") is None


class Stars(FieldType):
    """A test-only type: 1 to `stars` stars, measured as ordinal, read as "★★★"."""

    name = "stars"
    agreement_level = "ordinal"

    def clean_spec(self, spec, where, keys):
        return {"stars": whole_number(spec.get("stars", 5), f"{where}.stars", 2, 10)}

    def clean_answer(self, field, value, row, where):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= field["stars"]:
            raise fail(f"from 1 to {field['stars']} stars", where)
        return value

    def agreement_domain(self, field):
        return list(range(1, field["stars"] + 1))

    def in_words(self, field, value, example):
        return "★" * value


@pytest.fixture
def stars_type():
    register(Stars)
    yield FIELD_TYPES["stars"]
    del FIELD_TYPES["stars"]


def test_a_new_type_is_checked_by_its_class_alone(stars_type):
    fields = validate_schema([{"name": "quality", "type": "stars", "stars": 4}])
    assert fields == [{"name": "quality", "type": "stars", "required": True, "description": "", "stars": 4}]
    with pytest.raises(Invalid) as refused:
        validate_schema([{"name": "quality", "type": "stars", "stars": 40}])
    assert refused.value.field == "fields[0].stars"
    assert validate_answer(fields, {"quality": 3}, {}) == {"quality": 3}
    with pytest.raises(Invalid) as refused:
        validate_answer(fields, {"quality": 5}, {})
    assert refused.value.field == "values.quality"


@pytest.mark.django_db
def test_a_new_type_is_answered_measured_reviewed_and_exported_with_no_other_change(
        stars_type, client, scientist, annotator, second_annotator, project, review_version):
    client.force_login(scientist)
    schema = make_schema(client, project, [{"name": "quality", "type": "stars", "stars": 4}])
    campaign = make_campaign(client, project, review_version, schema=schema, overlap=2, sample=2, seed=1)
    for user, stars in ((annotator, 3), (second_annotator, 3)):
        client.force_login(user)
        while (response := next_item(client, campaign)).status_code == 200:
            item = response.json()
            refused = submit(client, campaign, item["id"], {"quality": 9})
            assert refused.status_code == 400 and refused.json()["field"] == "values.quality"
            assert submit(client, campaign, item["id"], {"quality": stars}).status_code == 201

    client.force_login(scientist)
    quality = client.get(f"/api/campaigns/{campaign['id']}/quality/").json()
    assert [(f["field"], f["level"], f["items_with_2_plus"]) for f in quality["fields"]] == [("quality", "ordinal", 2)]
    review = client.get(f"/api/campaigns/{campaign['id']}/review/").json()["results"]
    assert {a["in_words"]["quality"] for item in review for a in item["annotations"]} == {"★★★"}

    export = services.export_start(user=scientist, campaign=Campaign.objects.get(pk=campaign["id"]))
    run_export(export.pk)  # in this process, where the test type is registered
    export.refresh_from_db()
    assert export.state == AnnotationExport.State.SUCCEEDED, export.error
    rows = DatasetRow.objects.filter(version=export.version)
    assert rows.count() == 2 and {row.metadata["annotation.quality"] for row in rows} == {"3"}
