import pytest
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db


def test_no_anonymous_account_exists_or_is_listed(client, site_admin):
    assert not get_user_model().objects.filter(username="AnonymousUser").exists()
    client.force_login(site_admin)
    page = client.get("/accounts/users/").content.decode()
    assert "root" in page and "AnonymousUser" not in page


def test_only_site_admins_act_on_accounts_and_never_on_their_own(client, site_admin, viewer):
    client.force_login(viewer)
    assert client.post(f"/accounts/users/{site_admin.pk}/", {"action": "deactivate"}).status_code == 403
    client.force_login(site_admin)
    answer = client.post(f"/accounts/users/{site_admin.pk}/", {"action": "deactivate"}, follow=True)
    assert "You cannot deactivate your own account." in answer.content.decode()
    assert get_user_model().objects.get(pk=site_admin.pk).is_active
    assert client.post("/accounts/users/999999/", {"action": "deactivate"}).status_code == 404


def test_a_deactivated_accounts_tokens_stop_working(client, site_admin, viewer):
    from apps.accounts import services

    _, raw = services.token_create(user=viewer, name="ci", permissions=["project.view"])
    assert client.get("/api/projects/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    client.force_login(site_admin)
    client.post(f"/accounts/users/{viewer.pk}/", {"action": "deactivate"})
    client.logout()
    assert client.get("/api/projects/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401
