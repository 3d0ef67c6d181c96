"""Every list of the API answers one envelope, `{"results": [...], "next": URL or null}`, found
from the OpenAPI schema so a new list is walked too. `limit` is capped everywhere; a limit, offset
or `after` the database cannot hold, and a cursor the list did not give, are a 400 naming the
parameter, never a 500. Keyset lists walked page by page give every item exactly once, in order,
even when items are added between pages."""

import base64
import json

import pytest
from drf_spectacular.generators import SchemaGenerator

from apps.core.pagination import MAX_PAGE_SIZE
from apps.datasets.models import Dataset, DatasetRow, ExportJob
from apps.projects.audit import audit_record
from apps.providers.models import AllowedNetwork, Provider, ProviderEnablement, ProviderModel
from apps.registry.models import CatalogueModel, ModelAlias, ModelExport, RegisteredModel
from apps.serving.models import Capture
from apps.training.models import MetricPoint
from tests.annotation.fixtures import make_campaign, review_version  # noqa: F401 (a fixture)
from tests.training.fixtures import make_job, make_version

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


def list_operations(schema) -> dict[str, set[str]]:
    """Each list's path template and its query parameters."""
    found = {}
    for path, operations in schema["paths"].items():
        params = {p["name"] for p in (operations.get("get") or {}).get("parameters", []) if p["in"] == "query"}
        if "limit" in params:
            found[path] = params
    return found


@pytest.fixture
def world(client, owner, project, review_version):  # noqa: F811 (the fixture imported above)
    """One of everything a list lists, and the id that fills each path parameter. The owner is
    site staff too, for the operators' lists (monitoring alerts)."""
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    client.force_login(owner)
    version = make_version(project, owner)
    job = make_job(project, owner)
    MetricPoint.objects.create(job=job, kind="train", step=1, values={"loss": 1.0})
    campaign = make_campaign(client, project, review_version)
    provider = Provider.objects.create(name="Outside", base_url="https://models.example/v1", created_by=owner)
    ProviderModel.objects.create(provider=provider, name="big-model")
    ProviderEnablement.objects.create(provider=provider, project=project, enabled_by=owner)
    AllowedNetwork.objects.create(network="10.0.0.0/8", created_by=owner)
    # A catalogue model enabled in the project, an adapter of it and an alias (the model lists).
    entry = CatalogueModel.objects.create(name="Catalogued", format="hf_dir", source_path="/c", status="ready")
    base = RegisteredModel.objects.create(project=project, name="Catalogued", format="hf_dir", source_path="/c",
                                          status="ready", catalogue=entry, info={})
    adapter = RegisteredModel.objects.create(project=project, name="Tuned", format="peft", kind="adapter",
                                             base_model=base, source_path="/a", status="ready", info={})
    alias = ModelAlias.objects.create(project=project, model=adapter, version=adapter, name="production")
    Capture.objects.create(project=project, alias=alias, version=adapter, completion_id="chatcmpl-1", messages=[],
                           response="")  # the alias's captured traffic lists
    ModelExport.objects.create(model=adapter, format="gguf-f16", state="succeeded")  # the model's exports list
    return {"project_id": project.pk, "dataset_id": version.dataset_id, "number": version.number,
            "job_id": job.pk, "campaign_id": campaign["id"], "provider_id": provider.pk, "model_id": adapter.pk,
            "alias": alias.name}


def lists(schema, world) -> dict[str, set[str]]:
    urls = {}
    for path, params in list_operations(schema).items():
        url = path
        for name, value in world.items():
            url = url.replace("{" + name + "}", str(value))
        assert "{" not in url, f"add the id for {url} to the world fixture"
        urls[url] = params
    return urls


def cursor(values) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


def walk(client, url: str) -> list[list[dict]]:
    """Every page, following `next` from `url`."""
    pages = []
    while url:
        response = client.get(url)
        assert response.status_code == 200, (url, response.content[:300])
        pages.append(response.json()["results"])
        url = response.json()["next"]
    return pages


def test_no_list_answers_a_bare_array(schema):
    for path, operations in schema["paths"].items():
        ok = (operations.get("get") or {}).get("responses", {}).get("200", {})
        body = ok.get("content", {}).get("application/json", {}).get("schema", {})
        assert body.get("type") != "array", path


