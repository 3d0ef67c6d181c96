"""Signing in through the browser: Chromium (Playwright) on the live ASGI server, the real provider's
login form, its redirects back, and the group-made membership on the project page."""

import os

import pytest

from tests.conftest import CHROMIUM, CHROMIUM_ARGS, PASSWORD
from tests.sso.conftest import register_client

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def chromium():
    from playwright.sync_api import sync_playwright

    # As tests/e2e/conftest.py: Playwright's sync API keeps an event loop in this thread.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


def test_a_person_signs_in_with_the_provider_in_the_browser_lands_in_their_groups_project_and_signs_out_of_both(
        chromium, live_asgi, corp, project, owner, site_admin, settings):
    from apps.accounts import services
    from tests.sso.conftest import provider_user

    settings.LOCAL_PASSWORD_LOGIN = False
    register_client(corp, live_asgi)
    services.sso_mapping_create(by=site_admin, provider_id="corp", group="ml-team", project=project, role="scientist")
    provider_user(corp, "vera", groups=["ml-team", "<b>bold</b>"])
    context = chromium.new_context(base_url=live_asgi)
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        page.goto("/accounts/login/")
        assert page.get_by_label("Password").count() == 0  # passwords off: providers only
        page.get_by_role("button", name="Sign in with Corp ID").click()
        page.wait_for_url(f"{corp.url}/login/**")
        page.get_by_label("Provider username").fill("vera")
        page.get_by_label("Provider password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in at provider").click()
        page.wait_for_url(f"{live_asgi}/projects/")
        page.get_by_role("link", name=project.name).click()
        page.wait_for_url(f"{live_asgi}/projects/{project.pk}/**")
        assert "vera" in page.content()

        # Logging out passes by the provider, which ends its session, and lands on the login page;
        # signing in again asks for the provider's password.
        page.get_by_role("button", name="Log out").click()
        page.wait_for_url(f"{live_asgi}/accounts/login/")
        page.get_by_role("button", name="Sign in with Corp ID").click()
        page.wait_for_url(f"{corp.url}/login/**")
        assert page.get_by_label("Provider password").is_visible()
    finally:
        context.close()


def _page(chromium, base_url):
    context = chromium.new_context(base_url=base_url)
    page = context.new_page()
    page.set_default_timeout(15_000)
    return context, page


def test_a_site_admin_maps_a_hostile_group_name_on_the_page_and_sees_it_as_text(chromium, live_asgi, corp, project,
                                                                                site_admin):
    from playwright.sync_api import expect

    from tests.conftest import browser_login

    context, page = _page(chromium, live_asgi)
    try:
        browser_login(page, "root")
        page.goto("/accounts/users/")
        page.get_by_role("link", name="Single sign-on: group mappings and account links").click()
        page.get_by_label("Identity provider").first.select_option("corp")
        page.get_by_label("Group", exact=True).fill('<img src=x onerror="document.title=1">')
        page.get_by_label("Project", exact=True).select_option(str(project.pk))
        page.get_by_label("Role", exact=True).fill("nope")
        page.get_by_role("button", name="Add mapping").click()
        expect(page.locator(".field-error")).to_contain_text("There is no role called")
        page.get_by_label("Role", exact=True).fill("viewer")
        page.get_by_role("button", name="Add mapping").click()
        expect(page.get_by_test_id("sso-mappings")).to_contain_text('<img src=x onerror="document.title=1">')
        expect(page.get_by_test_id("sso-mappings")).to_contain_text(f"viewer in {project.name}")
        assert page.title() != "1"
    finally:
        context.close()


def test_a_refused_sign_in_shows_why_in_the_browser(chromium, live_asgi, corp):
    from django.contrib.auth import get_user_model
    from playwright.sync_api import expect

    from tests.sso.conftest import provider_user

    get_user_model().objects.create_user(username="wendy", email="wendy@corp.example", password="x" * 12)
    register_client(corp, live_asgi)
    provider_user(corp, "wendy-idp", email="wendy@corp.example")
    context, page = _page(chromium, live_asgi)
    try:
        page.goto("/accounts/login/")
        page.get_by_role("button", name="Sign in with Corp ID").click()
        page.get_by_label("Provider username").fill("wendy-idp")
        page.get_by_label("Provider password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in at provider").click()
        expect(page.get_by_test_id("sso-error")).to_contain_text("A site admin must link it")
        page.get_by_role("link", name="Back to the login page").click()
        expect(page.get_by_role("button", name="Sign in with Corp ID")).to_be_visible()
    finally:
        context.close()
