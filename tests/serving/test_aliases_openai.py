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


def test_a_canary_splits_callers_stickily_and_rolls_back_by_itself_when_it_breaches(
        owner, project, tiny_model, adapter_model, inference_worker, live_asgi):
    """A 50% canary with a p99 threshold no answer can meet: the `user` field keeps each caller on
    one side; after the canary's third answer the worker's own judgement rolls the alias back, and
    every caller is served the stable version from the next request, with no restart."""
    from apps.projects.models import AuditEvent
    from apps.registry.models import ModelAlias
    from apps.registry.selectors import canary_serves

    api = openai.OpenAI(base_url=f"{live_asgi}/v1", max_retries=0, timeout=60,
                        api_key=token(owner, project, ("project.view", "model.view", "model.generate")))
    admin = {"Authorization": f"Bearer {token(owner, project, ('model.view', 'model.alias'))}"}
    base = tiny_model.name
    assert requests.put(f"{live_asgi}/api/models/{tiny_model.pk}/aliases/production/",
                        json={"version": tiny_model.pk}, headers=admin, timeout=10).status_code == 200
    started = requests.put(f"{live_asgi}/api/models/{tiny_model.pk}/aliases/production/canary/",
                           json={"version": adapter_model.pk, "weight": 50, "max_p99_latency_s": 0.000001,
                                 "min_requests": 3}, headers=admin, timeout=10)
    assert started.status_code == 200, started.content
    alias = ModelAlias.objects.get(model=tiny_model, name="production")
    callers = [f"person-{i}" for i in range(40)]
    on_canary = [c for c in callers if canary_serves(alias, f"user:{c}")][:3]
    on_stable = [c for c in callers if not canary_serves(alias, f"user:{c}")][:2]
    assert len(on_canary) == 3 and len(on_stable) == 2

    def answer(caller: str) -> int:
        reply = api.chat.completions.create(model=base, messages=MESSAGES, max_tokens=2, temperature=0, user=caller)
        return Generation.objects.get(pk=int(reply.id.split("-")[1])).model_id

    assert [answer(c) for c in on_stable] == [tiny_model.pk] * 2
    assert answer(on_canary[0]) == adapter_model.pk
    assert answer(on_canary[0]) == adapter_model.pk  # sticky: the same caller, the same side
    assert answer(on_canary[1]) == adapter_model.pk  # the canary's third answer breaches the p99
    deadline = time.monotonic() + 30
    while ModelAlias.objects.get(pk=alias.pk).canary_version_id is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ModelAlias.objects.get(pk=alias.pk).canary_version_id is None
    assert [answer(c) for c in on_canary] == [tiny_model.pk] * 3  # rolled back for everyone
    rollback = AuditEvent.objects.get(project=project, action="model.alias_rollback")
    assert rollback.actor is None and "p99 latency" in rollback.after["reason"]
    health = requests.get(f"{live_asgi}/api/models/{tiny_model.pk}/aliases/production/canary/", headers=admin,
                          timeout=10).json()
    assert health["canary_version"] is None and health["version"] == tiny_model.pk

    with pytest.raises(openai.BadRequestError) as bad:
        api.chat.completions.create(model=base, messages=MESSAGES, max_tokens=2, user="x" * 300)
    assert bad.value.status_code == 400 and bad.value.body["param"] == "user"
