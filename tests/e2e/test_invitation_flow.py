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


@pytest.mark.django_db(transaction=True)
def test_a_site_admin_resets_a_password_and_deactivates_an_account(_browser, live_asgi, site_admin):
    from django.contrib.auth import get_user_model

    from tests.factories import PASSWORD, UserFactory

    UserFactory(username="forgetful")
    person_context = _browser.new_context(base_url=live_asgi)
    person = person_context.new_page()
    browser_login(person, "forgetful", PASSWORD)
    expect(person.get_by_test_id("whoami")).to_have_text("forgetful")

    admin_context = _browser.new_context(base_url=live_asgi)
    admin = admin_context.new_page()
    browser_login(admin, "root")
    admin.goto("/accounts/users/")
    row = admin.get_by_test_id("account-forgetful")
    row.get_by_role("button", name="Reset password").click()
    link = admin.get_by_test_id("reset-link").input_value()
    assert re.match(rf"{live_asgi}/accounts/reset/\w+/[\w-]+/$", link)
    admin.reload()
    expect(admin.get_by_test_id("reset-link")).to_have_count(0)  # shown once

    stranger = _browser.new_context(base_url=live_asgi).new_page()
    stranger.goto(link)
    stranger.get_by_label("New password", exact=True).fill(NEW_PASSWORD)
    stranger.get_by_label("New password confirmation").fill(NEW_PASSWORD)
    stranger.get_by_role("button", name="Set password").click()
    expect(stranger.get_by_role("heading", name="Your password is set")).to_be_visible()
    stranger.goto(link)
    expect(stranger.get_by_test_id("reset-invalid")).to_be_visible()  # works once
    assert get_user_model().objects.get(username="forgetful").check_password(NEW_PASSWORD)

    admin.goto("/accounts/users/")
    admin.once("dialog", lambda dialog: dialog.accept())
    admin.get_by_test_id("account-forgetful").get_by_role("button", name="Deactivate").click()
    expect(admin.get_by_test_id("account-forgetful")).to_contain_text("deactivated")
    person.reload()  # the session they had is gone
    expect(person).to_have_url(re.compile(r"/accounts/login/"))
    browser_login(person, "forgetful", NEW_PASSWORD)
    expect(person.get_by_test_id("whoami")).to_have_count(0)  # a deactivated account cannot log in
    person_context.close()
    admin_context.close()
