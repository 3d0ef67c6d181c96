"""The site's model catalogue: site admins register a base model once, projects enable it (a row on
the same weights, nothing copied), new projects start with the default ones (the demo model), and
adapters are shared with another project with their lineage."""

import pytest

from apps.projects.models import AuditEvent
from apps.registry.models import CatalogueModel, RegisteredModel
from apps.registry.services import run_catalogue_preparation
from tests.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.registry.test_registry import tiny_model_dir

pytestmark = pytest.mark.django_db


@pytest.fixture
def model_root(settings, tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    settings.MODEL_ROOTS = [root]
    return root


def catalogue_register(client, name, path, **extra):
    return client.post("/api/catalogue/", {"name": name, "path": str(path), **extra}, content_type="application/json")


@pytest.fixture
def ready_entry(client, site_admin, model_root):
    """A tiny model in the catalogue, prepared by the worker's function."""
    path, _ = tiny_model_dir(model_root / "tiny")
    client.force_login(site_admin)
    answer = catalogue_register(client, "Tiny base", path)
    assert answer.status_code == 201, answer.content
    run_catalogue_preparation(answer.json()["id"])
    client.logout()
    return CatalogueModel.objects.get(pk=answer.json()["id"])


def test_a_site_admin_registers_a_catalogue_model_once_and_a_worker_prepares_it(client, site_admin, admin, model_root):
    path, _ = tiny_model_dir(model_root / "tiny")
    client.force_login(admin)  # a project admin is not a site admin: the catalogue's admin side does not exist
    assert catalogue_register(client, "Tiny", path).status_code == 404
    assert client.get("/api/catalogue/").status_code == 404

    client.force_login(site_admin)
    answer = catalogue_register(client, "Tiny", path, default_enabled=True)
    assert answer.status_code == 201, answer.content
    assert answer.json()["status"] == "checking" and answer.json()["default_enabled"] is True
    assert AuditEvent.objects.filter(action="catalogue.register", project=None).count() == 1
    run_catalogue_preparation(answer.json()["id"])
    listed = client.get("/api/catalogue/").json()["results"]
    assert [(e["name"], e["status"]) for e in listed] == [("Tiny", "ready")]

    # Bad input names its field; nothing registered.
    assert catalogue_register(client, "tiny", path).json()["field"] == "name"  # names are unique, any case
    assert catalogue_register(client, "Has@sign", path).json()["field"] == "name"
    assert catalogue_register(client, "Outside", "/etc").json()["field"] == "path"
    bad_hub = client.post("/api/catalogue/", {"name": "Hub", "hub_id": "../etc"}, content_type="application/json")
    assert bad_hub.status_code == 400 and bad_hub.json()["field"] == "hub_id"
    assert CatalogueModel.objects.count() == 1
    entry = CatalogueModel.objects.get()
    off = client.patch(f"/api/catalogue/{entry.pk}/", {"default_enabled": False}, content_type="application/json")
    assert off.status_code == 200 and off.json()["default_enabled"] is False


def test_a_project_admin_enables_a_catalogue_model_on_the_same_weights(client, ready_entry, project, admin, scientist,
                                                                     outsider):
    client.force_login(scientist)  # sees the catalogue, may not enable
    listed = client.get(f"/api/projects/{project.pk}/catalogue/").json()["results"]
    assert [(e["name"], e["enabled"]) for e in listed] == [("Tiny base", False)]
    refused = client.post(f"/api/projects/{project.pk}/catalogue/", {"catalogue_model": ready_entry.pk},
                          content_type="application/json")
    assert refused.status_code == 403 and refused.json()["missing_permission"] == "model.enable"
    client.force_login(outsider)
    assert client.post(f"/api/projects/{project.pk}/catalogue/", {"catalogue_model": ready_entry.pk},
                       content_type="application/json").status_code == 404

    client.force_login(admin)
    answer = client.post(f"/api/projects/{project.pk}/catalogue/", {"catalogue_model": ready_entry.pk},
                         content_type="application/json")
    assert answer.status_code == 201, answer.content
    model = RegisteredModel.objects.get(pk=answer.json()["id"])
    assert model.project == project and model.catalogue == ready_entry and model.status == "ready"
    assert model.weights_path == ready_entry.weights_path  # nothing copied
    assert [m["name"] for m in client.get(f"/api/projects/{project.pk}/models/").json()["results"]] == ["Tiny base"]
    again = client.post(f"/api/projects/{project.pk}/catalogue/", {"catalogue_model": ready_entry.pk},
                        content_type="application/json")
    assert again.json()["id"] == model.pk  # enabling twice is one row
    unknown = client.post(f"/api/projects/{project.pk}/catalogue/", {"catalogue_model": 999999},
                          content_type="application/json")
    assert unknown.status_code == 400 and unknown.json()["field"] == "catalogue_model"

    assert client.delete(f"/api/projects/{project.pk}/catalogue/{ready_entry.pk}/").status_code == 204
    assert client.get(f"/api/projects/{project.pk}/models/").json()["results"] == []
    assert list(AuditEvent.objects.filter(project=project, action__in=["model.enable", "model.disable"])
                .order_by("id").values_list("action", flat=True)) == ["model.enable", "model.disable"]


def test_a_new_project_sees_the_default_catalogue_models_at_once_and_follows_their_preparation(
        client, site_admin, model_root):
    path, _ = tiny_model_dir(model_root / "tiny")
    client.force_login(site_admin)
    entry_id = catalogue_register(client, "Starter", path, default_enabled=True).json()["id"]
    catalogue_register(client, "Optional", path)

    person = UserFactory(username="newcomer")
    client.force_login(person)
    project = client.post("/api/projects/", {"name": "Fresh"}, content_type="application/json").json()
    models = client.get(f"/api/projects/{project['id']}/models/").json()["results"]
    assert [(m["name"], m["status"], m["catalogue"]) for m in models] == [("Starter", "checking", entry_id)]
    run_catalogue_preparation(entry_id)  # the worker: every project's row follows
    models = client.get(f"/api/projects/{project['id']}/models/").json()["results"]
    assert models[0]["status"] == "ready" and models[0]["info"]["model_type"] == "llama"


@pytest.mark.django_db(transaction=True)
def test_the_start_command_puts_the_demo_model_in_the_catalogue_for_every_new_project(client, settings, tmp_path):
    from django.core.management import call_command

    from apps.projects.management.commands.seed_demo import DEMO_MODEL

    settings.MODEL_ROOTS = [tmp_path / "models"]
    call_command("seed_demo")
    call_command("seed_demo")  # idempotent
    entry = CatalogueModel.objects.get()
    assert entry.name == DEMO_MODEL and entry.default_enabled
    assert RegisteredModel.objects.filter(catalogue=entry).count() == 1  # the demo project's

    person = UserFactory(username="newcomer")
    client.force_login(person)
    project = client.post("/api/projects/", {"name": "Mine"}, content_type="application/json").json()
    names = [m["name"] for m in client.get(f"/api/projects/{project['id']}/models/").json()["results"]]
    assert names == [DEMO_MODEL]


def test_an_older_demo_project_row_is_adopted_not_duplicated(site_admin, model_root, project, owner):
    from apps.registry.services import _catalogue_row, catalogue_add

    path, _ = tiny_model_dir(model_root / "tiny")
    own = RegisteredModel.objects.create(project=project, name="Tiny", format="hf_dir", source_path=str(path),
                                         status="ready", weights_path=str(path), info={})
    entry = catalogue_add(actor=site_admin, name="Tiny", path=str(path))
    row, made = _catalogue_row(project, entry, actor=owner)
    assert row.pk == own.pk and not made and row.catalogue == entry
    other = RegisteredModel.objects.create(project=ProjectFactory(name="Other"), name="Tiny", format="hf_dir",
                                           source_path="/elsewhere", status="ready", info={})
    with pytest.raises(Exception) as clash:
        _catalogue_row(other.project, entry, actor=owner)
    assert getattr(clash.value, "field", None) == "catalogue_model"


# --- sharing adapters -----------------------------------------------------------------------------

@pytest.fixture
def catalogue_adapter(ready_entry, project, owner):
    from apps.registry.services import _catalogue_row

    base = _catalogue_row(project, ready_entry, actor=owner)[0]
    return RegisteredModel.objects.create(
        project=project, name="Support tuned", format="peft", kind="adapter", base_model=base, source_path="/a",
        weights_path="/a", status="ready", info=base.info, created_by=owner,
        lineage={"job": 7, "dataset_version": 3, "content_hash": "c" * 64, "base_model": base.pk})


def test_an_adapter_is_shared_with_another_project_with_its_lineage(client, catalogue_adapter, project, admin,
                                                                   other_project, ready_entry):
    MembershipFactory(project=other_project, user=admin, role="owner")
    client.force_login(admin)
    answer = client.post(f"/api/models/{catalogue_adapter.pk}/shares/", {"project": other_project.pk},
                         content_type="application/json")
    assert answer.status_code == 201, answer.content
    shared = RegisteredModel.objects.get(pk=answer.json()["model"])
    assert shared.project == other_project and shared.shared_from == catalogue_adapter
    assert shared.weights_path == catalogue_adapter.weights_path  # nothing copied
    assert shared.lineage["content_hash"] == "c" * 64 and shared.lineage["job"] == 7
    assert shared.lineage["shared_from"] == {"project": project.pk, "project_name": project.name,
                                             "model": catalogue_adapter.pk, "model_name": "Support tuned"}
    # Its base is the other project's own row of the same catalogue model (enabled on the way: an owner there).
    assert shared.base_model.project == other_project and shared.base_model.catalogue == ready_entry
    listed = client.get(f"/api/models/{catalogue_adapter.pk}/shares/").json()["results"]
    assert [(s["project"], s["model"]) for s in listed] == [(other_project.pk, shared.pk)]
    names = [m["name"] for m in client.get(f"/api/projects/{other_project.pk}/models/").json()["results"]]
    assert sorted(names) == ["Support tuned", "Tiny base"]

    assert client.delete(f"/api/models/{catalogue_adapter.pk}/shares/{other_project.pk}/").status_code == 204
    names = [m["name"] for m in client.get(f"/api/projects/{other_project.pk}/models/").json()["results"]]
    assert names == ["Tiny base"]
    assert client.delete(f"/api/models/{catalogue_adapter.pk}/shares/{other_project.pk}/").status_code == 404
    actions = list(AuditEvent.objects.filter(project=project, action__startswith="model.").exclude(
        action="model.enable").order_by("id").values_list("action", flat=True))
    assert actions == ["model.share", "model.unshare"]


def test_sharing_is_refused_clearly(client, catalogue_adapter, project, admin, other_project, outsider):
    client.force_login(admin)
    # A project the sharer is not in: 404, nothing said about it.
    hidden = client.post(f"/api/models/{catalogue_adapter.pk}/shares/", {"project": other_project.pk},
                         content_type="application/json")
    assert hidden.status_code == 404 and b"Bravo" not in hidden.content
    # A scientist there may add models but not enable the base: the field is named.
    MembershipFactory(project=other_project, user=admin, role="scientist")
    missing_base = client.post(f"/api/models/{catalogue_adapter.pk}/shares/", {"project": other_project.pk},
                               content_type="application/json")
    assert missing_base.status_code == 400 and missing_base.json()["field"] == "project"
    same = client.post(f"/api/models/{catalogue_adapter.pk}/shares/", {"project": project.pk},
                       content_type="application/json")
    assert same.status_code == 400 and same.json()["field"] == "project"
    assert not RegisteredModel.objects.filter(project=other_project).exists()
    # Someone outside the adapter's project cannot even see it.
    client.force_login(outsider)
    assert client.post(f"/api/models/{catalogue_adapter.pk}/shares/", {"project": other_project.pk},
                       content_type="application/json").status_code == 404


def test_the_adapter_page_shares_it_with_a_project_the_person_may_add_models_to(client, catalogue_adapter, project,
                                                                                admin, other_project):
    MembershipFactory(project=other_project, user=admin, role="admin")
    client.force_login(admin)
    page = client.get(f"/projects/{project.pk}/models/{catalogue_adapter.pk}/").content.decode()
    assert f'<option value="{other_project.pk}">Bravo</option>' in page
    answer = client.post(f"/projects/{project.pk}/models/{catalogue_adapter.pk}/shares/",
                         {"project": other_project.pk, "action": "share"})
    assert answer.status_code == 302
    shared = RegisteredModel.objects.get(project=other_project, shared_from=catalogue_adapter)
    page = client.get(f"/projects/{other_project.pk}/models/{shared.pk}/").content.decode()
    assert "Shared from the project Alpha" in page
    listing = client.get(f"/projects/{other_project.pk}/models/").content.decode()
    assert 'data-entry="Tiny base"' in listing and "Support tuned" in listing

