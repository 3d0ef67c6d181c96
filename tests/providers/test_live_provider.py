"""A provider that is a real OpenAI-compatible server: this product's own /v1, served over HTTP
by the live ASGI server, generating with the demo model in a real `inference` worker process.
Site staff register it (loopback refused until allowlisted), fetch its models, enable it for a
project; a scientist chats with it through the API; usage is counted and the daily budget
answers 429 with Retry-After."""

import json
import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts import services as account_services
from apps.registry.selectors import model_slug
from apps.serving.models import Generation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(300)]

CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]


def post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


@pytest.fixture
def upstream_key(owner, project):
    """A project API token of the upstream server: the provider's API key."""
    _, raw = account_services.token_create(user=owner, name="provider", project=project,
                                           permissions=["project.view", "model.view", "model.generate"],
                                           expires_at=timezone.now() + timedelta(days=1))
    return raw


def test_a_provider_on_this_products_v1_end_to_end_with_usage_and_budget(
        client, live_asgi, demo_model, inference_worker, site_admin, scientist, project, upstream_key, caplog):
    client.force_login(site_admin)
    registration = {"name": "Workbench", "base_url": f"{live_asgi}/v1", "api_key": upstream_key, "max_retries": 0,
                    "timeout_s": 120, "daily_request_budget": 2}
    refused = post(client, "/api/providers/", registration)
    assert refused.status_code == 400 and refused.json()["field"] == "base_url"
    assert "allowlist" in refused.json()["detail"]

    assert post(client, "/api/provider-allowlist/", {"network": "127.0.0.1", "note": "this server"}).status_code == 201
    created = post(client, "/api/providers/", registration)
    assert created.status_code == 201, created.content
    provider_id = created.json()["id"]
    fetched = post(client, f"/api/providers/{provider_id}/fetch-models/", {})
    served_as = model_slug(demo_model.name)  # /v1 lists models by their API id, a slug without spaces
    assert fetched.status_code == 200 and fetched.json()["models"] == [served_as]
    assert post(client, f"/api/providers/{provider_id}/enablements/", {"project": project.pk}).status_code == 201

    client.force_login(scientist)
    listed = client.get(f"/api/projects/{project.pk}/provider-models/").json()["results"]
    assert [m["ref"] for m in listed] == [f"Workbench/{served_as}"]
    url = f"/api/projects/{project.pk}/provider-chat/"
    with caplog.at_level(logging.DEBUG):
        reply = post(client, url, {"provider_model": listed[0]["ref"], "messages": CAPITAL, "max_tokens": 8,
                                   "temperature": 0})
    assert reply.status_code == 200, reply.content
    answer = reply.json()
    assert answer["text"] and answer["completion_tokens"] > 0 and answer["prompt_tokens"] > 0
    assert answer["finish_reason"] in ("stop", "length")
    assert upstream_key not in caplog.text
    # It really went through /v1: the upstream recorded an API generation with the same text.
    generation = Generation.objects.get(source="api")
    assert generation.output == answer["text"]

    second = post(client, url, {"provider_model": str(listed[0]["id"]), "messages": CAPITAL, "max_tokens": 2})
    assert second.status_code == 200
    over = post(client, url, {"provider_model": str(listed[0]["id"]), "messages": CAPITAL, "max_tokens": 2})
    assert over.status_code == 429 and "2 requests for today" in over.json()["detail"]
    assert 0 < int(over["Retry-After"]) <= 86400
    assert Generation.objects.filter(source="api").count() == 2  # the refused call never left

    usage = client.get(f"/api/projects/{project.pk}/provider-usage/").json()["results"]
    assert len(usage) == 1 and usage[0]["requests"] == 2 and usage[0]["failed_requests"] == 0
    assert usage[0]["total_tokens"] == (answer["prompt_tokens"] + answer["completion_tokens"]
                                        + sum(g.prompt_tokens + g.completion_tokens
                                              for g in Generation.objects.filter(source="api").order_by("id")[1:]))

    # A token budget already spent refuses the next call the same way.
    client.force_login(site_admin)
    client.patch(f"/api/providers/{provider_id}/", json.dumps({"daily_request_budget": None, "daily_token_budget": 5}),
                 content_type="application/json")
    client.force_login(scientist)
    spent = post(client, url, {"provider_model": str(listed[0]["id"]), "messages": CAPITAL, "max_tokens": 2})
    assert spent.status_code == 429 and "5 tokens for today" in spent.json()["detail"]
