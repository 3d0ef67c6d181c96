"""Provider groups → project roles and site admin, applied at each sign-in and session re-check."""

import time

import pytest
from django.contrib.auth import get_user_model

from apps.accounts import services
from apps.projects.models import AuditEvent, Membership
from apps.projects.services import role_create
from tests.factories import ProjectFactory
from tests.sso.conftest import provider_user

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]
User = get_user_model()


@pytest.fixture
def projects(owner, project):
    return project, ProjectFactory(name="Second"), ProjectFactory(name="Third")


def _map(site_admin_user, group, project=None, role="", site_admin=False):
    return services.sso_mapping_create(by=site_admin_user, provider_id="corp", group=group, project=project,
                                       role=role, site_admin=site_admin)


def _roles(user) -> dict:
    return {m.project.name: (m.role_name, m.source) for m in Membership.objects.filter(user=user).select_related(
        "project", "custom_role")}


def test_groups_add_change_and_remove_memberships_and_hand_added_ones_stay(person, corp, site_admin, projects, owner):
    first, second, third = projects
    custom = role_create(actor=owner, project=first, name="Labeller", permissions=["annotation.submit"])
    _map(site_admin, "ml-team", first, "scientist")
    _map(site_admin, "ml-leads", first, "admin")  # two groups on one project: the stronger role
    _map(site_admin, "ml-team", second, "viewer")
    _map(site_admin, "labellers-first", first, "Labeller")
    provider_user(corp, "lena", groups=["ml-team", "ml-leads"])
    person.sign_in("lena")
    lena = User.objects.get(username="lena")
    assert _roles(lena) == {first.name: ("Admin", "groups"), second.name: ("Viewer", "groups")}

    # By hand: a membership in `third` (kept whatever the groups say).
    services_member = Membership.objects.create(project=third, user=lena, role="viewer")
    person.client.post("/accounts/logout/")
    provider_user(corp, "lena", groups=["labellers-first"])
    person.sign_in("lena")
    assert _roles(lena) == {first.name: (custom.name, "groups"), third.name: ("Viewer", "manual")}

    person.client.post("/accounts/logout/")
    provider_user(corp, "lena", groups=[])
    person.sign_in("lena")
    assert _roles(lena) == {third.name: ("Viewer", "manual")}
    assert Membership.objects.filter(pk=services_member.pk).exists()
    actions = list(AuditEvent.objects.filter(project=first).values_list("action", "after__source")
                   .order_by("id"))
    assert ("member.add", "groups") in actions and ("member.role_change", "groups") in actions
    assert ("member.remove", "groups") in actions


def test_a_hand_added_membership_is_not_changed_by_a_group(person, corp, site_admin, projects):
    first, _, _ = projects
    _map(site_admin, "ml-team", first, "scientist")
    provider_user(corp, "mia", groups=["ml-team"])
    mia = User.objects.create_user(username="mia", email="mia@corp.example")
    services.sso_link_approve(by=site_admin, username="mia", provider_id="corp", email="mia@corp.example")
    Membership.objects.create(project=first, user=mia, role="viewer")
    person.sign_in("mia")
    assert _roles(mia) == {first.name: ("Viewer", "manual")}


def test_a_group_gives_and_takes_site_admin_but_a_hand_made_site_admin_stays(person, corp, site_admin, client):
    _map(site_admin, "wb-admins", site_admin=True)
    provider_user(corp, "nina", groups=["wb-admins"])
    person.sign_in("nina")
    nina = User.objects.get(username="nina")
    assert nina.is_staff and person.client.get("/accounts/sso/").status_code == 200
    person.client.post("/accounts/logout/")
    provider_user(corp, "nina", groups=[])
    person.sign_in("nina")
    nina.refresh_from_db()
    assert not nina.is_staff and person.client.get("/accounts/sso/").status_code == 403
    assert AuditEvent.objects.filter(action="user.site_admin_revoke", target_id=str(nina.pk)).exists()

    nina.is_staff = True  # made site admin by hand: no group sync takes it away
    nina.save()
    person.client.post("/accounts/logout/")
    person.sign_in("nina")
    nina.refresh_from_db()
    assert nina.is_staff


