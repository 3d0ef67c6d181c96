"""A small review dataset and helpers to drive campaigns through the API."""

import uuid

import pytest

from apps.datasets.models import Dataset
from apps.datasets.writer import write_version

SCHEMA_FIELDS = [
    {"name": "sentiment", "type": "single_label", "labels": ["positive", "negative", "neutral"]},
    {"name": "helpfulness", "type": "rating", "min": 1, "max": 5,
     "description": "How well the response answers", "scale": {"1": "useless", "5": "perfect"}},
    {"name": "better", "type": "preference", "candidates": ["response", "metadata.response_b"]},
    {"name": "ideal", "type": "text", "prefill": "response", "max_length": 2000, "required": False},
    {"name": "topics", "type": "multi_label", "labels": [{"value": "billing", "hotkey": "k"},
                                                          {"value": "shipping", "hotkey": "m"}], "required": False},
    {"name": "pii", "type": "spans", "labels": ["name", "email"], "source": "prompt", "required": False},
]


def review_records(count: int = 10) -> list[dict]:
    return [{"id": f"r{i}", "prompt": f"Review {i}: the parcel from Jo arrived {'late' if i % 2 else 'early'}",
             "response": f"Thanks for review {i}!", "response_b": f"Noted ({i}).",
             "label": "negative" if i % 2 else "positive", "shop": "north" if i < 5 else "south"}
            for i in range(count)]


@pytest.fixture
def review_version(project, owner):
    dataset = Dataset.objects.create(project=project, name="Reviews", created_by=owner)
    return write_version(dataset=dataset, records=review_records(), author=owner, message="seed",
                         roles={"id": "id", "prompt": "prompt", "response": "response", "label": "label"})


@pytest.fixture
def second_annotator(project, owner):
    from tests.conftest import _member

    return _member(project, "annotator", "ben")


def answer(**changes) -> dict:
    values = {"sentiment": "positive", "helpfulness": 4, "better": "A"}
    values.update(changes)
    return {key: value for key, value in values.items() if value is not None}


def make_schema(client, project, fields=None):
    response = client.post(f"/api/projects/{project.pk}/label-schemas/",
                           {"name": "Review quality", "fields": fields or SCHEMA_FIELDS}, content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()


def make_campaign(client, project, version, **options):
    schema = options.pop("schema", None) or make_schema(client, project)
    body = {"name": "Support replies", "dataset_version": version.pk, "schema": schema["id"], **options}
    response = client.post(f"/api/projects/{project.pk}/campaigns/", body, content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()


def next_item(client, campaign):
    return client.post(f"/api/campaigns/{campaign['id']}/next/", content_type="application/json")


def submit(client, campaign, item_id, values, client_id=None, **extra):
    body = {"client_id": str(client_id or uuid.uuid4()), "values": values, **extra}
    return client.post(f"/api/campaigns/{campaign['id']}/items/{item_id}/submit/", body,
                       content_type="application/json")
