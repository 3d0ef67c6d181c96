"""Every paginated list of the API, found in the OpenAPI schema, answers a limit or offset the
database cannot hold (or that is no number) with a 400 naming the parameter, never a 500."""

import pytest
from drf_spectacular.generators import SchemaGenerator

from apps.datasets.models import Dataset
from tests.training.fixtures import make_version

pytestmark = pytest.mark.django_db


def paginated_project_lists() -> list[str]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    found = []
    for path, operations in schema["paths"].items():
        params = {p["name"] for p in (operations.get("get") or {}).get("parameters", [])}
        path_params = {p["name"] for p in params_of(operations.get("get")) if p["in"] == "path"}
        if "limit" in params and path_params <= {"project_id"}:
            found.append(path)
    return found


def params_of(operation) -> list[dict]:
    return (operation or {}).get("parameters", [])


def test_the_schema_lists_the_paginated_lists_this_test_walks():
    lists = paginated_project_lists()
    assert "/api/projects/" in lists and "/api/projects/{project_id}/datasets/" in lists and len(lists) >= 5


@pytest.mark.parametrize("query, field", [
    ("limit=9223372036854775808", "limit"), ("limit=99999999999999999999999", "limit"), ("limit=-1", "limit"),
    ("limit=ten", "limit"), ("offset=18446744073709551616", "offset"), ("offset=-5", "offset"), ("offset=1e3", "offset"),
])
def test_a_limit_or_offset_out_of_range_is_a_400_naming_it(client, owner, project, query, field):
    client.force_login(owner)
    for path in paginated_project_lists():
        response = client.get(path.replace("{project_id}", str(project.pk)) + "?" + query)
        assert response.status_code == 400, (path, response.status_code, response.content[:200])
        assert response.json()["field"] == field, path


def test_a_huge_limit_is_capped_and_an_in_range_one_pages(client, owner, project):
    for name in ("one", "two", "three"):
        Dataset.objects.create(project=project, name=name, created_by=owner)
    client.force_login(owner)
    url = f"/api/projects/{project.pk}/datasets/"
    assert len(client.get(f"{url}?limit=2").json()["results"]) == 2
    assert len(client.get(f"{url}?limit=2&offset=2").json()["results"]) == 1
    assert len(client.get(f"{url}?limit=9223372036854775807").json()["results"]) == 3


@pytest.mark.parametrize("after", ["9223372036854775808", "-1", "x"])
def test_a_row_page_after_a_position_the_database_cannot_hold_is_a_400_naming_after(client, owner, project, after):
    version = make_version(project, owner)
    client.force_login(owner)
    response = client.get(f"/api/datasets/{version.dataset_id}/versions/{version.number}/rows/?after={after}")
    assert response.status_code == 400
    assert response.json()["field"] == "after"
    assert client.get(f"/api/datasets/{version.dataset_id}/versions/{version.number}/rows/?after=0").status_code == 200
