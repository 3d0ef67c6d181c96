"""A scientist registers a local model in the browser, watches a worker check it, and reads
its memory estimate."""

import uuid

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tests.conftest import browser_login
from tests.registry.test_registry import tiny_model_dir

pytestmark = pytest.mark.e2e


def test_scientist_registers_a_model_and_estimates_memory(page, scientist, project, celery_worker):
    root = settings.MODEL_ROOTS[0]  # the worker process's root too
    path, parameters = tiny_model_dir(root / f"tiny-llama-{uuid.uuid4().hex[:8]}")

    browser_login(page, "sofia")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Models").click()
    expect(page.get_by_test_id("models")).to_contain_text("No models yet")
    page.goto(f"/projects/{project.pk}/models/")
    page.get_by_label("Name").fill("Tiny llama")
    page.get_by_label("Path").fill(str(root / "elsewhere"))
    page.get_by_role("button", name="Register").click()
    expect(page.locator(".field-error")).to_contain_text("does not exist")

    page.get_by_label("Path").fill(str(path))
    page.get_by_role("button", name="Register").click()
    expect(page.get_by_test_id("model-status")).to_have_text("checking")
    expect(page.get_by_test_id("model-progress")).to_contain_text("A worker is reading the model's metadata")
    # The worker inspects it; the page follows without a click.
    expect(page.get_by_test_id("model-status")).to_have_text("ready", timeout=60_000)
    expect(page.get_by_test_id("model-info")).to_contain_text(f"{parameters:,}")
    expect(page.get_by_test_id("model-info")).to_contain_text("256")  # context length

    page.get_by_label("Mode").select_option("lora")
    page.get_by_label("Batch size").fill("8")
    page.get_by_role("button", name="Estimate").click()
    expect(page.get_by_test_id("memory-estimate")).to_contain_text("total_bytes")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Models").click()
    expect(page.get_by_test_id("models")).to_contain_text("Tiny llama")
