"""A project admin manages access in the browser; each person then sees exactly what they may use."""

import re

import pytest
from playwright.sync_api import expect

from apps.accounts import services as account_services
from apps.datasets.services import dataset_create
from tests.conftest import browser_login
from tests.factories import UserFactory

pytestmark = pytest.mark.e2e
NEW_PASSWORD = "lantern-orbit-quietly-7"


def accept_invitation(browser, base_url, link, username):
    context = browser.new_context(base_url=base_url)
    page = context.new_page()
    page.goto(link)
    page.get_by_label("Password", exact=True).fill(NEW_PASSWORD)
    page.get_by_label("Password (again)").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Set password").click()
    page.get_by_label("Password").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_test_id("whoami")).to_have_text(username)
    return context, page


def test_admin_invites_creates_a_role_shares_a_dataset_and_revokes_a_token(_browser, live_asgi, owner, admin,
                                                                            project):
    reviews = dataset_create(user=owner, project=project, name="Reviews")
    dataset_create(user=owner, project=project, name="Internal notes")
    UserFactory(username="erin")  # an external reviewer with an account but no project role
    UserFactory(username="carl")  # will hold the custom role
    account_services.token_create(user=admin, name="nightly export", permissions=["project.view", "dataset.view"],
                                  project=project)

    context = _browser.new_context(base_url=live_asgi)
    page = context.new_page()
    browser_login(page, "adam")
    page.get_by_role("link", name="Alpha").click()
    page.get_by_role("navigation", name="Project").get_by_role("link", name="Members").click()

    links = {}
    for username, role in [("nina", "annotator"), ("vera", "viewer")]:
        invite = page.locator("form", has=page.get_by_role("button", name="Create invitation link"))
        invite.get_by_label("Username").fill(username)
        invite.get_by_label("Role").select_option(role)
        invite.get_by_role("button", name="Create invitation link").click()
        links[username] = page.get_by_test_id("invitation-link").input_value()
    # An admin cannot hand out the Owner role: refused with the reason.
    add = page.locator("form", has=page.get_by_role("button", name="Add member"))
    add.get_by_label("Username").fill("erin")
    add.get_by_label("Role").select_option("owner")
    add.get_by_role("button", name="Add member").click()
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(page.get_by_text("owner.manage", exact=True)).to_be_visible()
    page.go_back()

    page.get_by_role("navigation", name="Project").get_by_role("link", name="Roles").click()
    page.get_by_label("Name", exact=True).fill("Labeler")
    page.get_by_label("Description", exact=True).fill("Annotates and reads datasets")
    for permission in ["annotation.submit", "dataset.view"]:
        page.get_by_role("checkbox", name=re.compile(rf"^{re.escape(permission)} ")).check()
    page.get_by_role("button", name="Create role").click()
    expect(page.get_by_test_id("custom-roles")).to_contain_text("Labeler")
    expect(page.get_by_test_id("custom-roles")).to_contain_text("annotation.submit, dataset.view, project.view")

    page.get_by_role("navigation", name="Project").get_by_role("link", name="Members").click()
    add = page.locator("form", has=page.get_by_role("button", name="Add member"))
    add.get_by_label("Username").fill("carl")
    add.get_by_label("Role").select_option("Labeler")
    add.get_by_role("button", name="Add member").click()
    expect(page.locator("tr[data-member=carl]")).to_contain_text("Labeler")

    page.get_by_role("navigation", name="Project").get_by_role("link", name="Shared access").click()
    page.get_by_label("Username").fill("erin")
    page.get_by_label("Dataset or model").select_option(label="Reviews (dataset)")
    page.get_by_label("Permission").select_option("dataset.view")
    page.get_by_role("button", name="Share").click()
    expect(page.get_by_test_id("grants")).to_contain_text("erin")
    expect(page.get_by_test_id("grants")).to_contain_text("Reviews")

    page.get_by_role("navigation", name="Project").get_by_role("link", name="Tokens").click()
    row = page.locator("tr", has_text="nightly export")
    expect(row).to_contain_text("active")
    row.get_by_role("button", name="Revoke nightly export").click()
    expect(page.locator("tr", has_text="nightly export")).to_contain_text("revoked")

    page.get_by_role("navigation", name="Project").get_by_role("link", name="Audit log").click()
    audit = page.get_by_test_id("audit")
    for action in ["invitation.create", "role.create", "grant.create", "token.revoke"]:
        expect(audit).to_contain_text(action)
    context.close()

    # The annotator sees the project but no datasets tab, no admin tabs.
    nina_context, nina = accept_invitation(_browser, live_asgi, links["nina"], "nina")
    nina.get_by_role("link", name="Alpha").click()
    tabs = nina.get_by_role("navigation", name="Project")
    expect(tabs.get_by_role("link", name="Overview")).to_be_visible()
    for hidden in ["Datasets", "Shared access", "Tokens", "Audit log", "Settings"]:
        expect(tabs.get_by_role("link", name=hidden)).to_have_count(0)
    expect(nina.get_by_test_id("members")).to_contain_text("Annotator")
    nina.goto(f"/projects/{project.pk}/audit/")
    expect(nina.get_by_text("audit.view", exact=True)).to_be_visible()
    nina_context.close()

    # The viewer reads datasets but cannot create one or manage anything.
    vera_context, vera = accept_invitation(_browser, live_asgi, links["vera"], "vera")
    vera.get_by_role("link", name="Alpha").click()
    vera.get_by_role("navigation", name="Project").get_by_role("link", name="Datasets").click()
    expect(vera.get_by_test_id("datasets")).to_contain_text("Reviews")
    expect(vera.get_by_test_id("datasets")).to_contain_text("Internal notes")
    expect(vera.get_by_role("button", name="Create dataset")).to_have_count(0)
    vera.get_by_role("navigation", name="Project").get_by_role("link", name="Members").click()
    expect(vera.get_by_role("button", name="Add member")).to_have_count(0)
    expect(vera.get_by_role("button", name=re.compile("^Remove"))).to_have_count(0)
    vera_context.close()

    # The custom role's holder reads datasets, and has no management tabs.
    carl_context = _browser.new_context(base_url=live_asgi)
    carl = carl_context.new_page()
    browser_login(carl, "carl")
    carl.get_by_role("link", name="Alpha").click()
    tabs = carl.get_by_role("navigation", name="Project")
    tabs.get_by_role("link", name="Datasets").click()
    expect(carl.get_by_test_id("datasets")).to_contain_text("Reviews")
    expect(carl.get_by_role("button", name="Create dataset")).to_have_count(0)
    for hidden in ["Shared access", "Tokens", "Audit log", "Settings"]:
        expect(tabs.get_by_role("link", name=hidden)).to_have_count(0)
    carl_context.close()

    # The external reviewer sees only the shared dataset, not the project.
    erin_context = _browser.new_context(base_url=live_asgi)
    erin = erin_context.new_page()
    browser_login(erin, "erin")
    expect(erin.get_by_test_id("no-projects")).to_be_visible()
    erin.get_by_test_id("shared-with-me").get_by_role("link", name="Reviews").click()
    expect(erin.get_by_test_id("dataset-name")).to_have_text("Reviews")
    erin.goto(f"/projects/{project.pk}/")
    expect(erin.get_by_role("heading", name="Page not found")).to_be_visible()
    erin.goto(f"/projects/{project.pk}/datasets/{reviews.pk + 1}/")
    expect(erin.get_by_role("heading", name="Page not found")).to_be_visible()
    erin_context.close()
