"""A scientist compares a model of the project with a provider model: the create page offers the
provider models enabled for the project, and the grid fills both columns live. The provider is a
scripted OpenAI-compatible server in its own process; the comparison runs in a real inference worker."""

import pytest
from playwright.sync_api import expect

from apps.comparison.models import Comparison
from tests.conftest import browser_login
from tests.evaluation.fixtures import judge_provider_fixture, scripted_judge_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]


def test_scientist_compares_a_local_model_with_a_provider_model_and_both_columns_fill(
        page, live_asgi, scientist, project, tiny_model, judge_provider, scripted_judge, inference_worker):
    scripted_judge.script([], default={"content": "Paris, from the provider."})
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/comparisons/new/")
    page.get_by_label("Name", exact=True).fill("Local vs provider")
    page.get_by_label("Model 1").select_option(label=tiny_model.name)
    page.get_by_label("Scripted/judge-1").check()
    page.get_by_label("Prompts").fill("what is the capital of france ?\nwhat is paris ?")
    page.get_by_label("Max new tokens").fill("6")
    page.get_by_role("button", name="Run comparison").click()

    expect(page.get_by_test_id("comparison-state")).to_have_text("succeeded", timeout=120_000)
    grid = page.get_by_test_id("grid")
    expect(grid.locator("td.cell[data-filled=true]")).to_have_count(4)
    comparison = Comparison.objects.get()
    local, provider = comparison.contestants.order_by("position")
    assert local.model_id == tiny_model.pk and str(provider.provider_model) == "Scripted/judge-1"
    expect(grid.locator(f"th[data-contestant='{provider.pk}']")).to_contain_text("Scripted/judge-1")
    expect(grid.locator(f"th[data-contestant='{provider.pk}'] .badge")).to_have_text("provider")
    for output in comparison.outputs.filter(contestant=provider):
        expect(grid.locator(f"[data-cell='{output.prompt_id}-{provider.pk}'] [data-field=text]")
               ).to_have_text("Paris, from the provider.")
    assert len(scripted_judge.requests()) == 2
