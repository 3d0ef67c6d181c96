from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from apps.accounts import services
from apps.accounts.models import Invitation
from apps.projects.models import AuditEvent

pytestmark = pytest.mark.django_db
User = get_user_model()
NEW_PASSWORD = "lantern-orbit-quietly-7"


def accept(client, raw, password=NEW_PASSWORD, again=None):
    return client.post(f"/accounts/invitation/{raw}/", {"password": password, "password_again": again or password})


def test_site_admin_creates_an_invitation_and_sees_the_link_once(client, site_admin):
    client.force_login(site_admin)
    response = client.post("/accounts/users/", {"invite": "1", "invite-username": "newbie",
                                                 "invite-email": "newbie@example.test"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "/accounts/invitation/" in html
    invitation = Invitation.objects.get(username="newbie")
    assert invitation.status == "pending"
    # Only the hash is stored: the link's secret is not in the database.
    link_secret = html.split("/accounts/invitation/")[1].split("/")[0]
    assert link_secret not in invitation.token_hash
    assert "/accounts/invitation/" not in client.get("/accounts/users/").content.decode()
    assert AuditEvent.objects.filter(action="invitation.create", actor=site_admin).exists()


def test_people_who_are_not_site_admins_cannot_invite(client, owner):
    client.force_login(owner)
    response = client.post("/accounts/users/", {"invite": "1", "invite-username": "newbie"})
    assert response.status_code == 403
    assert not Invitation.objects.exists()


def test_accepting_an_invitation_sets_the_password_once(client, site_admin):
    invitation, raw = services.invitation_create(by=site_admin, username="newbie")
    assert client.get(f"/accounts/invitation/{raw}/").status_code == 200
    response = accept(client, raw)
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?username=newbie"
    user = User.objects.get(username="newbie")
    assert user.check_password(NEW_PASSWORD)
    invitation.refresh_from_db()
    assert invitation.used_at is not None and invitation.user == user


def test_a_used_invitation_is_gone(client, site_admin):
    _, raw = services.invitation_create(by=site_admin, username="newbie")
    accept(client, raw)
    response = accept(client, raw, password="another-passphrase-99")
    assert response.status_code == 410
    assert "already used" in response.content.decode()
    assert User.objects.get(username="newbie").check_password(NEW_PASSWORD)


def test_an_expired_invitation_is_gone(client, site_admin):
    invitation, raw = services.invitation_create(by=site_admin, username="newbie")
    Invitation.objects.filter(pk=invitation.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    response = client.get(f"/accounts/invitation/{raw}/")
    assert response.status_code == 410
    assert "expired" in response.content.decode()
    assert accept(client, raw).status_code == 410
    assert not User.objects.filter(username="newbie").exists()


def test_an_unknown_invitation_link_is_not_found(client):
    response = client.get("/accounts/invitation/not-a-real-token/")
    assert response.status_code == 404
    assert "not valid" in response.content.decode()


def test_a_weak_password_is_refused_inline_and_the_link_stays_usable(client, site_admin):
    _, raw = services.invitation_create(by=site_admin, username="newbie")
    response = accept(client, raw, password="12345678")
    assert response.status_code == 400
    html = response.content.decode()
    assert "too short" in html or "too common" in html
    assert not User.objects.filter(username="newbie").exists()
    assert accept(client, raw).status_code == 302


def test_mismatched_passwords_are_refused_inline(client, site_admin):
    _, raw = services.invitation_create(by=site_admin, username="newbie")
    response = accept(client, raw, again="something-else-entirely")
    assert response.status_code == 400
    assert "The two passwords differ" in response.content.decode()


@pytest.mark.parametrize("username, complaint", [
    ("root", "is taken"),
    ("<script>alert(1)</script>", "letters, digits"),
    ("", "This field is required"),
])
def test_invitation_usernames_are_validated(client, site_admin, username, complaint):
    client.force_login(site_admin)
    response = client.post("/accounts/users/", {"invite": "1", "invite-username": username})
    assert response.status_code == 400
    assert complaint in response.content.decode()
    assert "<script>alert(1)</script>" not in response.content.decode()
    assert not Invitation.objects.exists()


def test_site_admin_creates_an_account_directly(client, site_admin):
    client.force_login(site_admin)
    response = client.post("/accounts/users/", {"user-username": "direct", "user-password": NEW_PASSWORD})
    assert response.status_code == 302
    assert User.objects.get(username="direct").check_password(NEW_PASSWORD)
