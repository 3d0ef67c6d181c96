import pytest
import yaml

pytestmark = pytest.mark.django_db


def test_the_openapi_schema_is_generated_from_the_code(client, viewer):
    client.force_login(viewer)
    response = client.get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert schema["info"]["title"] == "Workbench API"
    assert "/api/projects/{project_id}/" in schema["paths"]
    assert set(schema["paths"]["/api/projects/{project_id}/"]) >= {"get", "patch"}
