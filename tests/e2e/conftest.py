"""Browser fixtures: Playwright driving Debian's Chromium against the live ASGI server.

Package-scoped: Playwright's sync API keeps an event loop on the main thread while it runs,
which must be gone before tests outside tests/e2e/ call async_to_sync.
"""

import os

import pytest

from tests.conftest import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="package")
def _browser(django_db_setup):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own database
    # calls are still plain synchronous ones, so Django's async-context guard must stand down.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()
    # Playwright's loop is gone with it: later tests may use async_to_sync again.
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def browser_context(_browser, live_asgi):
    """A fresh browser profile (cookies, storage) per test, pointed at the live server."""
    context = _browser.new_context(base_url=live_asgi)
    yield context
    context.close()


@pytest.fixture
def page(browser_context):
    page = browser_context.new_page()
    page.set_default_timeout(15_000)
    return page


