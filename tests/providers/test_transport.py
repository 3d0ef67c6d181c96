"""How a provider call travels: redirects are not followed (a redirect to a private address goes
nowhere), the connection is pinned to the address that was checked, the provider's errors come
back with the key scrubbed, and the key never reaches the logs."""

import json
import logging

import pytest

from apps.providers import services
from apps.providers.client import build_client
from apps.providers.models import ProviderUsage
from apps.providers.netguard import CheckedUrl
from tests.providers.conftest import SECRET

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(60)]

HI = [{"role": "user", "content": "hi"}]


def test_a_redirect_to_a_private_address_is_not_followed(scripted_provider, scripted_http, project, scientist,
                                                         site_admin):
    scripted_http.script(302, headers={"Location": "http://169.254.169.254/latest/meta-data/"})
    with pytest.raises(services.ProviderError) as refused:
        services.provider_chat(project, "Scripted/m", HI, user=scientist)
    assert "redirect (302), which is not followed" in refused.value.message
    with pytest.raises(services.ProviderError):
        services.provider_models_fetch(user=site_admin, provider=scripted_provider)
    # One request each, to the provider itself: none to where the redirect pointed, none retried.
    assert [(r["method"], r["path"]) for r in scripted_http.requests] == [("POST", "/v1/chat/completions"),
                                                                          ("GET", "/v1/models")]
    usage = ProviderUsage.objects.get(project=project)
    assert (usage.requests, usage.failed_requests) == (1, 1)


def test_the_connection_goes_to_the_checked_address_not_a_fresh_lookup(scripted_http):
    """A name that would resolve elsewhere now (DNS rebinding) is not looked up again: the socket
    goes to the address checked, the Host header keeps the name."""
    scripted_http.script(200, json.dumps({"object": "list", "data": [
        {"id": "pinned", "object": "model", "created": 0, "owned_by": "t"}]}).encode())
    checked = CheckedUrl(url=f"http://rebind.invalid:{scripted_http.port}/v1", scheme="http", host="rebind.invalid",
                         port=scripted_http.port, addresses=("127.0.0.1",))
    client = build_client(checked, api_key="k", timeout_s=5, max_retries=0)
    assert [m.id for m in client.models.list().data] == ["pinned"]
    assert scripted_http.requests[-1]["host"] == f"rebind.invalid:{scripted_http.port}"


def test_provider_errors_come_back_with_the_key_scrubbed_and_nothing_logs_the_key(scripted_provider, scripted_http,
                                                                                 project, scientist, caplog):
    scripted_http.script(400, json.dumps({"error": {"message": f"Bad key {SECRET} for model m", "type": "x"}}).encode())
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(services.ProviderError) as failed:
            services.provider_chat(project, "Scripted/m", HI, user=scientist)
    assert "answered 400" in failed.value.message and SECRET not in failed.value.message
    assert "[key]" in failed.value.message
    assert scripted_http.requests[-1]["authorization"] == f"Bearer {SECRET}"  # it was sent, to the provider only
    assert SECRET not in caplog.text


def test_a_provider_answering_500_is_retried_then_fails_with_its_message(scripted_provider, scripted_http, project,
                                                                        scientist):
    scripted_http.script(500, json.dumps({"error": {"message": "upstream exploded"}}).encode())
    with pytest.raises(services.ProviderError) as failed:
        services.provider_chat(project, "Scripted/m", HI, user=scientist)
    assert "answered 500: upstream exploded" in failed.value.message
    assert len(scripted_http.requests) == 3  # max_retries=2, with the client's own backoff


def test_an_address_refused_since_saving_is_refused_at_call_time(scripted_provider, project, scientist, site_admin,
                                                                 loopback_allowed, scripted_http):
    services.allowlist_remove(user=site_admin, entry=loopback_allowed)
    with pytest.raises(services.ProviderError) as refused:
        services.provider_chat(project, "Scripted/m", HI, user=scientist)
    assert "allowlist" in refused.value.message
    assert scripted_http.requests == []


def test_the_rate_limit_answers_429_with_retry_after(client, site_admin, scripted_provider, scripted_http, project,
                                                     scientist):
    import time

    scripted_http.script(200, json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                                          "choices": [{"index": 0, "finish_reason": "stop",
                                                       "message": {"role": "assistant", "content": "ok"}}],
                                          "usage": {"prompt_tokens": 3, "completion_tokens": 1,
                                                    "total_tokens": 4}}).encode())
    services.provider_update(user=site_admin, provider=scripted_provider, requests_per_minute=2)
    if time.time() % 60 > 55:  # the window is a calendar minute: do not straddle two
        time.sleep(60 - time.time() % 60 + 0.1)
    client.force_login(scientist)
    url = f"/api/projects/{project.pk}/provider-chat/"
    body = json.dumps({"provider_model": "Scripted/m", "messages": HI})
    codes = [client.post(url, body, content_type="application/json") for _ in range(3)]
    assert [c.status_code for c in codes] == [200, 200, 429]
    assert 0 < int(codes[-1]["Retry-After"]) <= 60
    assert len(scripted_http.requests) == 2
    assert ProviderUsage.objects.get(project=project).requests == 2