def test_the_schema_describes_both_kinds_of_list(schema):
    found = list_operations(schema)
    keyset = {path for path, params in found.items() if "cursor" in params}
    assert {"/api/datasets/{dataset_id}/versions/{number}/rows/", "/api/jobs/{job_id}/metrics/",
            "/api/projects/{project_id}/audit/", "/api/campaigns/{campaign_id}/review/"} <= keyset
    assert all("offset" in params for path, params in found.items() if path not in keyset)
    assert "/api/projects/" in found and len(found) - len(keyset) >= 10
    rows = schema["components"]["schemas"]["PaginatedRowList"]
    assert rows["required"] == ["next", "results"]
    rows_params = schema["paths"]["/api/datasets/{dataset_id}/versions/{number}/rows/"]["get"]["parameters"]
    assert next(p for p in rows_params if p["name"] == "after")["deprecated"] is True


def test_every_list_answers_the_envelope(client, schema, world):
    for url, params in lists(schema, world).items():
        body = client.get(url).json()
        assert isinstance(body["results"], list) and "next" in body, url
        assert ("count" in body) == ("offset" in params), url


@pytest.mark.parametrize("query", ["limit=9223372036854775808", "limit=99999999999999999999999", "limit=-1",
                                   "limit=0", "limit=ten", "limit=1.5"])
def test_a_limit_out_of_range_is_a_400_naming_it_on_every_list(client, schema, world, query):
    for url in lists(schema, world):
        response = client.get(f"{url}?{query}")
        assert response.status_code == 400, (url, response.status_code, response.content[:200])
        assert response.json()["field"] == "limit", url


@pytest.mark.parametrize("query", ["offset=18446744073709551616", "offset=-5", "offset=1e3"])
def test_an_offset_out_of_range_is_a_400_naming_it(client, schema, world, query):
    for url, params in lists(schema, world).items():
        if "offset" in params:
            response = client.get(f"{url}?{query}")
            assert response.status_code == 400 and response.json()["field"] == "offset", url


@pytest.mark.parametrize("value", ["!!!", "bm90IGpzb24", cursor({"a": 1}), cursor([]), cursor([2**63, 2**63]),
                                   cursor([1.5, "x"]), cursor(["x", "y"]), cursor([None, None]),
                                   cursor([1, 2, 3]), cursor([-(2**63) - 1, 0])])
def test_a_cursor_the_list_did_not_give_is_a_400_naming_it(client, schema, world, value):
    for url, params in lists(schema, world).items():
        if "cursor" in params:
            response = client.get(url, {"cursor": value})
            assert response.status_code == 400, (url, value, response.content[:200])
            assert response.json()["field"] == "cursor", url


def test_a_huge_limit_is_capped(client, owner, project):
    version = make_version(project, owner)
    DatasetRow.objects.bulk_create(DatasetRow(version=version, position=100 + i, row_hash=f"h{i}", prompt=f"p{i}",
                                              response="r", metadata={}) for i in range(MAX_PAGE_SIZE))
    client.force_login(owner)
    url = f"/api/datasets/{version.dataset_id}/versions/{version.number}/rows/"
    page = client.get(url, {"limit": 2**63 - 1}).json()
    assert len(page["results"]) == MAX_PAGE_SIZE and page["next"]
    for name in ("one", "two", "three"):
        Dataset.objects.create(project=project, name=name, created_by=owner)
    assert len(client.get(f"/api/projects/{project.pk}/datasets/?limit=9223372036854775807").json()["results"]) == 4


def test_a_limit_offset_list_walks_every_item_once_in_order(client, owner, project):
    for name in ("e", "d", "c", "b", "a"):
        Dataset.objects.create(project=project, name=name, created_by=owner)
    client.force_login(owner)
    pages = walk(client, f"/api/projects/{project.pk}/datasets/?limit=2")
    assert [[d["name"] for d in page] for page in pages] == [["a", "b"], ["c", "d"], ["e"]]


