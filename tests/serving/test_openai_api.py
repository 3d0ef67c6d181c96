"""The OpenAI-compatible API through the whole stack: the official `openai` client against the
live ASGI server, a real `inference` worker (threads, one model cache) generating with the
tiny model, tokens streamed back over the channel layer."""

from datetime import timedelta

import openai
import pytest
import requests
from django.utils import timezone

from apps.accounts import services as account_services
from apps.serving.models import Generation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def project_token(owner, project, permissions=("project.view", "model.view", "model.generate")) -> str:
    _, raw = account_services.token_create(user=owner, name="api", permissions=list(permissions), project=project,
                                           expires_at=timezone.now() + timedelta(days=1))
    return raw


@pytest.fixture
def client_for(live_asgi):
    def make(raw: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=raw, max_retries=0, timeout=60)
    return make


def test_the_official_client_lists_models_and_completes_chat_with_and_without_streaming(
        owner, project, tiny_model, inference_worker, client_for):
    api = client_for(project_token(owner, project))
    assert [m.id for m in api.models.list().data] == [tiny_model.name]

    messages = [{"role": "user", "content": "what is the capital of france ?"}]
    whole = api.chat.completions.create(model=tiny_model.name, messages=messages, max_tokens=6, temperature=0)
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens > 0 and whole.usage.prompt_tokens > 0

    chunks = list(api.chat.completions.create(model=tiny_model.name, messages=messages, max_tokens=6,
                                              temperature=0, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == whole.choices[0].message.content  # greedy: the same answer, streamed
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason

    completion = api.completions.create(model=tiny_model.name, prompt="what is paris ?", max_tokens=4)
    assert completion.choices[0].text is not None and completion.usage.completion_tokens > 0
    assert Generation.objects.filter(source="api", state="succeeded").count() == 3


def test_bad_requests_get_a_clear_4xx_naming_the_parameter(owner, project, tiny_model, inference_worker, client_for,
                                                         live_asgi):
    raw = project_token(owner, project)
    api = client_for(raw)
    messages = [{"role": "user", "content": "what is paris ?"}]
    with pytest.raises(openai.BadRequestError) as absurd:
        api.chat.completions.create(model=tiny_model.name, messages=messages, max_tokens=10**9)
    assert absurd.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as too_long:  # 256-token context
        api.chat.completions.create(model=tiny_model.name, messages=[{"role": "user", "content": "paris " * 300}],
                                    max_tokens=4)
    assert too_long.value.body["param"] in ("prompt", "messages")
    with pytest.raises(openai.BadRequestError) as malformed:
        api.chat.completions.create(model=tiny_model.name, messages=[{"role": "wizard", "content": 1}])
    assert malformed.value.body["param"].startswith("messages[0]")
    with pytest.raises(openai.NotFoundError):
        api.chat.completions.create(model="gpt-4o", messages=messages)
    response = requests.post(f"{live_asgi}/v1/chat/completions", data=b"{not json",
                             headers={"Authorization": f"Bearer {raw}"}, timeout=10)
    assert response.status_code == 400 and response.json()["error"]["param"] == "body"
    assert not Generation.objects.filter(state="succeeded").exists()


def test_tokens_are_required_scoped_and_permission_checked(owner, project, other_project, outsider, tiny_model,
                                                           client_for):
    with pytest.raises(openai.AuthenticationError):
        client_for("wb_nope_nope").models.list()
    # Another project's token sees none of this project's models.
    assert client_for(project_token(outsider, other_project)).models.list().data == []
    with pytest.raises(openai.NotFoundError):
        client_for(project_token(outsider, other_project)).chat.completions.create(
            model=tiny_model.name, messages=[{"role": "user", "content": "hi"}])
    # A token without model.generate may list models but not generate.
    read_only = client_for(project_token(owner, project, ("project.view", "model.view")))
    assert [m.id for m in read_only.models.list().data] == [tiny_model.name]
    with pytest.raises(openai.PermissionDeniedError):
        read_only.chat.completions.create(model=tiny_model.name, messages=[{"role": "user", "content": "hi"}])
    assert not Generation.objects.exists()


def test_the_token_rate_limit_answers_429_with_retry_after(owner, project, tiny_model, live_asgi, settings,
                                                           monkeypatch):
    from rest_framework.settings import api_settings

    from apps.accounts.throttling import TokenRateThrottle

    raw = project_token(owner, project)
    rates = {**api_settings.DEFAULT_THROTTLE_RATES, "token": "3/min"}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    # The class read its rates once: set for this test only (a rate left behind throttled later tests).
    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", rates)
    codes = [requests.get(f"{live_asgi}/v1/models", headers={"Authorization": f"Bearer {raw}"}, timeout=10)
             for _ in range(4)]
    assert [r.status_code for r in codes] == [200, 200, 200, 429]
    assert int(codes[-1].headers["Retry-After"]) > 0
