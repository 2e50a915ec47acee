import shutil

import pytest
from django.contrib.auth import get_user_model

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PASSWORD = "correct horse battery"


@pytest.fixture
def page(live_server, monkeypatch):
    """A headless Debian Chromium page driven by Playwright."""
    # Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
    # around it are still plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    if CHROMIUM is None:
        pytest.skip(
            "Debian's chromium is not installed (scripts/test-services installs it as root)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        context = browser.new_context(base_url=live_server.url)
        context.set_default_timeout(20_000)
        yield context.new_page()
        browser.close()


@pytest.fixture
def admin_page(page, transactional_db):
    get_user_model().objects.create_superuser("admin", "admin@example.com", PASSWORD)
    page.goto("/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")
    return page
