"""Aliases through the OpenAI-compatible API, end to end: the official `openai` client against the
live ASGI server and a real `inference` worker. `name@alias` is served by the version the alias
points at, a bare name by its `production` alias, and a move (through the REST API) is followed by
the very next request, with no restart."""

import time
from datetime import timedelta

import openai
import pytest
import requests
from django.utils import timezone

from apps.accounts import services as account_services
from apps.serving.models import Generation
from tests.comparison.fixtures import adapter_model_fixture  # noqa: F401
from tests.serving.test_openai_api import api_id

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MESSAGES = [{"role": "user", "content": "what is the capital of france ?"}]


def token(owner, project, permissions) -> str:
    return account_services.token_create(user=owner, name="api", permissions=list(permissions), project=project,
                                         expires_at=timezone.now() + timedelta(days=1))[1]


def served_by(api, model: str):
    """The model row that served one greedy request for `model`."""
    answer = api.chat.completions.create(model=model, messages=MESSAGES, max_tokens=3, temperature=0)
    assert answer.model == model  # the client's own name comes back
    return Generation.objects.get(pk=int(answer.id.split("-")[1])).model_id


def test_name_at_alias_is_served_by_its_version_and_a_move_is_followed_at_once(
        owner, project, tiny_model, adapter_model, inference_worker, live_asgi):
    api = openai.OpenAI(base_url=f"{live_asgi}/v1", max_retries=0, timeout=60,
                        api_key=token(owner, project, ("project.view", "model.view", "model.generate")))
    mover = {"Authorization": f"Bearer {token(owner, project, ('model.alias', 'model.promote'))}"}

    def move(alias: str, version: int, **extra) -> requests.Response:
        return requests.put(f"{live_asgi}/api/models/{tiny_model.pk}/aliases/{alias}/", json={"version": version,
                            **extra}, headers=mover, timeout=10)

    base = tiny_model.name
    assert served_by(api, base) == tiny_model.pk  # no alias yet: today's behaviour
    assert move("production", tiny_model.pk, protected=True).status_code == 200
    assert move("staging", adapter_model.pk).status_code == 200
    listed = {m.id: m.model_extra["name"] for m in api.models.list().data}
    slug = api_id(tiny_model)  # ids are slugs (no spaces); the display names stay
    assert {slug: base, api_id(adapter_model): adapter_model.name, f"{slug}@production": f"{base}@production",
            f"{slug}@staging": f"{base}@staging"}.items() <= listed.items()
    assert served_by(api, f"{slug}@staging") == adapter_model.pk  # a slug takes an alias too

    assert served_by(api, f"{base}@staging") == adapter_model.pk
    assert served_by(api, f"{base}@production") == tiny_model.pk
    assert served_by(api, base) == tiny_model.pk  # a bare name means production

    moved = move("production", adapter_model.pk)
    assert moved.status_code == 200, moved.content
    started = time.monotonic()
    assert served_by(api, base) == adapter_model.pk  # the very next request: nothing cached, no restart
    assert served_by(api, f"{base}@production") == adapter_model.pk
    assert time.monotonic() - started < 30  # (two generations; the switch itself is the next request)
    models = {m.id for m in api.models.list().data}
    assert f"{slug}@production" in models

    with pytest.raises(openai.NotFoundError) as unknown:
        api.chat.completions.create(model=f"{base}@canary", messages=MESSAGES, max_tokens=2)
    assert unknown.value.status_code == 404 and "canary" in unknown.value.message


def test_moving_a_protected_alias_without_model_promote_is_403_naming_it(
        owner, project, tiny_model, adapter_model, other_project, outsider, live_asgi):
    from apps.registry.services import alias_set

    alias_set(user=owner, model=tiny_model, name="production", version=tiny_model.pk, protected=True)
    url = f"{live_asgi}/api/models/{tiny_model.pk}/aliases/production/"
    without = {"Authorization": f"Bearer {token(owner, project, ('model.alias',))}"}
    refused = requests.put(url, json={"version": adapter_model.pk}, headers=without, timeout=10)
    assert refused.status_code == 403 and refused.json()["missing_permission"] == "model.promote"
    # Another project's token: the model does not exist for it.
    elsewhere = {"Authorization": f"Bearer {token(outsider, other_project, ('model.alias', 'model.promote'))}"}
    assert requests.put(url, json={"version": adapter_model.pk}, headers=elsewhere, timeout=10).status_code == 404
    api = openai.OpenAI(base_url=f"{live_asgi}/v1", max_retries=0, timeout=60,
                        api_key=token(outsider, other_project, ("project.view", "model.view", "model.generate")))
    assert api.models.list().data == []
    with pytest.raises(openai.NotFoundError):
        api.chat.completions.create(model=f"{tiny_model.name}@production", messages=MESSAGES, max_tokens=2)
