"""A site admin deletes a base model from the catalogue (issue #19): only a signed-in site admin may,
and only once no project uses it (enabled, aliased, or the base of an adapter): 409 naming how and where."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from apps.accounts import services as account_services
from apps.projects.models import AuditEvent
from apps.registry.models import CatalogueModel, ModelAlias, RegisteredModel
from apps.registry.services import _catalogue_row, catalogue_disable, run_catalogue_preparation
from tests.factories import MembershipFactory
from tests.registry.test_catalogue import model_root, ready_entry  # noqa: F401  (fixtures)
from tests.registry.test_catalogue_upload import left_behind, model_files, tiny_dir, upload  # noqa: F401

pytestmark = pytest.mark.django_db


def url(entry) -> str:
    return f"/api/catalogue/{entry.pk}/"


def test_only_a_signed_in_site_admin_deletes_a_catalogue_model(client, ready_entry, project, owner, admin,  # noqa: F811
                                                              scientist, viewer, outsider, site_admin):
    assert client.delete(url(ready_entry)).status_code in (401, 403)  # anonymous
    for person in (owner, admin, scientist, viewer, outsider):  # project roles are not the site's admin
        client.force_login(person)
        assert client.delete(url(ready_entry)).status_code == 404
    client.logout()
    MembershipFactory(project=project, user=site_admin, role="owner")
    _, key = account_services.token_create(user=site_admin, name="api", permissions=["project.view", "model.view"],
                                           project=project, expires_at=timezone.now() + timedelta(days=1))
    # An API token carries project permissions only, a site admin's included.
    assert client.delete(url(ready_entry), HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 404
    assert CatalogueModel.objects.filter(pk=ready_entry.pk).exists()
    assert not AuditEvent.objects.filter(action="catalogue.delete").exists()

    client.force_login(site_admin)
    assert client.delete(url(ready_entry)).status_code == 204
    assert not CatalogueModel.objects.filter(pk=ready_entry.pk).exists()
    assert client.get("/api/catalogue/").json()["results"] == []
    event = AuditEvent.objects.get(action="catalogue.delete")
    assert event.project is None and event.actor == site_admin and event.before["name"] == "Tiny base"
    assert client.delete(url(ready_entry)).status_code == 404  # already gone
    assert client.delete("/api/catalogue/999999/").status_code == 404


def test_a_catalogue_model_any_project_uses_is_refused_with_409_saying_how_and_where(
        client, ready_entry, project, other_project, owner, outsider, site_admin):  # noqa: F811
    base = _catalogue_row(project, ready_entry, actor=owner)[0]
    other_base = _catalogue_row(other_project, ready_entry, actor=owner)[0]
    adapter = RegisteredModel.objects.create(
        project=project, name="Tuned", format="peft", kind="adapter", base_model=base, source_path="/a",
        weights_path="/a", status="ready", info=base.info, created_by=owner)
    alias = ModelAlias.objects.create(project=project, model=base, version=base, name="production")
    client.force_login(site_admin)

    def refused() -> dict:
        answer = client.delete(url(ready_entry))
        assert answer.status_code == 409, answer.content
        return answer.json()

    assert refused() == {"detail": f"“Tiny base” is aliased in 1 project ({project.name}): it can be deleted once "
                                   "no project uses it.", "field": "catalogue_model"}
    alias.delete()
    assert refused()["detail"].startswith(f"“Tiny base” is the base of adapters in 1 project ({project.name}):")
    # Disabled in the project (by its owner), the base still carries the adapter built on it.
    catalogue_disable(user=owner, project=project, entry_id=ready_entry.pk)
    assert refused()["detail"].startswith(f"“Tiny base” is the base of adapters in 1 project ({project.name}):")
    RegisteredModel.objects.filter(pk=adapter.pk).update(deleted_at=timezone.now())
    assert refused()["detail"].startswith(f"“Tiny base” is enabled in 1 project ({other_project.name}):")
    assert CatalogueModel.objects.filter(pk=ready_entry.pk).exists()
    assert not AuditEvent.objects.filter(action="catalogue.delete").exists()

    catalogue_disable(user=outsider, project=other_project, entry_id=ready_entry.pk)
    assert client.delete(url(ready_entry)).status_code == 204
    # The projects' rows stay for the lineage pointing at them, no longer tied to the catalogue.
    assert set(RegisteredModel.all_objects.filter(pk__in=[base.pk, other_base.pk]).values_list(
        "catalogue", flat=True)) == {None}
    client.force_login(owner)
    assert client.get(f"/api/projects/{project.pk}/catalogue/").json()["results"] == []


def test_a_model_a_worker_still_prepares_is_refused(client, site_admin, model_root):  # noqa: F811
    from tests.registry.test_registry import tiny_model_dir

    path, _ = tiny_model_dir(model_root / "tiny")
    client.force_login(site_admin)
    entry_id = client.post("/api/catalogue/", {"name": "Tiny", "path": str(path)},
                           content_type="application/json").json()["id"]
    answer = client.delete(f"/api/catalogue/{entry_id}/")
    assert answer.status_code == 409 and answer.json()["field"] == "status"
    assert answer.json()["detail"] == "“Tiny” is being prepared by a worker (checking); delete it once that ends."
    run_catalogue_preparation(entry_id)
    assert client.delete(f"/api/catalogue/{entry_id}/").status_code == 204


def test_an_uploaded_models_files_go_with_it(client, site_admin, tiny_dir, left_behind,  # noqa: F811
                                             django_capture_on_commit_callbacks):
    client.force_login(site_admin)
    with django_capture_on_commit_callbacks(execute=False):  # the worker's check runs here instead
        entry_id = upload(client, "Uploaded", model_files(tiny_dir)).json()["id"]
    run_catalogue_preparation(entry_id)
    entry = CatalogueModel.objects.get(pk=entry_id)
    assert entry.status == "ready", entry.error
    assert len(left_behind()) == 1 and Path(entry.source_path).is_dir()
    with django_capture_on_commit_callbacks(execute=True):
        assert client.delete(f"/api/catalogue/{entry_id}/").status_code == 204
    assert left_behind() == [] and not Path(entry.source_path).exists()
