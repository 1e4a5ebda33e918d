"""Fixtures the page tests share: one headless Debian Chromium per module, a fresh page per test that fails the test
on any script error. The test modules skip themselves where Playwright or Chromium is missing."""

import pytest


@pytest.fixture(scope="module")
def browser():
    from playwright import sync_api

    from kpurgatory.conformance.traces.view_bench import launch_chromium

    with sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)  # every wait, generous: a loaded machine draws a page late, not wrongly
    errors = []
    page.on("pageerror", lambda error: errors.append(error))
    yield page
    page.close()
    assert not errors, errors
