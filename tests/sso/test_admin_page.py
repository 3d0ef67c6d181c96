"""The single-sign-on admin page: site admins only; mappings and link approvals, audited."""

import pytest

from apps.accounts.models import SsoGroupMapping, SsoLinkApproval
from apps.projects.models import AuditEvent

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(60)]


@pytest.mark.parametrize("who", ["anonymous", "owner", "admin", "viewer", "outsider"])
def test_only_site_admins_reach_the_page(client, corp, request, who, project, site_admin):
    """Every form of the page (add a mapping, delete one, approve a link), not only the first."""
    from apps.accounts import services

    kept = services.sso_mapping_create(by=site_admin, provider_id="corp", group="kept", project=project,
                                       role="viewer")
    if who != "anonymous":
        client.force_login(request.getfixturevalue(who))
    answers = [client.get("/accounts/sso/"),
               client.post("/accounts/sso/", {"form": "mapping", "mapping-provider_id": "corp", "mapping-group": "g",
                                              "mapping-project": project.pk, "mapping-role": "owner"}),
               client.post("/accounts/sso/", {"form": "delete", "mapping": kept.pk}),
               client.post("/accounts/sso/", {"form": "link", "link-username": "olivia", "link-provider_id": "corp",
                                              "link-email": "attacker@evil.example"})]
    expected = 302 if who == "anonymous" else 403
    assert [a.status_code for a in answers] == [expected] * 4
    assert list(SsoGroupMapping.objects.values_list("group", flat=True)) == ["kept"]
    assert not SsoLinkApproval.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="sso.").exclude(action="sso.mapping_create").exists()


def test_a_site_admin_maps_groups_and_approves_links(client, corp, site_admin, project, owner):
    client.force_login(site_admin)
    assert client.get("/accounts/sso/").status_code == 200
    response = client.post("/accounts/sso/", {"form": "mapping", "mapping-provider_id": "corp",
                                              "mapping-group": "ml-team", "mapping-project": project.pk,
                                              "mapping-role": "scientist"})
    assert response.status_code == 302
    client.post("/accounts/sso/", {"form": "mapping", "mapping-provider_id": "corp", "mapping-group": "admins",
                                   "mapping-site_admin": "on"})
    assert sorted(SsoGroupMapping.objects.values_list("group", "role", "site_admin")) == [
        ("admins", "", True), ("ml-team", "scientist", False)]
    bad = client.post("/accounts/sso/", {"form": "mapping", "mapping-provider_id": "corp", "mapping-group": "x",
                                         "mapping-project": project.pk, "mapping-role": "no-such-role"})
    assert bad.status_code == 400 and "There is no role called" in bad.content.decode()

    client.post("/accounts/sso/", {"form": "link", "link-username": owner.username, "link-provider_id": "corp",
                                   "link-email": owner.email})
    assert SsoLinkApproval.objects.get().user == owner
    mapping = SsoGroupMapping.objects.get(group="ml-team")
    assert client.post("/accounts/sso/", {"form": "delete", "mapping": mapping.pk}).status_code == 302
    assert client.post("/accounts/sso/", {"form": "delete", "mapping": mapping.pk}).status_code == 404
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"sso.mapping_create", "sso.mapping_delete", "sso.link_approve"} <= actions


def test_a_link_is_approved_only_for_the_accounts_own_email(client, corp, site_admin, owner):
    client.force_login(site_admin)
    response = client.post("/accounts/sso/", {"form": "link", "link-username": owner.username,
                                              "link-provider_id": "corp", "link-email": "attacker@evil.example"})
    assert response.status_code == 400 and not SsoLinkApproval.objects.exists()
