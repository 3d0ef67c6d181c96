"""The base layout, projects list and dashboard as a data scientist sees them."""

import re

import pytest
from playwright.sync_api import expect

from tests.conftest import browser_login

pytestmark = pytest.mark.e2e


def test_a_member_creates_a_project_and_sees_its_dashboard(page, viewer, project):
    browser_login(page, "victor")
    expect(page.get_by_test_id("project-list")).to_contain_text("Alpha")
    page.get_by_role("button", name="Create project").click()  # empty name: inline error
    expect(page.locator(".field-error")).to_contain_text("required")
    page.get_by_label("Name").fill("Summaries")
    page.get_by_label("Description").fill("News summarisation tuning")
    page.get_by_role("button", name="Create project").click()
    expect(page.get_by_role("heading", name="Summaries")).to_be_visible()
    expect(page.get_by_text("You are its Owner")).to_be_visible()
    expect(page.get_by_test_id("members")).to_contain_text("victor")
    expect(page.get_by_test_id("members")).to_contain_text("Owner")
    expect(page.get_by_test_id("activity")).to_contain_text("project.create")


def test_navigation_collapses_into_a_menu_on_a_phone(_browser, live_asgi, viewer):
    context = _browser.new_context(base_url=live_asgi, viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    browser_login(page, "victor")
    nav_link = page.get_by_role("navigation", name="Main").get_by_role("link", name="Projects")
    expect(nav_link).to_be_hidden()
    page.get_by_role("button", name="Menu").click()
    expect(nav_link).to_be_visible()
    nav_link.click()
    expect(page).to_have_url(re.compile(r"/projects/$"))
    context.close()


def test_api_docs_render_from_local_files_only(page, live_asgi, viewer):
    outside = []
    page.on("request", lambda request: None if request.url.startswith(live_asgi) else outside.append(request.url))
    browser_login(page, "victor")
    page.goto("/api/docs/")
    expect(page.get_by_text("Workbench API").first).to_be_visible()
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    # From 150 tags and operations on, Swagger UI draws only those near the viewport: scroll down to the
    # projects' operations (a new tag or a few more operations once seemed to stop it drawing).
    projects = page.locator(".opblock-summary-path", has_text="/api/projects/").first
    for _ in range(60):
        if projects.count():
            break
        page.mouse.wheel(0, 1500)
        page.wait_for_timeout(100)
    projects.scroll_into_view_if_needed()
    expect(projects).to_be_visible()
    assert outside == []


def test_the_plotly_bundle_is_served_locally(page, live_asgi):
    response = page.request.get(f"{live_asgi}/static/vendor/plotly/plotly.min.js")
    assert response.status == 200
    assert "plotly.js v" in response.text()[:200]


def test_the_datasets_section_lists_datasets_across_my_projects(page, viewer, project, owner, other_project):
    from apps.datasets.services import dataset_create
    from tests.factories import MembershipFactory

    dataset_create(user=owner, project=project, name="Reviews")
    MembershipFactory(project=other_project, user=owner, role="owner")
    dataset_create(user=owner, project=other_project, name="Secret plans")
    browser_login(page, "victor")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Datasets").click()
    listing = page.get_by_test_id("datasets")
    expect(listing).to_contain_text("Reviews")
    expect(listing).not_to_contain_text("Secret plans")
    listing.get_by_role("link", name="Reviews").click()
    expect(page.get_by_test_id("dataset-name")).to_have_text("Reviews")


def test_the_dashboard_shows_activity_live_and_says_when_access_ends(page, client, owner, viewer, project):
    browser_login(page, "victor")
    page.goto(f"/projects/{project.pk}/")
    state = page.get_by_test_id("live-state")
    expect(state).to_have_text("live")
    client.force_login(owner)  # another member edits the project meanwhile
    response = client.patch(f"/api/projects/{project.pk}/", {"description": "Edited <b>elsewhere</b>"},
                            content_type="application/json")
    assert response.status_code == 200
    activity = page.get_by_test_id("activity")
    expect(activity.locator("li").first).to_contain_text("project.update")  # no reload
    membership = project.memberships.get(user=viewer)
    assert client.delete(f"/api/projects/{project.pk}/members/{membership.pk}/").status_code == 204
    expect(state).to_have_text("access ended")  # closed by the server, not retried