def test_rows_walk_every_row_once_in_order_by_cursor_and_by_the_older_after(client, owner, project):
    version = make_version(project, owner)
    client.force_login(owner)
    url = f"/api/datasets/{version.dataset_id}/versions/{version.number}/rows/"
    train = list(DatasetRow.objects.filter(version=version, split="train").values_list("position", flat=True))
    pages = walk(client, f"{url}?limit=5&split=train")
    assert len(pages) == -(-len(train) // 5) > 2 and all(len(page) == 5 for page in pages[:-1])
    assert [r["position"] for page in pages for r in page] == sorted(train)

    # The older clients' way, for one release: `after` = the last position, `next_after` says it.
    first = client.get(url, {"limit": 3}).json()
    assert first["next_after"] == 2 and "after" not in first["next"] and "cursor=" in first["next"]
    second = client.get(url, {"limit": 3, "after": first["next_after"]}).json()
    assert [r["position"] for r in second["results"]] == [3, 4, 5]
    assert client.get(second["next"]).json()["results"][0]["position"] == 6


def test_metrics_walk_every_point_once_in_order_while_the_job_reports_more(client, owner, project):
    job = make_job(project, owner)
    step = 0

    def report(count):
        nonlocal step
        for _ in range(count):
            step += 1
            MetricPoint.objects.create(job=job, kind="train", step=step, values={"loss": 1 / step})
            if step % 2 == 0:
                MetricPoint.objects.create(job=job, kind="eval", step=step, values={"eval_loss": 1 / step})

    report(3)
    client.force_login(owner)
    seen, url = [], f"/api/jobs/{job.pk}/metrics/?limit=2"
    while url:
        page = client.get(url).json()
        seen += [(p["step"], p["kind"]) for p in page["results"]]
        url = page["next"]
        if step < 9:
            report(2)  # the job goes on between pages
    expected = [(s, k) for s in range(1, step + 1) for k in ("eval", "train") if k == "train" or s % 2 == 0]
    assert seen == expected

    # `after_step`, the older clients' way, still gives only newer points.
    newer = client.get(f"/api/jobs/{job.pk}/metrics/", {"after_step": 7, "kind": "train"}).json()["results"]
    assert [p["step"] for p in newer] == [8, 9]
    refused = client.get(f"/api/jobs/{job.pk}/metrics/", {"after_step": 2**63})
    assert refused.status_code == 400 and refused.json()["field"] == "after_step"


def test_the_audit_log_walks_back_in_time_once_while_events_are_added(client, owner, project):
    for i in range(5):
        audit_record(actor=owner, action=f"test.old{i}", project=project)
    client.force_login(owner)
    before = [e["id"] for e in client.get(f"/api/projects/{project.pk}/audit/?limit=500").json()["results"]]
    seen, url = [], f"/api/projects/{project.pk}/audit/?limit=2&action=test."
    while url:
        page = client.get(url).json()
        seen += [e["action"] for e in page["results"]]
        url = page["next"]
        audit_record(actor=owner, action="test.new", project=project)  # newer: ahead of the cursor
    assert seen == [f"test.old{i}" for i in reversed(range(5))]
    assert len(before) >= 5


def test_exports_walk_newest_first_once_while_exports_are_started(client, owner, project):
    version = make_version(project, owner)
    made = [ExportJob.objects.create(version=version, format="jsonl", created_by=owner).pk for _ in range(5)]
    client.force_login(owner)
    seen, url = [], f"/api/datasets/{version.dataset_id}/versions/{version.number}/exports/?limit=2"
    while url:
        page = client.get(url).json()
        seen += [e["id"] for e in page["results"]]
        url = page["next"]
        ExportJob.objects.create(version=version, format="csv", created_by=owner)
    assert seen == list(reversed(made))


@pytest.mark.parametrize("after", ["9223372036854775808", "-1", "x"])
def test_a_row_page_after_a_position_the_database_cannot_hold_is_a_400_naming_after(client, owner, project, after):
    version = make_version(project, owner)
    client.force_login(owner)
    response = client.get(f"/api/datasets/{version.dataset_id}/versions/{version.number}/rows/?after={after}")
    assert response.status_code == 400
    assert response.json()["field"] == "after"
    assert client.get(f"/api/datasets/{version.dataset_id}/versions/{version.number}/rows/?after=0").status_code == 200
