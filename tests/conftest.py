"""Shared test settings: a Hypothesis profile for CI (derandomised, bounded), selected by CI=true; the groups that
keep tests sharing a resource on one pytest-xdist worker; and the page tests' fixtures: one headless Debian Chromium
per module, a fresh page per test that fails the test on any script error (the page test modules skip themselves
where Playwright or Chromium is missing)."""

import os
from pathlib import Path

from hypothesis import HealthCheck, settings
import pytest

settings.register_profile("ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# pytest-xdist gives its workers COLUMNS=80 (the controller's width): the commands the tests run would then print at 80
# columns, not at the piped width they print at in a serial run
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)

TESTS = Path(__file__).parent

#: test modules (globs relative to tests/) that share something two workers must not use at once, by group:
#: one local Spark per worker is heavy; concurrent Maven runs may corrupt ~/.m2 (the installed wheel's --kafka commands
#: in the packaging tests run Maven too); one Chromium; `npm ci` replaces the npm timer-wheel's node_modules that its
#: own tests read; a language's driver tests build one project; the obligations run once per worker
SHARED = {
    "spark": ["spark/test_*.py"],
    "maven": ["conformance/test_kafka_*.py", "impl/test_bench_kafka.py", "conformance/test_matrix.py",
              "conformance/test_matrix_vectors.py", "examples/test_driver_java.py", "live/test_record_broker.py",
              "test_packaging.py"],
    "chromium": ["conformance/test_*_browser.py", "live/test_*_browser.py"],
    "npm": ["examples/test_driver_javascript.py", "external/test_npm_timer_wheel.py"],
    "cargo": ["examples/test_driver_rust.py"],
    "go": ["examples/test_driver_go.py"],
    "interruption": ["conformance/test_interruption.py"],
    "obligations": ["specs/test_specs_interleaving.py", "specs/test_specs_obligations.py",
                    "specs/test_specs_refutations.py"],
}


#: test modules (globs relative to tests/) of the slow suites: Spark jobs, builds and runs of the language drivers and
#: of Kafka's released jars, nested test runs, the mutants and the obligations, and the interruptions (which wait out
#: time limits); `pytest -m slow` runs them (and the tests marked slow one by one), `pytest -m "not slow"` the rest
#: (.ci/run runs both)
SLOW = ["spark/test_*.py", "examples/test_*.py", "conformance/test_kafka_releases.py", "conformance/test_matrix.py",
        "conformance/test_matrix_browser.py", "impl/test_bench_kafka.py", "impl/test_implementations.py",
        "external/test_npm_timer_wheel.py", "mutants/test_*.py", "specs/test_specs_obligations.py",
        "specs/test_specs_refutations.py", "specs/test_specs_interleaving.py", "conformance/test_vectors.py",
        "conformance/test_matrix_vectors.py", "conformance/test_interruption.py", "conformance/test_reproducible.py",
        "live/test_record_broker.py", "specs/test_breakages.py"]


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items):
    for item in items:
        if any(item.path.relative_to(TESTS).match(glob) for glob in SLOW):
            item.add_marker(pytest.mark.slow)


def group_of(module: Path) -> str:
    """The work unit of a test module: its shared resource's group, else the module itself (as ``--dist loadfile``
    would: module-scoped fixtures are made once and tests run in their module's order, as in a serial run)."""
    relative = module.relative_to(TESTS)
    return next((group for group, patterns in SHARED.items() if any(relative.match(glob) for glob in patterns)),
                relative.as_posix())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the groups above, read from each test's path (xdist's own ``xdist_group`` marks are
    lost under pytest 9.2, which no longer reads the node id xdist rewrites)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(config.rootpath / nodeid.split("::", 1)[0])

    return ByGroup(config, log)


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
