"""A provider model in the playground, end to end: the page offers the models enabled for the
project (to members holding provider.use), and the playground socket answers from the provider
— here this product's own /v1 over real HTTP, generating in a real inference worker."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts import services as account_services
from apps.providers import services
from apps.providers.models import ProviderUsage
from apps.serving.models import Generation
from tests.projects.test_activity_socket import headers_for, run
from tests.serving.test_playground_socket import playground_socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def v1_provider(live_asgi, site_admin, owner, project, tiny_model):
    _, key = account_services.token_create(user=owner, name="provider", project=project,
                                           permissions=["project.view", "model.view", "model.generate"],
                                           expires_at=timezone.now() + timedelta(days=1))
    services.allowlist_add(user=site_admin, network="127.0.0.1")
    provider = services.provider_create(user=site_admin, name="Self", base_url=f"{live_asgi}/v1", api_key=key,
                                        models=[tiny_model.name], max_retries=0, timeout_s=120)
    services.provider_enable(user=site_admin, provider=provider, project_id=project.pk)
    return provider.models.get()


def test_the_playground_lists_provider_models_to_those_who_may_use_them(client, v1_provider, project, scientist,
                                                                        admin):
    from apps.projects.models import Membership, Role

    client.force_login(scientist)
    page = client.get(f"/projects/{project.pk}/playground/").content.decode()
    assert f'value="provider:{v1_provider.pk}"' in page and "Self / " in page
    # A member who may generate but not send prompts out sees no provider model.
    role = Role.objects.create(project=project, name="Local only", created_by=admin,
                               permissions=["project.view", "model.view", "model.generate"])
    membership = Membership.objects.get(project=project, user=scientist)
    membership.role, membership.custom_role = "", role
    membership.save()
    page = client.get(f"/projects/{project.pk}/playground/").content.decode()
    assert "provider:" not in page


def test_the_playground_socket_answers_from_a_provider_model(v1_provider, project, scientist, inference_worker):
    headers = headers_for(scientist)
    messages = [{"role": "user", "content": "what is the capital of france ?"}]
    seen = {}

    async def scenario():
        socket = playground_socket(project, headers)
        assert (await socket.connect(timeout=10))[0]
        await socket.send_json_to({"type": "generate", "model": f"provider:{v1_provider.pk}", "messages": messages,
                                   "params": {"max_new_tokens": 6, "temperature": 0}})
        events = [await socket.receive_json_from(timeout=120)]
        while events[-1]["type"] not in ("done", "error"):
            events.append(await socket.receive_json_from(timeout=120))
        await socket.send_json_to({"type": "generate", "model": f"provider:{v1_provider.pk}", "messages": messages,
                                   "params": {"top_k": 3}})
        while (refused := await socket.receive_json_from(timeout=30))["type"] != "error":
            pass
        await socket.disconnect()
        seen.update(events=events, refused=refused)

    run(scenario)
    events, refused = seen["events"], seen["refused"]
    assert [e["type"] for e in events] == ["started", "delta", "done"], events
    done = events[-1]
    assert done["result"]["completion_tokens"] > 0 and done["result"]["text"] == events[1]["text"]
    assert Generation.objects.get(source="api").output == done["result"]["text"]  # it went through /v1
    assert ProviderUsage.objects.get(project=project).requests == 1
    assert refused["field"] == "top_k"
