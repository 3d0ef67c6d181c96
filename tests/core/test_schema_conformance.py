"""Real API responses validate against the OpenAPI schema generated from the code: a field the
schema calls required is present, one it does not call nullable is never null. Each response is
fetched from a real request and checked with jsonschema against its operation's 2xx schema."""

import copy

import jsonschema
import pytest
from drf_spectacular.generators import SchemaGenerator

from apps.datasets.models import DeriveJob
from apps.projects import services as project_services
from tests.annotation.fixtures import review_version  # noqa: F401 (a fixture)
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


def test_every_list_page_matches_the_schema_of_its_envelope(client, owner, project, review_version,  # noqa: F811
                                                          openapi):
    from apps.datasets.models import ExportJob
    from apps.training.models import MetricPoint
    from tests.annotation.fixtures import answer, make_campaign, next_item, submit

    version = make_version(project, owner)
    job = make_job(project, owner)
    MetricPoint.objects.create(job=job, kind="train", step=1, values={"loss": 1.0})
    MetricPoint.objects.create(job=job, kind="train", step=2, values={"loss": 0.5})
    ExportJob.objects.create(version=version, format="jsonl", created_by=owner)
    client.force_login(owner)
    campaign = make_campaign(client, project, review_version)
    for _ in range(2):
        assert submit(client, campaign, next_item(client, campaign).json()["id"], answer()).status_code == 201
    client.post(f"/api/campaigns/{campaign['id']}/exports/", {"mode": "majority"}, content_type="application/json")
    rows = f"/api/datasets/{version.dataset_id}/versions/{version.number}/rows/"
    for path in (rows, f"{rows}?after=1", f"/api/jobs/{job.pk}/metrics/", f"/api/projects/{project.pk}/audit/",
                 f"/api/campaigns/{campaign['id']}/mine/", f"/api/campaigns/{campaign['id']}/review/",
                 f"/api/campaigns/{campaign['id']}/exports/", f"/api/projects/{project.pk}/campaigns/",
                 f"/api/projects/{project.pk}/label-schemas/",
                 f"/api/datasets/{version.dataset_id}/versions/{version.number}/exports/"):
        first = client.get(path + ("&" if "?" in path else "?") + "limit=1")
        assert first.json()["results"], path
        check(openapi, "get", path.split("?")[0], first)
        if first.json()["next"]:
            check(openapi, "get", path.split("?")[0], client.get(first.json()["next"]))


def test_the_openai_compatible_api_is_documented_and_answers_as_documented(client, owner, project, openapi):
    from apps.accounts import services as account_services
    from apps.registry.models import RegisteredModel

    model = RegisteredModel.objects.create(project=project, name="Support Bot v1.5", format="hf_dir",
                                           source_path="/x", weights_path="/x", status="ready", info={})
    _, raw = account_services.token_create(user=owner, name="api", permissions=["project.view", "model.view"],
                                           project=project)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert {"/v1/models", "/v1/models/{model_id}", "/v1/chat/completions", "/v1/completions"} <= set(openapi["paths"])
    assert openapi["paths"]["/v1/chat/completions"]["post"]["tags"] == ["openai"]
    listing = client.get("/v1/models", **auth)
    check(openapi, "get", "/v1/models", listing)
    assert [m["id"] for m in listing.json()["data"]] == ["support-bot-v1.5"]
    check(openapi, "get", f"/v1/models/{model.pk}", client.get(f"/v1/models/{model.pk}", **auth))
    missing = client.get("/v1/models/gpt-4o", **auth)
    assert missing.status_code == 404
    operation = openapi["paths"]["/v1/models/{model_id}"]["get"]
    schema = operation["responses"]["404"]["content"]["application/json"]["schema"]
    jsonschema.validate(missing.json(), _json_schema({"components": copy.deepcopy(openapi["components"]), **schema}))
    assert missing.json()["error"]["code"] == "model_not_found"
