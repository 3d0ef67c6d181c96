"""The IAM rules, through the API: owners, self-changes, role names, unknown permissions,
live role changes, removal, object grants, token scoping and the audit log."""

import csv
import io
import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from guardian.shortcuts import assign_perm

from apps.accounts import services as account_services
from apps.accounts.models import ApiToken
from apps.datasets.models import Dataset
from apps.projects import selectors, services
from apps.projects.api import AUDIT_COLUMNS
from apps.projects.models import AuditEvent, Membership, Role
from apps.projects.permissions import PERMISSIONS
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db


def call(client, method: str, url: str, body=None, **headers):
    if method == "get":
        return client.get(url, **headers)
    payload = json.dumps(body) if body is not None else ""
    return getattr(client, method)(url, payload, content_type="application/json", **headers)


def bearer(raw: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def logged_in(user) -> Client:
    other = Client()
    other.force_login(user)
    return other


def membership(project, user) -> Membership:
    return Membership.objects.get(project=project, user=user)


def member_url(project, member) -> str:
    return f"/api/projects/{project.pk}/members/{membership(project, member).pk}/"


def dataset(project, name: str) -> Dataset:
    return Dataset.objects.create(project=project, name=name)


@pytest.fixture
def steward(project, owner):
    """A member whose custom role holds every permission, but who is not an Owner."""
    role = services.role_create(actor=owner, project=project, name="Steward", permissions=sorted(PERMISSIONS))
    user = UserFactory(username="stella")
    MembershipFactory(project=project, user=user, role="", custom_role=role)
    return user


# --- the last owner ---------------------------------------------------------------------------

def test_the_last_owner_cannot_leave_the_project(client, owner, project):
    client.force_login(owner)
    response = call(client, "delete", member_url(project, owner))
    assert response.status_code == 409
    assert "last owner" in response.json()["detail"]
    assert membership(project, owner).role == "owner"
    assert not AuditEvent.objects.filter(action__in=["member.leave", "member.remove"]).exists()


def test_the_last_owner_cannot_be_removed_even_by_someone_holding_every_permission(client, owner, steward,
                                                                                     project):
    client.force_login(steward)
    response = call(client, "delete", member_url(project, owner))
    assert response.status_code == 409
    assert membership(project, owner).role == "owner"
    assert not AuditEvent.objects.filter(action="member.remove").exists()


def test_the_last_owner_cannot_be_demoted_even_by_someone_holding_every_permission(client, owner, steward,
                                                                                     project):
    client.force_login(steward)
    response = call(client, "patch", member_url(project, owner), {"role": "admin"})
    assert response.status_code == 409
    assert membership(project, owner).role == "owner"
    assert not AuditEvent.objects.filter(action="member.role_change").exists()


def test_an_owner_cannot_demote_themselves(client, owner, project):
    client.force_login(owner)
    response = call(client, "patch", member_url(project, owner), {"role": "viewer"})
    assert response.status_code == 403
    assert membership(project, owner).role == "owner"


def test_once_there_is_a_second_owner_the_first_can_be_demoted(client, owner, admin, project):
    client.force_login(owner)
    assert call(client, "patch", member_url(project, admin), {"role": "owner"}).status_code == 200
    second_owner = logged_in(admin)
    response = call(second_owner, "patch", member_url(project, owner), {"role": "admin"})
    assert response.status_code == 200
    assert membership(project, owner).role == "admin"
    # Now adam is the last owner, and the same rule keeps him.
    assert call(second_owner, "delete", member_url(project, admin)).status_code == 409
    assert membership(project, admin).role == "owner"


# --- nobody grants what they do not hold ---------------------------------------------------------

def test_an_admin_cannot_add_an_owner(client, admin, project):
    UserFactory(username="newbie")
    client.force_login(admin)
    response = call(client, "post", f"/api/projects/{project.pk}/members/", {"username": "newbie", "role": "owner"})
    assert response.status_code == 403
    assert response.json()["missing_permission"] == "owner.manage"
    assert not Membership.objects.filter(project=project, user__username="newbie").exists()
    assert not AuditEvent.objects.filter(action="member.add").exists()


def test_an_admin_cannot_promote_a_member_to_owner(client, admin, viewer, project):
    client.force_login(admin)
    response = call(client, "patch", member_url(project, viewer), {"role": "Owner"})
    assert response.status_code == 403
    assert response.json()["missing_permission"] == "owner.manage"
    assert membership(project, viewer).role == "viewer"


def test_an_admin_cannot_remove_or_demote_an_owner(client, owner, admin, project):
    client.force_login(admin)
    assert call(client, "delete", member_url(project, owner)).json()["missing_permission"] == "owner.manage"
    assert call(client, "patch", member_url(project, owner), {"role": "viewer"}).status_code == 403
    assert membership(project, owner).role == "owner"


@pytest.fixture
def deleter_role(owner, project):
    """A custom role holding project.delete, which admins do not hold."""
    return services.role_create(actor=owner, project=project, name="Deleter",
                                permissions=["project.view", "project.delete"])


def test_an_admin_cannot_add_a_member_with_a_custom_role_holding_permissions_they_lack(client, admin, project,
                                                                                        deleter_role):
    UserFactory(username="newbie")
    client.force_login(admin)
    response = call(client, "post", f"/api/projects/{project.pk}/members/",
                    {"username": "newbie", "role": "deleter"})
    assert response.status_code == 403
    assert response.json()["missing_permission"] == "project.delete"
    assert not Membership.objects.filter(project=project, user__username="newbie").exists()


def test_an_admin_cannot_give_an_existing_member_a_custom_role_holding_permissions_they_lack(
        client, admin, viewer, project, deleter_role):
    client.force_login(admin)
    response = call(client, "patch", member_url(project, viewer), {"role": "Deleter"})
    assert response.status_code == 403
    assert response.json()["missing_permission"] == "project.delete"
    viewer_membership = membership(project, viewer)
    assert (viewer_membership.role, viewer_membership.custom_role) == ("viewer", None)


def test_an_admin_cannot_create_a_custom_role_holding_permissions_they_lack(client, admin, project):
    client.force_login(admin)
    response = call(client, "post", f"/api/projects/{project.pk}/roles/",
                    {"name": "Wrecker", "permissions": ["project.view", "project.delete"]})
    assert response.status_code == 403
    assert response.json()["missing_permission"] == "project.delete"
    assert not Role.objects.filter(project=project).exists()
    assert not AuditEvent.objects.filter(action="role.create").exists()


def test_an_admin_cannot_add_a_permission_they_lack_to_a_custom_role(client, admin, owner, project):
    role = services.role_create(actor=owner, project=project, name="Readers", permissions=["dataset.view"])
    client.force_login(admin)
    response = call(client, "patch", f"/api/projects/{project.pk}/roles/{role.pk}/",
                    {"permissions": ["dataset.view", "project.delete"]})
    assert response.status_code == 403
    assert response.json()["missing_permission"] == "project.delete"
    role.refresh_from_db()
    assert role.permissions == ["dataset.view", "project.view"]
    assert not AuditEvent.objects.filter(action="role.update").exists()


def test_an_admin_cannot_take_away_a_permission_they_lack_from_a_custom_role(client, admin, project,
                                                                             deleter_role):
    client.force_login(admin)
    response = call(client, "patch", f"/api/projects/{project.pk}/roles/{deleter_role.pk}/",
                    {"permissions": ["project.view"]})
    assert response.status_code == 403
    assert response.json()["missing_permission"] == "project.delete"
    deleter_role.refresh_from_db()
    assert deleter_role.permissions == ["project.delete", "project.view"]


def test_an_admin_cannot_change_their_own_membership(client, admin, other_project, outsider, project):
    client.force_login(admin)
    response = call(client, "patch", member_url(project, admin),
                    {"role": "owner", "user": outsider.pk, "project": other_project.pk,
                     "permissions": sorted(PERMISSIONS)})
    assert response.status_code == 403
    own = membership(project, admin)
    assert (own.role, own.custom_role, own.user, own.project) == ("admin", None, admin, project)
    assert not Membership.objects.filter(project=other_project, user=admin).exists()
    assert not AuditEvent.objects.filter(action="member.role_change").exists()


def test_a_role_change_ignores_fields_other_than_the_role(client, admin, viewer, outsider, other_project, project):
    client.force_login(admin)
    target = membership(project, viewer)
    response = call(client, "patch", member_url(project, viewer),
                    {"role": "annotator", "user": outsider.pk, "project": other_project.pk,
                     "permissions": sorted(PERMISSIONS)})
    assert response.status_code == 200
    target.refresh_from_db()
    assert (target.role, target.user, target.project) == ("annotator", viewer, project)
    assert response.json()["permissions"] == ["annotation.submit", "compare.vote", "project.view"]


# --- role names and permission names -------------------------------------------------------------

def test_a_role_name_differing_only_in_case_is_refused(client, owner, project):
    client.force_login(owner)
    url = f"/api/projects/{project.pk}/roles/"
    assert call(client, "post", url, {"name": "Curators", "permissions": ["dataset.view"]}).status_code == 201
    response = call(client, "post", url, {"name": "cURATORS", "permissions": ["dataset.view"]})
    assert response.status_code == 400
    assert response.json()["field"] == "name"
    assert list(Role.objects.filter(project=project).values_list("name", flat=True)) == ["Curators"]


def test_renaming_a_role_onto_another_roles_name_is_refused(client, owner, project):
    first = services.role_create(actor=owner, project=project, name="Curators", permissions=["dataset.view"])
    second = services.role_create(actor=owner, project=project, name="Labellers", permissions=["annotation.submit"])
    client.force_login(owner)
    response = call(client, "patch", f"/api/projects/{project.pk}/roles/{second.pk}/", {"name": " curators "})
    assert response.status_code == 400
    assert response.json()["field"] == "name"
    second.refresh_from_db()
    assert (first.name, second.name) == ("Curators", "Labellers")


@pytest.mark.parametrize("name", ["Admin", "admin", "OWNER", "Viewer", "scientist", "  Annotator "])
def test_a_custom_role_cannot_take_a_built_in_roles_name(client, owner, project, name):
    client.force_login(owner)
    response = call(client, "post", f"/api/projects/{project.pk}/roles/",
                    {"name": name, "permissions": ["dataset.view"]})
    assert response.status_code == 400
    assert response.json()["field"] == "name"
    assert not Role.objects.filter(project=project).exists()


@pytest.fixture
def curators(owner, project):
    return services.role_create(actor=owner, project=project, name="Curators", permissions=["dataset.view"])


@pytest.mark.parametrize("method, path, body, field", [
    ("post", "roles/", {"name": "Odd", "permissions": ["dataset.view", "dataset.fly"]}, "permissions"),
    ("patch", "roles/{role}/", {"permissions": ["project.view", "no.such"]}, "permissions"),
    ("post", "tokens/", {"name": "ci", "permissions": ["project.view", "dataset.fly"]}, "permissions"),
    ("post", "grants/", {"username": "gina", "object_type": "dataset", "object_id": "{dataset}",
                         "permission": "dataset.fly"}, "permission"),
    ("post", "grants/", {"username": "gina", "object_type": "dataset", "object_id": "{dataset}",
                         "permission": "project.delete"}, "permission"),  # not a dataset permission
    ("post", "members/", {"username": "gina", "role": "Overlord"}, "role"),
], ids=["role-create", "role-update", "token-create", "grant-create", "grant-of-a-project-permission",
        "member-add-with-unknown-role"])
def test_unknown_permission_and_role_names_get_400_naming_the_field(client, owner, project, curators, method,
                                                                     path, body, field):
    UserFactory(username="gina")
    target = dataset(project, "Reviews")
    body = {k: (target.pk if v == "{dataset}" else v) for k, v in body.items()}
    client.force_login(owner)
    audit_before = AuditEvent.objects.count()
    response = call(client, method, f"/api/projects/{project.pk}/" + path.format(role=curators.pk), body)
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert AuditEvent.objects.count() == audit_before
    curators.refresh_from_db()
    assert curators.permissions == ["dataset.view", "project.view"]
    assert not ApiToken.objects.exists()


def test_an_unknown_permission_is_named_in_the_error(client, owner, project):
    client.force_login(owner)
    response = call(client, "post", f"/api/projects/{project.pk}/roles/",
                    {"name": "Odd", "permissions": ["dataset.fly"]})
    assert response.status_code == 400
    assert "dataset.fly" in response.json()["detail"]


# --- changes take effect on the next request -----------------------------------------------------

def test_changing_a_custom_roles_permissions_changes_what_its_members_can_do_on_the_next_request(
        client, owner, project):
    role = services.role_create(actor=owner, project=project, name="Auditors", permissions=["project.view"])
    una = UserFactory(username="una")
    MembershipFactory(project=project, user=una, role="", custom_role=role)
    client.force_login(una)
    owner_client = logged_in(owner)
    audit_url = f"/api/projects/{project.pk}/audit/"
    role_url = f"/api/projects/{project.pk}/roles/{role.pk}/"

    refused = client.get(audit_url)
    assert refused.status_code == 403
    assert refused.json()["missing_permission"] == "audit.view"

    assert call(owner_client, "patch", role_url, {"permissions": ["project.view", "audit.view"]}).status_code == 200
    assert client.get(audit_url).status_code == 200

    assert call(owner_client, "patch", role_url, {"permissions": ["project.view"]}).status_code == 200
    assert client.get(audit_url).status_code == 403


def test_a_removed_members_next_call_gets_404_and_their_tokens_stop_working_on_the_project(client, owner, admin,
                                                                                           project):
    client.force_login(admin)
    created = call(client, "post", f"/api/projects/{project.pk}/tokens/",
                   {"name": "ci", "permissions": ["project.view", "dataset.view"]})
    assert created.status_code == 201
    _, personal_raw = account_services.token_create(user=admin, name="mine", permissions=["project.view"])
    project_url = f"/api/projects/{project.pk}/"
    tokens = [bearer(created.json()["token"]), bearer(personal_raw)]
    assert client.get(project_url).status_code == 200
    assert all(Client().get(project_url, **token).status_code == 200 for token in tokens)

    assert call(logged_in(owner), "delete", member_url(project, admin)).status_code == 204

    gone = client.get(project_url)
    assert gone.status_code == 404
    assert "Alpha" not in gone.content.decode()
    assert client.get(f"/api/projects/{project.pk}/members/").status_code == 404
    for token in tokens:
        assert Client().get(project_url, **token).status_code == 404
        assert Client().get(f"/api/projects/{project.pk}/datasets/", **token).status_code == 404
    # The tokens still authenticate: it is the project that is gone from them, not the person.
    assert Client().get("/api/me/", **tokens[1]).status_code == 200


# --- object grants ----------------------------------------------------------------------------

def test_an_object_grant_shows_one_dataset_but_not_its_neighbours_nor_the_project(client, owner, outsider,
                                                                                  project):
    granted, neighbour = dataset(project, "Granted"), dataset(project, "Neighbour")
    response = call(logged_in(owner), "post", f"/api/projects/{project.pk}/grants/",
                    {"username": outsider.username, "object_type": "dataset", "object_id": granted.pk,
                     "permission": "dataset.view"})
    assert response.status_code == 201
    client.force_login(outsider)
    seen = client.get(f"/api/datasets/{granted.pk}/")
    assert seen.status_code == 200
    assert seen.json()["name"] == "Granted"
    for url in (f"/api/datasets/{neighbour.pk}/", f"/api/projects/{project.pk}/",
                f"/api/projects/{project.pk}/datasets/", f"/api/projects/{project.pk}/members/"):
        refused = client.get(url)
        assert refused.status_code == 404, url
        assert "Neighbour" not in refused.content.decode() and "Alpha" not in refused.content.decode()
    # Seeing is all the grant gives.
    delete = call(client, "delete", f"/api/datasets/{granted.pk}/")
    assert delete.status_code == 403
    assert delete.json()["missing_permission"] == "dataset.delete"
    assert Dataset.objects.filter(pk=granted.pk).exists()


def test_the_shared_list_holds_exactly_the_datasets_granted_to_me(client, owner, scientist, project):
    gina = UserFactory(username="gina")
    here, not_granted = dataset(project, "Here"), dataset(project, "Not granted")
    charlie = ProjectFactory(name="Charlie")
    elsewhere = dataset(charlie, "Elsewhere")
    services.grant_create(actor=owner, obj=here, username="gina", permission="dataset.view")
    assign_perm("dataset_view", gina, elsewhere)
    client.force_login(gina)

    listed = client.get("/api/datasets/shared/").json()["results"]
    assert sorted((d["id"], d["project"]) for d in listed) == sorted(
        [(here.pk, project.pk), (elsewhere.pk, charlie.pk)])
    assert not_granted.pk not in {d["id"] for d in listed}

    grant_id = next(g.pk for g in selectors.project_grants(project=project) if g.user_id == gina.pk)
    revoked = call(logged_in(owner), "delete", f"/api/projects/{project.pk}/grants/{grant_id}/")
    assert revoked.status_code == 204
    assert [d["id"] for d in client.get("/api/datasets/shared/").json()["results"]] == [elsewhere.pk]
    # A member sees datasets through their role, not as shared ones.
    assert logged_in(scientist).get("/api/datasets/shared/").json()["results"] == []


# --- tokens ------------------------------------------------------------------------------------

def test_a_token_for_project_a_cannot_act_on_project_b(client, owner, project, other_project):
    MembershipFactory(project=other_project, user=owner, role="owner")
    _, raw = account_services.token_create(user=owner, name="alpha-only", permissions=sorted(PERMISSIONS),
                                           project=project)
    token = bearer(raw)
    assert client.get(f"/api/projects/{project.pk}/", **token).status_code == 200
    b = f"/api/projects/{other_project.pk}"
    assert client.get(f"{b}/", **token).status_code == 404
    assert client.get(f"{b}/members/", **token).status_code == 404
    assert client.get(f"{b}/audit/", **token).status_code == 404
    assert call(client, "patch", f"{b}/", {"name": "Taken"}, **token).status_code == 404
    assert call(client, "post", f"{b}/datasets/", {"name": "Planted"}, **token).status_code == 404
    other_project.refresh_from_db()
    assert other_project.name == "Bravo"
    assert not Dataset.objects.filter(project=other_project).exists()


def test_a_project_token_cannot_hold_permissions_its_creator_lacks(client, admin, project):
    client.force_login(admin)
    response = call(client, "post", f"/api/projects/{project.pk}/tokens/",
                    {"name": "too-strong", "permissions": ["project.view", "project.delete"]})
    assert response.status_code == 403
    assert response.json()["missing_permission"] == "project.delete"
    assert not ApiToken.objects.exists()
    assert not AuditEvent.objects.filter(action="token.create").exists()


@pytest.mark.parametrize("expires_in", [timedelta(hours=-1), timedelta(seconds=-1), timedelta(days=400)],
                         ids=["an-hour-ago", "a-second-ago", "beyond-the-longest-lifetime"])
@pytest.mark.parametrize("url", ["/api/tokens/", "/api/projects/{project}/tokens/"], ids=["personal", "project"])
def test_token_creation_requires_an_expiry_in_the_allowed_future(client, admin, project, url, expires_in):
    client.force_login(admin)
    response = call(client, "post", url.format(project=project.pk),
                    {"name": "ci", "permissions": ["project.view"],
                     "expires_at": (timezone.now() + expires_in).isoformat()})
    assert response.status_code == 400
    assert response.json()["field"] == "expires_at"
    assert not ApiToken.objects.exists()


def test_a_token_with_an_expiry_in_the_future_is_created(client, admin, project):
    client.force_login(admin)
    expires_at = timezone.now() + timedelta(days=30)
    response = call(client, "post", f"/api/projects/{project.pk}/tokens/",
                    {"name": "ci", "permissions": ["project.view"], "expires_at": expires_at.isoformat()})
    assert response.status_code == 201
    assert ApiToken.objects.get().expires_at == expires_at


# --- the audit log -------------------------------------------------------------------------------

def _audited(project, action) -> AuditEvent:
    return AuditEvent.objects.get(project=project, action=action)


def test_member_writes_are_audited_with_actor_and_before_and_after(client, owner, admin, project):
    UserFactory(username="newbie")
    client.force_login(admin)
    members = f"/api/projects/{project.pk}/members/"
    added = call(client, "post", members, {"username": "newbie", "role": "viewer"})
    assert added.status_code == 201
    event = _audited(project, "member.add")
    assert (event.actor, event.before, event.after) == (admin, None, {"user": "newbie", "role": "Viewer"})
    assert event.target_id == str(added.json()["id"])

    url = f"{members}{added.json()['id']}/"
    assert call(client, "patch", url, {"role": "scientist"}).status_code == 200
    event = _audited(project, "member.role_change")
    assert event.actor == admin
    assert event.before == {"user": "newbie", "role": "Viewer"}
    assert event.after == {"user": "newbie", "role": "Scientist"}

    assert call(client, "delete", url).status_code == 204
    event = _audited(project, "member.remove")
    assert (event.actor, event.before, event.after) == (admin, {"user": "newbie", "role": "Scientist"}, None)

    listed = call(logged_in(owner), "get", f"/api/projects/{project.pk}/audit/?action=member.&actor=adam")
    assert [e["action"] for e in listed.json()["results"]] == ["member.remove", "member.role_change", "member.add"]


def test_role_and_grant_writes_are_audited_with_actor_and_after(client, admin, project):
    UserFactory(username="gina")
    target = dataset(project, "Reviews")
    client.force_login(admin)
    created = call(client, "post", f"/api/projects/{project.pk}/roles/",
                   {"name": "Curators", "permissions": ["dataset.view", "dataset.edit"]})
    assert created.status_code == 201
    event = _audited(project, "role.create")
    assert (event.actor, event.before) == (admin, None)
    assert event.after == {"name": "Curators", "permissions": ["dataset.edit", "dataset.view", "project.view"]}

    granted = call(client, "post", f"/api/projects/{project.pk}/grants/",
                   {"username": "gina", "object_type": "dataset", "object_id": target.pk,
                    "permission": "dataset.view"})
    assert granted.status_code == 201
    event = _audited(project, "grant.create")
    assert (event.actor, event.before) == (admin, None)
    assert event.after == {"user": "gina", "permission": "dataset.view"}
    assert (event.target_type, event.target_id) == ("datasets.dataset", str(target.pk))


def test_token_creation_and_revocation_are_audited_with_actor(client, admin, project):
    client.force_login(admin)
    created = call(client, "post", f"/api/projects/{project.pk}/tokens/",
                   {"name": "ci", "permissions": ["project.view", "audit.view"]})
    assert created.status_code == 201
    event = _audited(project, "token.create")
    assert (event.actor, event.before) == (admin, None)
    assert event.after == {"name": "ci", "permissions": ["audit.view", "project.view"], "expires_at": None}
    assert created.json()["token"] not in json.dumps(event.after)

    revoked = call(client, "delete", f"/api/tokens/{created.json()['id']}/")
    assert revoked.status_code == 200
    assert revoked.json()["active"] is False
    event = _audited(project, "token.revoke")
    assert (event.actor, event.before, event.after) == (admin, {"name": "ci"}, None)


def _csv_rows(response) -> list[dict]:
    text = b"".join(response.streaming_content).decode("utf-8")
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.parametrize("name", ["=cmd|' /C calc'!A0", "+cmd", "-cmd", "@SUM(A1)", "＝cmd", "＋cmd"])
def test_the_audit_csv_export_neutralises_cells_that_start_a_formula(client, owner, project, name):
    client.force_login(owner)
    assert call(client, "post", f"/api/projects/{project.pk}/roles/",
                {"name": name, "permissions": ["dataset.view"]}).status_code == 201
    response = client.get(f"/api/projects/{project.pk}/audit/export.csv")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == f'attachment; filename="audit-project-{project.pk}.csv"'
    rows = _csv_rows(response)
    (row,) = [r for r in rows if r["action"] == "role.create"]
    assert row["target_repr"] == "'" + name
    assert row["actor"] == "olivia"  # harmless cells are left alone
    assert json.loads(row["after"])["name"] == name


def test_the_audit_csv_export_neutralises_an_actor_name_that_starts_a_formula(client, owner, project):
    attacker = UserFactory(username="@attacker")
    MembershipFactory(project=project, user=attacker, role="admin")
    services.project_update(user=attacker, project=project, description="harmless")
    client.force_login(owner)
    rows = _csv_rows(client.get(f"/api/projects/{project.pk}/audit/export.csv"))
    (row,) = [r for r in rows if r["action"] == "project.update"]
    assert row["actor"] == "'@attacker"


def test_the_audit_jsonl_export_has_one_json_object_per_line(client, owner, admin, project):
    services.project_update(user=owner, project=project, description="first line\nsecond line\r\nthird")
    services.role_create(actor=owner, project=project, name="=cmd", permissions=["dataset.view"])
    client.force_login(admin)
    response = client.get(f"/api/projects/{project.pk}/audit/export.jsonl")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    text = b"".join(response.streaming_content).decode("utf-8")
    assert text.endswith("\n")
    lines = text.split("\n")[:-1]
    objects = [json.loads(line) for line in lines]
    assert all(isinstance(o, dict) and list(o) == AUDIT_COLUMNS for o in objects)
    assert len(objects) == AuditEvent.objects.filter(project=project).count() == 2
    assert objects[1]["after"]["description"] == "first line\nsecond line\r\nthird"
    assert objects[0]["target_repr"] == "=cmd"  # JSON is not a spreadsheet: values stay as they are


@pytest.mark.parametrize("suffix", ["xml", "xlsx", "CSV", "csv.gz", "json"])
def test_an_unknown_audit_export_format_is_404(client, owner, project, suffix):
    client.force_login(owner)
    response = client.get(f"/api/projects/{project.pk}/audit/export.{suffix}")
    assert response.status_code == 404
    assert "project.create" not in response.content.decode()


def test_the_audit_log_filters_by_action_prefix_and_by_actor(client, owner, admin, viewer, project):
    services.role_create(actor=owner, project=project, name="Curators", permissions=["dataset.view"])
    services.member_change_role(actor=admin, membership=membership(project, viewer), role="annotator")
    services.project_update(user=admin, project=project, description="by adam")
    client.force_login(owner)
    url = f"/api/projects/{project.pk}/audit/"

    by_action = client.get(url, {"action": "member."}).json()["results"]
    assert [e["action"] for e in by_action] == ["member.role_change"]

    by_actor = client.get(url, {"actor": "ADAM"}).json()["results"]
    assert [e["action"] for e in by_actor] == ["project.update", "member.role_change"]
    assert {e["actor"] for e in by_actor} == {"adam"}

    both = client.get(url, {"actor": "olivia", "action": "role."}).json()["results"]
    assert [e["action"] for e in both] == ["role.create"]

    later = (timezone.now() + timedelta(minutes=1)).isoformat()
    assert client.get(url, {"since": later}).json()["results"] == []
    assert len(client.get(url, {"until": later}).json()["results"]) == 3


@pytest.mark.parametrize("param", ["since", "until"])
@pytest.mark.parametrize("value", ["yesterday", "2026-13-45T00:00:00", "2026-01-01T25:00:00Z", "1700000000"])
@pytest.mark.parametrize("path", ["audit/", "audit/export.csv", "audit/export.jsonl"])
def test_a_malformed_time_filter_gets_400_naming_it(client, owner, project, path, param, value):
    client.force_login(owner)
    response = client.get(f"/api/projects/{project.pk}/{path}", {param: value})
    assert response.status_code == 400
    assert response.json()["field"] == param
    assert param in response.json()["detail"]


@pytest.mark.parametrize("path", ["audit/", "audit/export.csv", "audit/export.jsonl"])
def test_a_viewer_cannot_read_the_audit_log(client, viewer, project, path):
    client.force_login(viewer)
    response = client.get(f"/api/projects/{project.pk}/{path}")
    assert response.status_code == 403
    assert response.json()["missing_permission"] == "audit.view"


# --- ids from elsewhere, and what deleting and tokens must not do ------------------------------------

@pytest.mark.parametrize("method, path, body", [
    ("patch", "members/{membership}/", {"role": "viewer"}),
    ("delete", "members/{membership}/", None),
    ("patch", "roles/{role}/", {"name": "Hijacked"}),
    ("delete", "roles/{role}/", None),
    ("delete", "grants/{grant}/", None),
])
def test_an_id_from_another_project_is_404_through_this_projects_urls(client, admin, project, other_project,
                                                                       outsider, method, path, body):
    their_membership = membership(other_project, outsider)
    their_role = services.role_create(actor=outsider, project=other_project, name="Theirs",
                                      permissions=["dataset.view"])
    their_grant = assign_perm("dataset_view", UserFactory(username="gina"), dataset(other_project, "Theirs"))
    client.force_login(admin)
    url = f"/api/projects/{project.pk}/" + path.format(membership=their_membership.pk, role=their_role.pk,
                                                       grant=their_grant.pk)
    audit_before = AuditEvent.objects.count()
    assert call(client, method, url, body).status_code == 404
    assert AuditEvent.objects.count() == audit_before
    their_membership.refresh_from_db()
    their_role.refresh_from_db()
    assert (their_membership.role, their_role.name) == ("owner", "Theirs")
    assert type(their_grant).objects.filter(pk=their_grant.pk).exists()


def test_deleting_a_project_whose_members_hold_a_custom_role_succeeds(client, owner, project):
    readers = services.role_create(actor=owner, project=project, name="Readers", permissions=["dataset.view"])
    MembershipFactory(project=project, user=UserFactory(username="rita"), role="", custom_role=readers)
    client.force_login(owner)
    client.raise_request_exception = False  # see the status a caller would get
    response = call(client, "delete", f"/api/projects/{project.pk}/", {"confirm_name": "Alpha"})
    assert response.status_code == 204
    assert not type(project).objects.filter(pk=project.pk).exists()
    assert not Role.objects.filter(pk=readers.pk).exists()


def test_a_token_for_project_a_cannot_revoke_a_token_of_project_b(client, owner, project, other_project):
    MembershipFactory(project=other_project, user=owner, role="owner")
    _, alpha_raw = account_services.token_create(user=owner, name="alpha", permissions=sorted(PERMISSIONS),
                                                 project=project)
    bravo_token, _ = account_services.token_create(user=owner, name="bravo", permissions=["project.view"],
                                                   project=other_project)
    response = call(client, "delete", f"/api/tokens/{bravo_token.pk}/", **bearer(alpha_raw))
    assert response.status_code == 404
    bravo_token.refresh_from_db()
    assert bravo_token.is_active


def test_a_project_token_does_not_list_datasets_shared_from_other_projects(client, admin, project):
    charlie = ProjectFactory(name="Charlie")
    secret = dataset(charlie, "Charlie secret")
    assign_perm("dataset_view", admin, secret)
    _, raw = account_services.token_create(user=admin, name="alpha", permissions=["project.view", "dataset.view"],
                                           project=project)
    assert client.get(f"/api/datasets/{secret.pk}/", **bearer(raw)).status_code == 404  # the detail agrees
    listed = client.get("/api/datasets/shared/", **bearer(raw))
    assert listed.status_code == 200
    assert "Charlie secret" not in listed.content.decode()


def test_a_token_asked_for_dataset_view_sees_the_projects_its_datasets_are_in(client, viewer, project):
    """No token lacks project.view: every permission implies it (a datasets-only token that could
    not see its project could not work), and the token never exceeds its user's access."""
    token, raw = account_services.token_create(user=viewer, name="datasets-only", permissions=["dataset.view"])
    assert token.permissions == ["dataset.view", "project.view"]
    assert client.get(f"/api/projects/{project.pk}/", **bearer(raw)).status_code == 200
    assert [p["id"] for p in client.get("/api/projects/", **bearer(raw)).json()["results"]] == [project.pk]
    assert call(client, "patch", f"/api/projects/{project.pk}/", {"description": "x"}, **bearer(raw)).status_code == 403


def test_a_read_only_token_cannot_make_its_user_leave_the_project(client, viewer, project):
    _, raw = account_services.token_create(user=viewer, name="read-only", permissions=["project.view"])
    response = call(client, "delete", member_url(project, viewer), **bearer(raw))
    assert response.status_code == 403
    assert Membership.objects.filter(project=project, user=viewer).exists()
