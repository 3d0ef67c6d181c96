"""Aliases: a project's names for model versions (production, staging, its own), each move one
audited action, protected ones moved only with model.promote, resolved as name@alias (a bare name
meaning its production alias) on every request."""

import pytest

from apps.core.errors import NotFound
from apps.projects.models import AuditEvent
from apps.registry.models import ModelAlias, RegisteredModel
from apps.registry.selectors import resolve_model_ref

pytestmark = pytest.mark.django_db


def ready(project, name, **extra) -> RegisteredModel:
    return RegisteredModel.objects.create(project=project, name=name, format=extra.pop("format", "hf_dir"),
                                          source_path="/m", weights_path="/m", status="ready", info={}, **extra)


@pytest.fixture
def family(project):
    """A base with two adapters of it, and an unrelated model, all ready in `project`."""
    base = ready(project, "Support")
    v1 = ready(project, "Support v1", kind="adapter", base_model=base, format="peft")
    v2 = ready(project, "Support v2", kind="adapter", base_model=base, format="peft")
    return base, v1, v2, ready(project, "Unrelated")


def put_alias(client, model, name, body):
    return client.put(f"/api/models/{model.pk}/aliases/{name}/", body, content_type="application/json")


def test_an_alias_is_created_moved_and_resolved_each_move_one_audit_event(client, family, project, scientist):
    base, v1, v2, _ = family
    client.force_login(scientist)
    assert resolve_model_ref(scientist, project, "Support") == base  # no alias: today's behaviour
    created = put_alias(client, base, "staging", {"version": v1.pk})
    assert created.status_code == 200, created.content
    assert created.json()["ref"] == "Support@staging" and created.json()["version_name"] == "Support v1"
    assert resolve_model_ref(scientist, project, "Support@staging") == v1
    assert resolve_model_ref(scientist, project, "support@STAGING") == v1  # names are case-insensitive
    assert resolve_model_ref(scientist, project, "Support") == base  # a bare name means production only

    assert put_alias(client, base, "production", {"version": v1.pk}).status_code == 200
    assert resolve_model_ref(scientist, project, "Support") == v1
    moved = put_alias(client, base, "production", {"version": v2.pk})
    assert moved.status_code == 200 and moved.json()["version"] == v2.pk
    assert resolve_model_ref(scientist, project, "Support") == v2  # read afresh: no cache to wait for
    assert resolve_model_ref(scientist, project, "Support v1") == v1  # a version by its own name still
    with pytest.raises(NotFound):
        resolve_model_ref(scientist, project, "Support@canary")

    move = AuditEvent.objects.filter(project=project, action="model.alias_move").get()
    assert move.before["version"] == v1.pk and move.after["version"] == v2.pk
    assert move.after["alias"] == "Support@production"
    assert AuditEvent.objects.filter(project=project, action="model.alias_create").count() == 2
    listed = client.get(f"/api/models/{base.pk}/aliases/").json()["results"]
    assert [(a["name"], a["version"], a["updated_by"]) for a in listed] == [
        ("production", v2.pk, scientist.username), ("staging", v1.pk, scientist.username)]

    assert client.delete(f"/api/models/{base.pk}/aliases/staging/").status_code == 204
    with pytest.raises(NotFound):
        resolve_model_ref(scientist, project, "Support@staging")


