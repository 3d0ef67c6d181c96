"""The project settings page: an admin sets the project's serving limits (apps/serving/limits.py)."""

import pytest
from playwright.sync_api import expect

from apps.projects.models import Project
from tests.conftest import browser_login

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(120)
def test_an_admin_sets_the_projects_serving_limits_and_a_bad_one_is_refused_on_the_page(page, admin, project):
    browser_login(page, "adam")
    page.goto(f"/projects/{project.pk}/settings/")
    per_token = page.get_by_label("Generations at once per API token")
    per_minute = page.get_by_label("Tokens a minute for the project")
    per_token.fill("-3")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert").filter(has_text="greater than or equal to 1")).to_be_visible()
    per_token.fill("4")
    per_minute.fill("9000")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Project saved.")).to_be_visible()
    expect(per_token).to_have_value("4")
    project = Project.objects.get(pk=project.pk)
    assert (project.serving_max_concurrent_per_token, project.serving_tokens_per_minute_per_project) == (4, 9000)
    assert project.serving_max_concurrent_per_project is None  # left empty: the site's default
