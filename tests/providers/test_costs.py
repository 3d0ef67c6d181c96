"""Tokens and cost per provider call, per project (#20 item 6): site staff price a model per
1,000 prompt and completion tokens; each call through provider_chat (a real HTTP server on
loopback answering with usage) is recorded with its tokens and cost; the project's totals come
back from the API and the page, checked against sums worked out by hand."""

import json

import pytest

from apps.projects.models import AuditEvent
from apps.providers.models import ProviderCall, ProviderModel
from tests.providers.test_project_policy import COMPLETION, _chat

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def _patch(client, provider, body):
    return client.patch(f"/api/providers/{provider.pk}/", json.dumps(body), content_type="application/json")


def test_each_call_records_its_tokens_and_cost_and_the_project_sees_its_totals(
        client, site_admin, scripted_provider, scripted_http, project, scientist):
    client.force_login(scientist)
    scripted_http.script(200, COMPLETION)  # 3 prompt tokens, 1 completion token
    assert _chat(client, project, [{"role": "user", "content": "hi"}]).status_code == 200  # not priced yet

    client.force_login(site_admin)
    priced = _patch(client, scripted_provider, {"prices": {"m": {"input_price_per_1k": "0.25",
                                                                 "output_price_per_1k": 2}}})
    assert priced.status_code == 200, priced.content
    assert priced.json()["prices"] == {"m": {"input_price_per_1k": "0.250000", "output_price_per_1k": "2.000000"}}
    assert AuditEvent.objects.filter(action="provider.update").latest("id").after["prices"] == {
        "m": {"input_price_per_1k": "0.25", "output_price_per_1k": "2"}}

    client.force_login(scientist)
    for _ in range(2):
        assert _chat(client, project, [{"role": "user", "content": "hi"}]).status_code == 200
    scripted_http.script(400, json.dumps({"error": {"message": "bad request"}}).encode())
    assert _chat(client, project, [{"role": "user", "content": "hi"}]).status_code == 502

    # Each priced call: 3 × 0.25 / 1000 + 1 × 2 / 1000 = 0.00075 + 0.002 = 0.00275.
    calls = list(ProviderCall.objects.filter(project=project).order_by("id"))
    assert [(c.prompt_tokens, c.completion_tokens, c.failed) for c in calls] == [
        (3, 1, False), (3, 1, False), (3, 1, False), (0, 0, True)]
    assert [str(c.cost) if c.cost is not None else None for c in calls] == [None, "0.002750", "0.002750", "0.000000"]
    assert all(c.user == scientist and c.model_name == "Scripted/m" for c in calls)

    costs = client.get(f"/api/projects/{project.pk}/provider-costs/")
    assert costs.status_code == 200
    line = {"calls": 4, "failed_calls": 1, "unpriced_calls": 1, "prompt_tokens": 9, "completion_tokens": 3,
            "cost": "0.005500"}
    assert costs.json() == {"totals": {"model": "all", **line}, "by_model": [{"model": "Scripted/m", **line}]}

    page = client.get(f"/projects/{project.pk}/provider-costs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-testid="costs-total"' in html and "0.005500" in html and "Scripted/m" in html

    # A price changed later does not reprice what was recorded.
    client.force_login(site_admin)
    assert _patch(client, scripted_provider, {"prices": {"m": {"input_price_per_1k": None}}}).status_code == 200
    assert ProviderModel.objects.get(provider=scripted_provider, name="m").input_price_per_1k is None
    client.force_login(scientist)
    assert client.get(f"/api/projects/{project.pk}/provider-costs/").json()["totals"]["cost"] == "0.005500"


@pytest.mark.parametrize("prices, field", [
    ("cheap", "prices"),
    ({"nope": {"input_price_per_1k": 1}}, "prices.nope"),
    ({"m": {"price": 1}}, "prices.m"),
    ({"m": {}}, "prices.m"),
    ({"m": 1}, "prices.m"),
    ({"m": {"input_price_per_1k": -1}}, "prices.m.input_price_per_1k"),
    ({"m": {"input_price_per_1k": "a lot"}}, "prices.m.input_price_per_1k"),
    ({"m": {"input_price_per_1k": True}}, "prices.m.input_price_per_1k"),
    ({"m": {"output_price_per_1k": "0.0000001"}}, "prices.m.output_price_per_1k"),
    ({"m": {"output_price_per_1k": 2_000_000}}, "prices.m.output_price_per_1k"),
    ({"m": {"output_price_per_1k": "NaN"}}, "prices.m.output_price_per_1k"),
])
def test_a_bad_price_is_refused_naming_the_field_and_saves_nothing(client, site_admin, scripted_provider, prices,
                                                                   field):
    client.force_login(site_admin)
    refused = _patch(client, scripted_provider, {"prices": prices, "max_retries": 1})
    assert refused.status_code == 400 and refused.json()["field"] == field, refused.content
    scripted_provider.refresh_from_db()
    assert scripted_provider.max_retries == 2  # the whole change refused
    model = ProviderModel.objects.get(provider=scripted_provider, name="m")
    assert model.input_price_per_1k is None and model.output_price_per_1k is None


def test_only_site_staff_set_prices_and_another_projects_costs_answer_404(
        client, owner, scripted_provider, project, other_project):
    client.force_login(owner)
    assert _patch(client, scripted_provider, {"prices": {"m": {"input_price_per_1k": 1}}}).status_code == 404
    assert client.get(f"/api/projects/{other_project.pk}/provider-costs/").status_code == 404
    assert client.get(f"/projects/{other_project.pk}/provider-costs/").status_code == 404
    empty = client.get(f"/api/projects/{project.pk}/provider-costs/").json()
    assert empty["by_model"] == [] and empty["totals"]["cost"] == "0.000000" and empty["totals"]["calls"] == 0
