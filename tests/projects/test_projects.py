import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.projects.models import AuditEvent, Membership, Project
from tests.factories import MembershipFactory, ProjectFactory

pytestmark = pytest.mark.django_db


@pytest.mark.smoke
def test_creating_a_project_makes_the_creator_its_owner(client, viewer):
    client.force_login(viewer)
    response = client.post("/projects/", {"name": "  Llama   tuning ", "description": "first try"})
    project = Project.objects.get(name="Llama tuning")
    assert response.status_code == 302
    assert response["Location"] == f"/projects/{project.pk}/"
    assert Membership.objects.get(project=project, user=viewer).role == "owner"
    assert AuditEvent.objects.filter(project=project, action="project.create", actor=viewer).exists()


def test_a_project_needs_a_name(client, viewer):
    client.force_login(viewer)
    response = client.post("/projects/", {"name": "   "})
    assert response.status_code == 400
    assert "This field is required" in response.content.decode() or "needs a name" in response.content.decode()
    assert not Project.objects.filter(memberships__user=viewer, memberships__role="owner").exists()


def test_project_names_are_rendered_as_text_not_markup(client, viewer):
    client.force_login(viewer)
    client.post("/projects/", {"name": "<img src=x onerror=alert(1)>"})
    html = client.get("/projects/").content.decode()
    assert "<img src=x onerror=alert(1)>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_the_project_list_shows_only_my_projects(client, viewer, project, other_project, outsider):
    client.force_login(viewer)
    html = client.get("/projects/").content.decode()
    assert "Alpha" in html
    assert "Bravo" not in html


def test_the_dashboard_shows_members_counts_and_recent_activity(client, viewer, owner, project):
    from apps.projects.services import project_update

    project_update(user=owner, project=project, description="Now with a description")
    client.force_login(viewer)
    response = client.get(f"/projects/{project.pk}/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "olivia" in html and "victor" in html
    assert "Now with a description" in html
    assert "project.update" in html


def test_a_non_member_gets_404_for_the_dashboard_and_the_api(client, outsider, project):
    client.force_login(outsider)
    page = client.get(f"/projects/{project.pk}/")
    assert page.status_code == 404
    assert "Alpha" not in page.content.decode()
    api = client.get(f"/api/projects/{project.pk}/")
    assert api.status_code == 404
    assert "Alpha" not in api.content.decode()
    assert client.get(f"/api/projects/{project.pk}/members/").status_code == 404
    assert client.get("/api/projects/999999/").status_code == 404  # unknown looks the same


def test_anonymous_api_calls_are_refused(client, project):
    assert client.get("/api/projects/").status_code in (401, 403)
    assert client.get(f"/api/projects/{project.pk}/").status_code in (401, 403)


def test_a_viewer_cannot_rename_and_is_told_which_permission_is_missing(client, viewer, project):
    client.force_login(viewer)
    response = client.patch(f"/api/projects/{project.pk}/", {"name": "Mine"}, content_type="application/json")
    assert response.status_code == 403
    assert response.json()["missing_permission"] == "project.edit"
    project.refresh_from_db()
    assert project.name == "Alpha"


def test_an_admin_renames_through_the_api_and_it_is_audited(client, admin, project):
    client.force_login(admin)
    response = client.patch(f"/api/projects/{project.pk}/", {"name": "Alpha 2"}, content_type="application/json")
    assert response.status_code == 200
    assert response.json()["name"] == "Alpha 2"
    event = AuditEvent.objects.get(project=project, action="project.update")
    assert event.before["name"] == "Alpha" and event.after["name"] == "Alpha 2"


@pytest.mark.parametrize("payload, field", [
    ({"name": ""}, "name"),
    ({"name": "x" * 121}, "name"),
    ({"name": ["not", "a", "string"]}, "name"),
])
def test_bad_project_input_gets_a_clear_error_naming_the_field(client, viewer, payload, field):
    client.force_login(viewer)
    response = client.post("/api/projects/", payload, content_type="application/json")
    assert response.status_code == 400
    assert field in response.json()


def test_malformed_json_is_a_clear_400(client, viewer):
    client.force_login(viewer)
    response = client.post("/api/projects/", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


def test_audit_events_cannot_be_edited_or_deleted(owner, project):
    event = AuditEvent.objects.filter(project=project).first() or AuditEvent.objects.create(
        project=project, action="test")
    event.action = "tampered"
    with pytest.raises(RuntimeError):
        event.save()
    with pytest.raises(RuntimeError):
        event.delete()


def test_a_global_django_permission_does_not_expose_projects(client, outsider, project):
    from django.contrib.auth.models import Permission

    outsider.user_permissions.add(Permission.objects.get(codename="view_project"))
    client.force_login(outsider)
    assert client.get(f"/api/projects/{project.pk}/").status_code == 404
    assert "Alpha" not in client.get("/projects/").content.decode()


def _queries_for(client, url):
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_project_list_and_dashboard_queries_do_not_grow_with_data(client, viewer, project):
    client.force_login(viewer)
    small_list = _queries_for(client, "/projects/")
    small_dashboard = _queries_for(client, f"/projects/{project.pk}/")
    assert small_list > 0 and small_dashboard > 0
    for index in range(40):
        MembershipFactory(project=ProjectFactory(name=f"P{index:03}"), user=viewer)
        MembershipFactory(project=project)
    assert _queries_for(client, "/projects/") == small_list
    assert _queries_for(client, f"/projects/{project.pk}/") == small_dashboard


def test_add_member_and_invite_offer_the_least_privileged_role_first(client, admin, project):
    import re

    client.force_login(admin)
    page = client.get(f"/projects/{project.pk}/members/").content.decode()
    selects = re.findall(r'<select name="(?:add|invite)-role"[^>]*>(.*?)</select>', page, re.S)
    assert len(selects) == 2
    for options in selects:
        selected = re.findall(r'<option value="(\w+)"[^>]*selected', options)
        assert selected == ["viewer"], options