def test_bad_alias_input_is_refused_naming_the_field(client, family, project, scientist, other_project, outsider):
    base, v1, _, unrelated = family
    theirs = ready(other_project, "Theirs")
    client.force_login(scientist)
    onto_other_project = put_alias(client, base, "production", {"version": theirs.pk})
    assert onto_other_project.status_code == 400 and onto_other_project.json()["field"] == "version"
    not_a_version = put_alias(client, base, "production", {"version": unrelated.pk})
    assert not_a_version.status_code == 400 and not_a_version.json()["field"] == "version"
    assert "version" in put_alias(client, base, "production", {"version": "x"}).json()  # the serializer's form
    assert "version" in put_alias(client, base, "production", {}).json()
    for bad in ("Production", "-x", "a" * 49, "prod%20uction", "team.a!", "%40x"):
        answer = put_alias(client, base, bad, {"version": v1.pk})
        assert answer.status_code == 400 and answer.json()["field"] == "name", (bad, answer.content)
    checking = ready(project, "Support v3", kind="adapter", base_model=base, format="peft")
    RegisteredModel.objects.filter(pk=checking.pk).update(status="checking")
    assert put_alias(client, base, "production", {"version": checking.pk}).json()["field"] == "version"
    assert not ModelAlias.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="model.alias").exists()
    # Another project's model: not found, whatever the body.
    client.force_login(outsider)
    assert put_alias(client, base, "production", {"version": theirs.pk}).status_code == 404


def test_a_protected_alias_moves_only_for_holders_of_model_promote(client, family, project, admin, scientist, viewer):
    base, v1, v2, _ = family
    client.force_login(scientist)
    refused = put_alias(client, base, "production", {"version": v1.pk, "protected": True})
    assert refused.status_code == 403 and refused.json()["missing_permission"] == "model.promote"
    client.force_login(admin)
    assert put_alias(client, base, "production", {"version": v1.pk, "protected": True}).json()["protected"] is True

    client.force_login(scientist)
    moved = put_alias(client, base, "production", {"version": v2.pk})
    assert moved.status_code == 403 and moved.json()["missing_permission"] == "model.promote"
    assert "model.promote" in moved.json()["detail"]
    assert client.delete(f"/api/models/{base.pk}/aliases/production/").json()["missing_permission"] == "model.promote"
    assert put_alias(client, base, "team-a", {"version": v2.pk}).status_code == 200  # unprotected: fine
    client.force_login(viewer)
    assert put_alias(client, base, "team-a", {"version": v1.pk}).json()["missing_permission"] == "model.alias"

    client.force_login(admin)
    assert put_alias(client, base, "production", {"version": v2.pk}).status_code == 200
    assert ModelAlias.objects.get(name="production").version == v2
    assert resolve_model_ref(admin, project, "Support") == v2


def test_a_version_an_alias_points_at_is_not_deleted_from_under_it(client, family, project, admin):
    base, v1, _, _ = family
    client.force_login(admin)
    put_alias(client, base, "production", {"version": v1.pk})
    refused = client.delete(f"/api/models/{v1.pk}/")
    assert refused.status_code == 400 and refused.json()["field"] == "model"
    assert "Support@production" in refused.json()["detail"]
    client.delete(f"/api/models/{base.pk}/aliases/production/")
    assert client.delete(f"/api/models/{v1.pk}/").status_code == 204


def test_new_model_names_cannot_hold_the_alias_separator(client, project, scientist, settings, tmp_path):
    settings.MODEL_ROOTS = [tmp_path]
    client.force_login(scientist)
    answer = client.post(f"/api/projects/{project.pk}/models/", {"name": "a@b", "path": "x"},
                         content_type="application/json")
    assert answer.status_code == 400 and answer.json()["field"] == "name"


def test_a_project_with_adapters_aliases_and_shares_is_deleted_whole(project, other_project, owner, family):
    from apps.projects.services import project_delete

    base, v1, _, _ = family
    ModelAlias.objects.create(project=project, model=base, version=v1, name="production")
    received = ready(other_project, "Received", kind="adapter", format="peft", shared_from=v1,
                     lineage={"shared_from": {"project": project.pk}})
    project_delete(user=owner, project=project, confirm_name=project.name)
    assert not RegisteredModel.all_objects.filter(project_id=base.project_id).exists()
    assert not ModelAlias.objects.exists()
    received.refresh_from_db()  # the other project keeps its row and where it came from
    assert received.shared_from_id is None and received.lineage["shared_from"]["project"]
