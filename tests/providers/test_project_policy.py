"""What a project lets leave for outside providers: nothing at all when its admins say so, or
prompts with personal data replaced by placeholders, as the provider receives them (a real HTTP
server on loopback records each request's body)."""

import json

import pytest

from apps.projects.models import AuditEvent
from apps.providers.models import ProviderUsage
from tests.providers.test_transport import HI

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

COMPLETION = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": "ok"}}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}).encode()


def _chat(client, project, messages):
    return client.post(f"/api/projects/{project.pk}/provider-chat/",
                       json.dumps({"provider_model": "Scripted/m", "messages": messages}),
                       content_type="application/json")


def _policy(client, project, **values):
    return client.patch(f"/api/projects/{project.pk}/provider-policy/", json.dumps(values),
                        content_type="application/json")


def test_with_redaction_on_the_provider_never_receives_the_personal_data(
        client, scripted_provider, scripted_http, project, owner, scientist):
    scripted_http.script(200, COMPLETION)
    client.force_login(owner)
    assert _policy(client, project, redact_pii=True).json() == {"allow_outside_providers": True, "redact_pii": True}
    client.force_login(scientist)
    text = "Mail jane.doe@example.com or call +44 20 7946 0958 about card 4111 1111 1111 1111."
    reply = _chat(client, project, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}])
    assert reply.status_code == 200 and reply.json()["redactions"] == 3
    sent = json.loads(scripted_http.requests[-1]["body"])["messages"]
    assert sent == [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Mail [EMAIL] or call [PHONE] about card [CREDIT_CARD]."}]
    raw = scripted_http.requests[-1]["body"].decode()
    assert "jane.doe" not in raw and "7946" not in raw and "4111" not in raw


def test_without_redaction_the_prompt_goes_as_written(client, scripted_provider, scripted_http, project,
                                                      scientist):
    scripted_http.script(200, COMPLETION)
    client.force_login(scientist)
    reply = _chat(client, project, [{"role": "user", "content": "write to jane.doe@example.com"}])
    assert reply.status_code == 200 and reply.json()["redactions"] == 0
    assert json.loads(scripted_http.requests[-1]["body"])["messages"][0]["content"] == "write to jane.doe@example.com"


def test_a_project_that_forbids_outside_providers_sends_nothing(client, scripted_provider, scripted_http, project,
                                                                owner, scientist):
    client.force_login(owner)
    assert _policy(client, project, allow_outside_providers=False).status_code == 200
    event = AuditEvent.objects.get(action="provider.policy_update", project=project)
    assert event.before["allow_outside_providers"] is True and event.after["allow_outside_providers"] is False
    client.force_login(scientist)
    refused = _chat(client, project, HI)
    assert refused.status_code == 409
    assert "allow_outside_providers" in refused.json()["detail"]
    assert scripted_http.requests == [] and not ProviderUsage.objects.filter(project=project).exists()


@pytest.mark.parametrize(("body", "field"), [
    ({"redact_pii": "yes"}, "redact_pii"),
    ({"allow_outside_providers": 1}, "allow_outside_providers"),
    ({"send_everything": True}, "send_everything"),
])
def test_bad_settings_are_refused_naming_the_field_and_nothing_changes(client, project, owner, body, field):
    client.force_login(owner)
    response = _policy(client, project, **body)
    assert response.status_code == 400 and field in json.dumps(response.json())
    assert client.get(f"/api/projects/{project.pk}/provider-policy/").json() == {
        "allow_outside_providers": True, "redact_pii": False}


def test_a_scientist_cannot_change_the_policy(client, project, scientist):
    client.force_login(scientist)
    response = _policy(client, project, redact_pii=True)
    assert response.status_code == 403 and "project.edit" in response.json()["detail"]
