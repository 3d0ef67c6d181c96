from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts import services
from apps.projects.models import AuditEvent

pytestmark = pytest.mark.django_db


def bearer(raw):
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def test_a_personal_token_authenticates_api_calls(client, viewer):
    token, raw = services.token_create(user=viewer, name="ci", permissions=["project.view"])
    response = client.get("/api/me/", **bearer(raw))
    assert response.status_code == 200
    assert response.json()["username"] == viewer.username
    token.refresh_from_db()
    assert token.last_used_at is not None
    assert raw not in token.key_hash


@pytest.mark.parametrize("header", ["Bearer wb_nope", "Bearer garbage", "Bearer wb_abc_"])
def test_malformed_tokens_are_refused(client, header):
    response = client.get("/api/me/", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response.json()["detail"] == "Malformed API token."


def test_a_tampered_token_is_refused(client, viewer):
    _, raw = services.token_create(user=viewer, name="ci", permissions=["project.view"])
    tampered = raw[:-2] + ("AA" if not raw.endswith("AA") else "BB")
    response = client.get("/api/me/", **bearer(tampered))
    assert response.status_code == 401


def test_a_revoked_token_is_refused_and_the_attempt_audited(client, viewer):
    token, raw = services.token_create(user=viewer, name="ci", permissions=["project.view"])
    token.revoked_at = timezone.now()
    token.save()
    response = client.get("/api/me/", **bearer(raw))
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]
    assert AuditEvent.objects.filter(action="token.use_after_revoked", target_id=str(token.pk)).exists()


def test_an_expired_token_is_refused(client, viewer):
    token, raw = services.token_create(user=viewer, name="ci", permissions=["project.view"],
                                       expires_at=timezone.now() + timedelta(hours=1))
    assert client.get("/api/me/", **bearer(raw)).status_code == 200
    token.expires_at = timezone.now() - timedelta(seconds=1)
    token.save()
    response = client.get("/api/me/", **bearer(raw))
    assert response.status_code == 401
    assert "expired" in response.json()["detail"]


def test_a_token_scoped_to_one_project_cannot_see_another(client, admin, project, other_project):
    from tests.factories import MembershipFactory

    MembershipFactory(project=other_project, user=admin, role="viewer")
    _, raw = services.token_create(user=admin, name="ci", permissions=["project.view"], project=project)
    listed = client.get("/api/projects/", **bearer(raw)).json()["results"]
    assert [p["id"] for p in listed] == [project.pk]
    assert client.get(f"/api/projects/{other_project.pk}/", **bearer(raw)).status_code == 404


def test_a_token_acts_with_no_more_than_its_permissions(client, owner, project):
    _, raw = services.token_create(user=owner, name="read-only", permissions=["project.view"])
    response = client.patch(f"/api/projects/{project.pk}/", {"name": "Renamed"},
                            content_type="application/json", **bearer(raw))
    assert response.status_code == 403
    assert response.json()["missing_permission"] == "project.edit"
    project.refresh_from_db()
    assert project.name == "Alpha"


def test_each_token_has_its_own_rate_limit(client, viewer):
    from rest_framework.throttling import SimpleRateThrottle

    # DRF reads the rates once, into a class attribute; narrow it for this test only.
    original = SimpleRateThrottle.THROTTLE_RATES
    SimpleRateThrottle.THROTTLE_RATES = {**original, "token": "3/min"}
    try:
        _, first = services.token_create(user=viewer, name="one", permissions=["project.view"])
        _, second = services.token_create(user=viewer, name="two", permissions=["project.view"])
        answers = [client.get("/api/me/", **bearer(first)).status_code for _ in range(4)]
        assert answers == [200, 200, 200, 429]
        throttled = client.get("/api/me/", **bearer(first))
        assert int(throttled["Retry-After"]) > 0
        assert client.get("/api/me/", **bearer(second)).status_code == 200
    finally:
        SimpleRateThrottle.THROTTLE_RATES = original


def test_the_answers_that_reveal_a_new_token_may_not_be_cached(client, owner, project):
    client.force_login(owner)
    api = client.post("/api/tokens/", {"name": "ci", "permissions": ["project.view"]}, content_type="application/json")
    assert api.status_code == 201 and api.json()["token"].startswith("wb_")
    assert api["Cache-Control"] == "no-store"
    page = client.post(f"/projects/{project.pk}/tokens/", {"form": "create", "name": "deploy",
                                                          "permissions": ["project.view"], "expires_in_days": 30})
    assert page.status_code == 200 and "wb_" in page.content.decode()
    assert page["Cache-Control"] == "no-store"
    assert "no-store" not in client.get(f"/projects/{project.pk}/tokens/").get("Cache-Control", "")


def test_a_token_asked_for_model_generate_alone_works_with_the_openai_client(live_asgi, owner, project):
    """The README's own instruction: a project token holding model.generate is what /v1 needs."""
    from openai import OpenAI

    from apps.registry.models import RegisteredModel

    RegisteredModel.objects.create(project=project, name="Served", format="hf_dir", source_path="/x",
                                   weights_path="/x", status="ready", info={}, created_by=owner)
    token, raw = services.token_create(user=owner, name="app", permissions=["model.generate"], project=project)
    assert token.permissions == ["model.generate", "model.view", "project.view"]  # what it needs came with it
    models = OpenAI(base_url=f"{live_asgi}/v1", api_key=raw, max_retries=0, timeout=20).models.list()
    assert [m.id for m in models.data] == ["served"]  # its API id: the name as a slug


def test_a_token_whose_permissions_need_one_the_creator_lacks_is_refused_naming_it(client, owner, project):
    from apps.projects.models import Role
    from tests.factories import MembershipFactory, UserFactory

    role = Role.objects.create(project=project, name="Exporter", permissions=["project.view", "dataset.export",
                                                                             "token.manage"], created_by=owner)
    exporter = UserFactory(username="ezra")
    MembershipFactory(project=project, user=exporter, role="", custom_role=role)
    client.force_login(exporter)
    answer = client.post(f"/api/projects/{project.pk}/tokens/", {"name": "ci", "permissions": ["dataset.export"]},
                         content_type="application/json")
    assert answer.status_code == 400
    assert answer.json() == {"detail": "dataset.export needs dataset.view to work, which you do not hold.",
                             "field": "permissions"}
