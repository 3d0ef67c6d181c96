"""A new person joins through an invitation link, as they would in the browser."""

import re

import pytest
from playwright.sync_api import expect

from tests.conftest import browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.smoke]
NEW_PASSWORD = "lantern-orbit-quietly-7"


def test_invited_person_sets_a_password_logs_in_sees_projects_and_logs_out(_browser, live_asgi, site_admin):
    admin_context = _browser.new_context(base_url=live_asgi)
    admin_page = admin_context.new_page()
    browser_login(admin_page, "root")
    expect(admin_page.get_by_test_id("whoami")).to_have_text("root")
    admin_page.get_by_role("link", name="Admin").click()
    admin_page.locator("#id_invite-username").fill("newbie")
    admin_page.get_by_role("button", name="Create invitation link").click()
    link = admin_page.get_by_test_id("invitation-link").input_value()
    assert re.match(rf"{live_asgi}/accounts/invitation/[\w-]+/$", link)
    admin_context.close()

    context = _browser.new_context(base_url=live_asgi)
    page = context.new_page()
    page.goto(link)
    expect(page.get_by_role("heading", name="Welcome, newbie")).to_be_visible()
    page.get_by_label("Password", exact=True).fill("short")
    page.get_by_label("Password (again)").fill("short")
    page.get_by_role("button", name="Set password").click()
    expect(page.locator(".field-error").first).to_contain_text("too short")

    page.get_by_label("Password", exact=True).fill(NEW_PASSWORD)
    page.get_by_label("Password (again)").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Set password").click()
    expect(page.get_by_text("Your password is set")).to_be_visible()
    expect(page.get_by_label("Username")).to_have_value("newbie")
    page.get_by_label("Password").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Log in").click()

    expect(page.get_by_role("heading", name="Projects")).to_be_visible()
    expect(page.get_by_test_id("no-projects")).to_be_visible()
    expect(page.get_by_test_id("whoami")).to_have_text("newbie")

    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    page.goto("/projects/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/projects/$"))

    page.goto(link)  # the link worked once
    expect(page.get_by_test_id("invitation-error")).to_contain_text("already used")
    context.close()