def test_the_last_owner_is_not_removed_by_a_group_sync(person, corp, site_admin, db):
    lonely = ProjectFactory(name="Lonely")
    _map(site_admin, "owners", lonely, "owner")
    provider_user(corp, "olga", groups=["owners"])
    person.sign_in("olga")
    olga = User.objects.get(username="olga")
    assert _roles(olga) == {"Lonely": ("Owner", "groups")}
    person.client.post("/accounts/logout/")
    provider_user(corp, "olga", groups=[])
    person.sign_in("olga")
    assert _roles(olga) == {"Lonely": ("Owner", "groups")}


def test_the_session_is_rechecked_and_group_changes_apply_without_signing_in_again(person, corp, site_admin, projects,
                                                                                  settings):
    first, _, _ = projects
    _map(site_admin, "ml-team", first, "scientist")
    provider_user(corp, "pete", groups=["ml-team"])
    person.sign_in("pete")
    assert person.client.get(f"/api/projects/{first.pk}/").status_code == 200
    provider_user(corp, "pete", groups=[])
    settings.SSO_REVALIDATE_S = 1
    time.sleep(1.1)
    assert person.client.get(f"/api/projects/{first.pk}/").status_code == 404  # refreshed: groups re-read
    assert person.client.get("/projects/").status_code == 200  # still signed in


def test_a_person_disabled_at_the_provider_loses_their_session_at_the_next_check(person, corp, settings):
    provider_user(corp, "quinn")
    person.sign_in("quinn")
    assert person.client.get("/projects/").status_code == 200
    provider_user(corp, "quinn", active=False)
    assert person.client.get("/projects/").status_code == 200  # within the interval: not asked yet
    settings.SSO_REVALIDATE_S = 1
    time.sleep(1.1)
    response = person.client.get("/projects/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    event = AuditEvent.objects.get(action="sso.session_ended")
    assert "refused" in event.after["reason"]


def test_a_disabled_person_cannot_sign_in_again_at_the_provider(person, corp):
    provider_user(corp, "rita", active=False)
    with pytest.raises(AssertionError, match="the provider refused the login"):
        person.provider_login("rita")


@pytest.mark.parametrize("groups, message", [
    ([f"g{i}" for i in range(1001)], "more groups than Workbench accepts"),
    (["x" * 257], "a group name Workbench cannot accept"),
    ([{"nested": "object"}], "a group name Workbench cannot accept"),
    ("not-a-list-but-one-group", None),
])
def test_oversized_or_malformed_group_claims_are_refused_not_trimmed(person, corp, groups, message):
    corp.control("user", username="sam", password="correct-horse-battery-9", email="sam@corp.example",
                 claims={"groups": groups})
    response = person.sign_in("sam")
    if message is None:  # a single string is one group
        assert response.status_code == 302
    else:
        assert response.status_code == 403 and message in response.content.decode()
        assert not User.objects.filter(username="sam").exists()


def test_an_oversized_claim_is_not_kept_and_hostile_names_stay_text(person, corp, site_admin, projects):
    first, _, _ = projects
    hostile = '<img src=x onerror="alert(1)">'
    _map(site_admin, hostile, first, "viewer")
    corp.control("user", username="tom", password="correct-horse-battery-9", email="tom@corp.example",
                 claims={"groups": [hostile], "blob": "b" * 500_000, "name": "<script>alert(1)</script>"})
    assert person.sign_in("tom").status_code == 302
    from allauth.socialaccount.models import SocialAccount

    account = SocialAccount.objects.get(user__username="tom")
    assert "blob" not in account.extra_data and account.extra_data["groups"] == [hostile]
    assert _roles(User.objects.get(username="tom")) == {first.name: ("Viewer", "groups")}
    person.client.force_login(site_admin)
    page = person.client.get("/accounts/sso/").content.decode()
    assert hostile not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
