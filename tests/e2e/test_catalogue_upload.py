"""A site admin uploads a base model's files into the catalogue from the models page: a pickle
checkpoint is refused on the page, naming the files; safetensors files are taken, checked and
loaded by the worker's function, and the entry is ready for projects. The admin then manages the
entry from the same table: not enabled by default any more, refused deletion while a project uses
it, deleted (its files with it) once none does."""

from pathlib import Path

import pytest
from playwright.sync_api import expect

from apps.registry.models import CatalogueModel
from apps.registry.services import catalogue_disable, catalogue_enable, run_catalogue_preparation
from tests.conftest import browser_login
from tests.workers.test_models import save_tiny_model

pytestmark = pytest.mark.e2e


def test_a_site_admin_uploads_a_model_into_the_catalogue_from_the_models_page(page, site_admin, tmp_path, project,
                                                                              admin):
    save_tiny_model(tmp_path / "tiny")
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04not to be opened")
    browser_login(page, "root")
    page.goto("/models/")
    form = page.get_by_test_id("catalogue-upload")
    form.get_by_label("Name").fill("Uploaded tiny")
    form.get_by_label("Files").set_input_files([tmp_path / "pytorch_model.bin", tmp_path / "tiny" / "config.json"])
    form.get_by_role("button", name="Upload").click()
    form = page.get_by_test_id("catalogue-upload")
    expect(form.locator(".form-error, .field-error")).to_contain_text("pickle checkpoint")
    assert CatalogueModel.objects.count() == 0

    form.get_by_label("Name").fill("Uploaded tiny")
    form.get_by_label("Files").set_input_files(sorted((tmp_path / "tiny").iterdir()))
    form.get_by_label("Enabled in every new project").check()
    form.get_by_role("button", name="Upload").click()
    expect(page.locator(".messages")).to_contain_text("“Uploaded tiny” is uploaded: a worker checks and loads it.")
    catalogue = page.get_by_test_id("site-catalogue")
    expect(catalogue).to_contain_text("checking")

    entry = CatalogueModel.objects.get()
    run_catalogue_preparation(entry.pk)  # what the worker does
    page.reload()
    row = page.get_by_test_id("site-catalogue").locator("tr", has_text="Uploaded tiny")
    expect(row).to_contain_text("ready")
    expect(row).to_contain_text("yes")  # enabled in every new project

    row.get_by_role("button", name="Not by default").click()
    expect(page.locator(".messages")).to_contain_text("“Uploaded tiny” is no longer enabled in every new project.")
    row = page.get_by_test_id("site-catalogue").locator("tr", has_text="Uploaded tiny")
    expect(row.locator("td").nth(2)).to_have_text("no")
    assert not CatalogueModel.objects.get().default_enabled

    catalogue_enable(user=admin, project=project, entry_id=entry.pk)  # the project's admin, on their own page
    asked = []

    def decline(dialog):
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", decline)
    row.get_by_role("button", name="Delete").click()
    expect(row).to_be_visible()
    assert asked == ["Delete “Uploaded tiny” from the catalogue? Files uploaded for it are removed."]
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Delete").click()
    expect(page.locator(".messages")).to_contain_text("“Uploaded tiny” is enabled in 1 project (Alpha)")
    assert CatalogueModel.objects.filter(pk=entry.pk).exists() and Path(entry.source_path).exists()

    catalogue_disable(user=admin, project=project, entry_id=entry.pk)
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("site-catalogue").locator("tr", has_text="Uploaded tiny").get_by_role(
        "button", name="Delete").click()
    expect(page.locator(".messages")).to_contain_text("“Uploaded tiny” is deleted from the catalogue.")
    expect(page.get_by_test_id("site-catalogue")).to_contain_text("The catalogue is empty.")
    assert not CatalogueModel.objects.exists() and not Path(entry.source_path).exists()
