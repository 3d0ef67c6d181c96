"""A site admin registers a provider in the browser: the loopback address is refused until it is
allowlisted, the key is never shown again (only its last four characters), the provider's models
are fetched from its real GET /models (this server's /v1), it is enabled for a project and then
disabled; a name with HTML reads as text, a file:// URL is refused next to its field, and a
project owner who is not site staff gets 404."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.accounts import services as account_services
from apps.providers.models import Provider
from apps.registry.selectors import model_slug
from tests.conftest import browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]


def test_site_admin_registers_allowlists_fetches_models_enables_and_disables_a_provider(
        page, live_asgi, site_admin, owner, project, tiny_model):
    _, key = account_services.token_create(user=owner, name="provider", project=project,
                                           permissions=["project.view", "model.view", "model.generate"],
                                           expires_at=timezone.now() + timedelta(days=1))
    browser_login(page, "root")
    page.get_by_role("link", name="Providers").click()
    expect(page.get_by_role("heading", name="Providers", exact=True)).to_be_visible()

    form = page.get_by_test_id("provider-form")
    form.get_by_label("Name").fill("<b>Lab</b> server")
    form.get_by_label("Base URL").fill("file:///etc/passwd")
    form.get_by_role("button", name="Save provider").click()
    expect(page.locator(".field.has-error").filter(has_text="Base URL")).to_contain_text("must start with https://")

    form = page.get_by_test_id("provider-form")
    form.get_by_label("Base URL").fill(f"{live_asgi}/v1")
    form.get_by_label("API key").fill(key)
    form.get_by_role("button", name="Save provider").click()
    expect(page.locator(".field.has-error").filter(has_text="Base URL")).to_contain_text("allowlist")
    assert not Provider.objects.exists()

    page.get_by_label("Address or range").fill("127.0.0.1")
    page.get_by_role("button", name="Allowlist").click()
    expect(page.get_by_test_id("allowlist")).to_contain_text("127.0.0.1/32")

    form = page.get_by_test_id("provider-form")
    form.get_by_label("Name").fill("<b>Lab</b> server")
    form.get_by_label("Base URL").fill(f"{live_asgi}/v1")
    form.get_by_label("API key").fill(key)
    form.get_by_role("button", name="Save provider").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("<b>Lab</b> server")  # as text, not markup
    expect(page.get_by_test_id("api-key-hint")).to_have_text("…" + key[-4:])
    assert key not in page.content()
    expect(page.get_by_label("API key")).to_have_value("")

    page.get_by_role("button", name="Fetch models from the provider").click()
    expect(page.get_by_role("status")).to_contain_text("The provider lists 1 model(s).")
    expect(page.get_by_label("Models")).to_have_value(model_slug(tiny_model.name))  # /v1 lists API ids

    page.get_by_label("Project", exact=True).select_option(label="Alpha")
    page.get_by_role("button", name="Enable for project").click()
    expect(page.get_by_test_id("enabled-projects")).to_contain_text("Alpha")

    page.get_by_label("Enabled", exact=True).uncheck()
    page.get_by_test_id("provider-form").get_by_role("button", name="Save provider").click()
    expect(page.get_by_role("status")).to_contain_text("saved")
    provider = Provider.objects.get()
    assert provider.enabled is False and provider.enablements.get().project == project
    assert key not in page.content()

    page.get_by_role("button", name="Disable for Alpha").click()
    expect(page.get_by_test_id("enabled-projects")).to_contain_text("No project yet.")

    page.get_by_role("button", name="Log out").click()
    browser_login(page, owner.username)
    expect(page.get_by_test_id("whoami")).to_have_text(owner.username)
    expect(page.get_by_role("link", name="Providers")).to_have_count(0)
    response = page.goto(f"/providers/{provider.pk}/")
    assert response.status == 404
    assert re.search("Lab", page.content()) is None
