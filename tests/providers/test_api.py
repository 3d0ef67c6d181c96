"""The providers API and pages: site staff only for managing providers; project members by role
for the models enabled for their project; another project's provider is not found; bad input
answers 400 naming the field; names with HTML are shown as text."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts import services as account_services
from apps.providers import services
from apps.providers.models import Provider
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(60)]


def post(client, url, body, **headers):
    return client.post(url, json.dumps(body), content_type="application/json", **headers)


def test_only_signed_in_site_staff_reach_providers_others_get_404(client, site_admin, owner, provider, project):
    for user in (owner, UserFactory(username="plain")):
        client.force_login(user)
        assert client.get("/api/providers/").status_code == 404
        assert client.get(f"/api/providers/{provider.pk}/").status_code == 404
        assert post(client, "/api/providers/", {"name": "X", "base_url": "https://93.184.216.34/v1"}).status_code == 404
        assert client.get("/providers/").status_code == 404
        assert client.get(f"/providers/{provider.pk}/").status_code == 404
        assert client.post("/providers/", {"network": "1", "network-network": "10.0.0.0/8"}).status_code == 404
    client.logout()
    assert client.get("/api/providers/").status_code in (401, 403)
    # A site admin's API token carries project permissions only: it does not reach providers.
    _, raw = account_services.token_create(user=site_admin, name="t", permissions=["project.view"], project=None,
                                           expires_at=timezone.now() + timedelta(days=1))
    assert client.get("/api/providers/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 404
    assert Provider.objects.count() == 1


def test_site_staff_create_update_enable_and_delete_through_the_api(client, site_admin, loopback_allowed, project):
    client.force_login(site_admin)
    created = post(client, "/api/providers/", {"name": "Lab", "base_url": "http://127.0.0.1:9/v1/",
                                              "api_key": "sk-lab-secret-9999", "models": ["a", "b", "a"],
                                              "daily_request_budget": 10, "requests_per_minute": 5})
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["base_url"] == "http://127.0.0.1:9/v1" and body["models"] == ["a", "b"]
    assert body["api_key_hint"] == "…9999" and "api_key" not in body
    pid = body["id"]
    patched = client.patch(f"/api/providers/{pid}/", json.dumps({"enabled": False, "models": ["b", "c"]}),
                           content_type="application/json")
    assert patched.status_code == 200 and patched.json()["enabled"] is False
    assert sorted(patched.json()["models"]) == ["b", "c"]
    enabled = post(client, f"/api/providers/{pid}/enablements/", {"project": project.pk})
    assert enabled.status_code == 201 and enabled.json()["project_name"] == "Alpha"
    assert client.get(f"/api/providers/{pid}/enablements/").json()["results"][0]["project"] == project.pk
    assert client.delete(f"/api/providers/{pid}/enablements/{enabled.json()['id']}/").status_code == 204
    assert post(client, f"/api/providers/{pid}/enablements/", {"project": 999999}).json()["field"] == "project"
    assert client.delete(f"/api/providers/{pid}/").status_code == 204
    assert not Provider.objects.exists()


@pytest.mark.parametrize("body, field", [
    ({"name": "", "base_url": "https://93.184.216.34/v1"}, "name"),
    ({"name": "x" * 101, "base_url": "https://93.184.216.34/v1"}, "name"),
    ({"name": ["x"], "base_url": "https://93.184.216.34/v1"}, "name"),
    ({"name": "X", "base_url": "file:///etc/passwd"}, "base_url"),
    ({"name": "X", "base_url": "gopher://127.0.0.1:70/_x"}, "base_url"),
    ({"name": "X", "base_url": "http://169.254.169.254/latest"}, "base_url"),
    ({"name": "X", "base_url": "https://localhost/v1"}, "base_url"),
    ({"name": "X", "base_url": "https://" + "a" * 600}, "base_url"),
    ({"name": "X", "base_url": 5}, "base_url"),
    ({"name": "X", "base_url": "https://93.184.216.34/v1", "api_key": "a b"}, "api_key"),
    ({"name": "X", "base_url": "https://93.184.216.34/v1", "api_key": "k" * 501}, "api_key"),
    ({"name": "X", "base_url": "https://93.184.216.34/v1", "daily_token_budget": "lots"}, "daily_token_budget"),
    ({"name": "X", "base_url": "https://93.184.216.34/v1", "daily_request_budget": -1}, "daily_request_budget"),
    ({"name": "X", "base_url": "https://93.184.216.34/v1", "requests_per_minute": 0}, "requests_per_minute"),
    ({"name": "X", "base_url": "https://93.184.216.34/v1", "timeout_s": 0}, "timeout_s"),
    ({"name": "X", "base_url": "https://93.184.216.34/v1", "max_retries": 50}, "max_retries"),
    ({"name": "X", "base_url": "https://93.184.216.34/v1", "models": "gpt-4o"}, "models"),
    ({"name": "X", "base_url": "https://93.184.216.34/v1", "models": ["m"] * 501}, "models"),
    ({"name": "X", "base_url": "https://93.184.216.34/v1", "models": ["m" * 201]}, "models"),
])
def test_bad_input_is_a_400_naming_the_field_and_saves_nothing(client, site_admin, body, field):
    client.force_login(site_admin)
    response = post(client, "/api/providers/", body)
    assert response.status_code == 400, response.content
    data = response.json()
    assert data.get("field") == field or field in data, data
    assert not Provider.objects.exists()


def test_a_duplicate_name_is_refused_naming_it(client, site_admin, provider):
    client.force_login(site_admin)
    response = post(client, "/api/providers/", {"name": "Local", "base_url": "https://93.184.216.34/v1"})
    assert response.status_code == 400 and response.json()["field"] == "name"


def test_html_in_a_provider_name_is_shown_as_text(client, site_admin, loopback_allowed):
    client.force_login(site_admin)
    name = '<img src=x onerror="alert(1)">'
    provider = services.provider_create(user=site_admin, name=name, base_url="http://127.0.0.1:9/v1",
                                        models=["<b>m</b>"])
    for url in ("/providers/", f"/providers/{provider.pk}/"):
        page = client.get(url).content.decode()
        assert name not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page


def test_members_see_the_models_enabled_for_their_project_by_role(client, provider, project, other_project, owner,
                                                                  viewer, annotator, outsider, site_admin):
    url = f"/api/projects/{project.pk}/provider-models/"
    client.force_login(viewer)
    assert [m["ref"] for m in client.get(url).json()["results"]] == ["Local/m1", "Local/m2"]
    client.force_login(annotator)  # no model.view
    assert client.get(url).json()["missing_permission"] == "model.view"
    client.force_login(outsider)
    assert client.get(url).status_code == 404
    assert client.get(f"/api/projects/{other_project.pk}/provider-models/").json()["results"] == []
    # Disabled provider, or a disabled model: gone from the list.
    services.provider_update(user=site_admin, provider=provider, enabled=False)
    client.force_login(viewer)
    assert client.get(url).json()["results"] == []


def test_chat_needs_provider_use_and_another_projects_provider_is_not_found(client, provider, project, other_project,
                                                                           viewer, scientist, outsider, site_admin):
    model = provider.models.get(name="m1")
    body = {"provider_model": str(model.pk), "messages": [{"role": "user", "content": "hi"}]}
    client.force_login(viewer)
    refused = post(client, f"/api/projects/{project.pk}/provider-chat/", body)
    assert refused.status_code == 403 and refused.json()["missing_permission"] == "provider.use"
    client.force_login(outsider)  # owner of Bravo, where the provider is not enabled
    assert post(client, f"/api/projects/{other_project.pk}/provider-chat/", body).status_code == 404
    assert post(client, f"/api/projects/{other_project.pk}/provider-chat/",
                {**body, "provider_model": "Local/m1"}).status_code == 404
    assert post(client, f"/api/projects/{project.pk}/provider-chat/", body).status_code == 404
    client.force_login(scientist)
    for bad, field in ([{"messages": []}, "messages"], [{"messages": [{"role": "wizard", "content": "x"}]}, "messages[0]"],
                       [{"messages": [{"role": "user", "content": "x" * 200_001}]}, "messages"],
                       [{"temperature": 9}, "temperature"], [{"max_tokens": 0}, "max_tokens"],
                       [{"stop": [1]}, "stop"]):
        response = post(client, f"/api/projects/{project.pk}/provider-chat/", {**body, **bad})
        assert response.status_code == 400 and response.json()["field"] == field, (bad, response.content)


def test_allowlist_is_managed_by_site_staff(client, site_admin, owner):
    client.force_login(site_admin)
    added = post(client, "/api/provider-allowlist/", {"network": "10.0.0.9/24", "note": "lab"})
    assert added.status_code == 201 and added.json()["network"] == "10.0.0.0/24"
    assert post(client, "/api/provider-allowlist/", {"network": "nope"}).json()["field"] == "network"
    client.force_login(owner)
    assert client.get("/api/provider-allowlist/").status_code == 404
    assert client.delete(f"/api/provider-allowlist/{added.json()['id']}/").status_code == 404
    client.force_login(site_admin)
    assert client.delete(f"/api/provider-allowlist/{added.json()['id']}/").status_code == 204
