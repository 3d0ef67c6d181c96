"""A scientist chats with a model in the playground; the answer streams in over the websocket."""

import pytest
from playwright.sync_api import expect

from apps.serving.models import Generation
from tests.conftest import browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_scientist_chats_and_sees_the_streamed_answer_with_its_timings(page, scientist, project, tiny_model,
                                                                      inference_worker):
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/")
    page.get_by_role("navigation", name="Project").get_by_role("link", name="Playground").click()
    page.get_by_label("Model").select_option(label=tiny_model.name)

    page.get_by_label("Max new tokens").fill("0")
    page.get_by_label("Message").fill("what is paris ?")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("alert")).to_contain_text("max_new_tokens")
    expect(page.get_by_test_id("chat-log").locator(".chat-turn")).to_have_count(0)

    page.get_by_label("Max new tokens").fill("8")
    page.get_by_label("Message").fill("<img src=x onerror=alert(1)> what is the capital of france ?")
    page.get_by_role("button", name="Send").click()
    stats = page.get_by_test_id("stats")
    expect(stats).to_contain_text("first token", timeout=60_000)
    expect(stats).to_contain_text("tokens/s")
    turns = page.get_by_test_id("chat-log").locator(".chat-turn")
    expect(turns).to_have_count(2)
    expect(turns.first).to_contain_text("<img src=x onerror=alert(1)>")  # shown as text
    generation = Generation.objects.get(state="succeeded")
    assert generation.source == "playground" and generation.completion_tokens >= 1
    expect(turns.last.locator(".chat-text")).to_have_text(generation.output)
    # Once whole, the answer is the server's Markdown rendering of it
    expect(turns.last.locator(".chat-text.markdown")).to_have_count(1)
    expect(turns.last.locator("strong")).to_have_text(tiny_model.name)  # the answer names its model
    expect(turns.first.locator("strong")).to_have_text("You")



def test_a_viewer_has_no_playground(page, viewer, project):
    browser_login(page, viewer.username)
    assert page.goto(f"/projects/{project.pk}/playground/").status == 403
    page.goto(f"/projects/{project.pk}/")
    expect(page.get_by_role("navigation", name="Project").get_by_role("link", name="Playground")).to_have_count(0)


def test_scientist_stops_a_long_answer(page, scientist, project, demo_model, inference_worker):  # noqa: F811
    browser_login(page, "sofia")
    page.goto(f"/projects/{project.pk}/playground/")
    page.get_by_label("Model").select_option(label=demo_model.name)
    page.get_by_label("Max new tokens").fill("300")
    page.get_by_label("Message").fill("Write a very long story about a dragon.")
    page.get_by_role("button", name="Send").click()
    turns = page.get_by_test_id("chat-log").locator(".chat-turn")
    expect(turns.last.locator(".chat-text")).not_to_be_empty(timeout=120_000)  # streaming
    page.get_by_role("button", name="Stop").click()
    expect(page.get_by_test_id("stats")).to_contain_text("(cancelled)", timeout=60_000)
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    assert Generation.objects.get().completion_tokens < 300
