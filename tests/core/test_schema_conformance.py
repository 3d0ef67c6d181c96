"""Real API responses validate against the OpenAPI schema generated from the code: a field the
schema calls required is present, one it does not call nullable is never null. Each response is
fetched from a real request and checked with jsonschema against its operation's 2xx schema."""

import copy

import jsonschema
import pytest
from drf_spectacular.generators import SchemaGenerator

from apps.datasets.models import DeriveJob
from apps.projects import services as project_services
from tests.training.fixtures import make_job, make_version

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def openapi():
    return SchemaGenerator().get_schema(request=None, public=True)


def _json_schema(node):
    """OpenAPI 3.0 to JSON Schema: `nullable: true` becomes a null alternative."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _json_schema(value) for key, value in node.items() if key not in ("readOnly", "writeOnly")}
    if node.pop("nullable", False):
        return {"anyOf": [node, {"type": "null"}]}
    return node


def check(openapi, method: str, path: str, response) -> None:
    assert 200 <= response.status_code < 300, (path, response.status_code, response.content[:300])
    operation = openapi["paths"][_template(openapi, path)][method]
    content = operation["responses"][str(response.status_code)]["content"]["application/json"]["schema"]
    document = _json_schema({"components": copy.deepcopy(openapi["components"]), **content})
    jsonschema.validate(response.json(), document)


def _template(openapi, path: str) -> str:
    parts = path.strip("/").split("/")
    for template in openapi["paths"]:
        pieces = template.strip("/").split("/")
        if len(pieces) == len(parts) and all(p == q or (p.startswith("{") and q.isdigit())
                                             for p, q in zip(pieces, parts)):
            return template
    raise AssertionError(f"no schema path for {path}")


def test_project_detail_update_and_archive_match_the_schema(client, owner, project, openapi):
    client.force_login(owner)
    check(openapi, "get", f"/api/projects/{project.pk}/", client.get(f"/api/projects/{project.pk}/"))
    check(openapi, "patch", f"/api/projects/{project.pk}/", client.patch(
        f"/api/projects/{project.pk}/", {"description": "d"}, content_type="application/json"))
    check(openapi, "get", "/api/projects/", client.get("/api/projects/"))


def test_a_first_version_a_job_without_parent_or_adapter_and_a_system_audit_event_match(client, owner, project,
                                                                                       openapi):
    version = make_version(project, owner)
    job = make_job(project, owner, state="queued")
    project_services.project_update(user=owner, project=project, description="audited")
    from apps.projects.models import AuditEvent

    AuditEvent.objects.filter(project=project).update(actor=None)  # as a system action records it
    DeriveJob.objects.create(parent=version, kind="pii_scan", created_by=owner)
    client.force_login(owner)
    for path in (f"/api/datasets/{version.dataset_id}/versions/{version.number}/",
                 f"/api/datasets/{version.dataset_id}/versions/", f"/api/jobs/{job.pk}/",
                 f"/api/projects/{project.pk}/jobs/", f"/api/projects/{project.pk}/audit/"):
        check(openapi, "get", path, client.get(path))
