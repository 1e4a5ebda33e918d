"""The matrix page, opened in a real headless Chromium (Debian's, driven by Playwright; never a downloaded browser):
cells with their verdicts' classes and counts, links that reach the counterexamples' pages, and a system's text shown
as text. Screenshots are kept in $KPURGATORY_ARTIFACTS/matrix (default: test-artifacts/matrix)."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.tools.matrix import CSS
from kpurgatory.conformance.traces.codec import read_traces
from kpurgatory.conformance.traces.view_bench import CHROMIUM

pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install '.[view]')")
pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason=f"no Chromium at {CHROMIUM} (apt-get install "
                                                                     f"chromium)")

HERE = Path(__file__).parent
HOSTILE_NAME = "<script>document.body.setAttribute('data-pwned', 1)</script>"  # no '=': NAME=... splits there


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """A matrix with a cell of every verdict (test_matrix.py's systems): pass (the built-in implementation), finding
    (Kafka's findings in scenarios), failure (a wrong answer with markup in it, from a system whose name and hello
    are markup too), broke then skipped (a crash at hello, and a hello that raises markup), n/a (a timer-only
    system)."""
    out = tmp_path_factory.mktemp("matrix") / "out"
    sys.path.insert(0, str(HERE))
    try:
        result = CliRunner().invoke(main, [
            "matrix", "--impl", "ok=kpurgatory.conformance.adapters.builtin:factory",
            "--impl", "kafka-like=planted:KafkaLike", "--impl", f"{HOSTILE_NAME}=test_matrix:Hostile",
            "--impl", "hostile-hello=test_matrix:HostileHello", "--impl", "timer-only=test_matrix:TimerOnly",
            "--adapter", f"crashes={sys.executable} {HERE / 'misbehaving_adapter.py'} crash 0",
            "--checks", "purgatory/exact,scenarios", "--examples", "8", "--max-failures", "1", "--timeout", "5",
            "--out", str(out)], terminal_width=200)
    finally:
        sys.path.remove(str(HERE))
    assert result.exit_code == 3, result.output
    return out, json.loads((out / "matrix.json").read_text())


def artifacts() -> Path:
    folder = Path(os.environ.get("KPURGATORY_ARTIFACTS", "test-artifacts")) / "matrix"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def open_page(page, path: Path) -> None:
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("table.matrix")


def test_each_cell_shows_its_verdict_and_counts(page, matrix):
    out, data = matrix
    open_page(page, out / "index.html")
    page.screenshot(path=str(artifacts() / "matrix.png"), full_page=True)
    rows = page.locator("table.matrix tbody tr")
    assert rows.count() == len(data["rows"])
    verdicts = set()
    for index, row in enumerate(data["rows"]):
        cells = rows.nth(index).locator("td.cell")
        assert cells.count() == len(data["columns"])
        for position, column in enumerate(data["columns"]):
            expected, shown = row["cells"][column["id"]], cells.nth(position)
            verdicts.add(expected["verdict"])
            assert CSS[expected["verdict"]] in shown.get_attribute("class").split()
            assert shown.locator(".word").inner_text() == expected["verdict"]
            assert shown.get_attribute("data-findings") == str(len(expected["findings"]))
            assert shown.get_attribute("data-failures") == str(len(expected["failures"]))
            names = {finding["name"] for finding in expected["findings"]}  # each listed once
            assert shown.locator("li").count() == len(names) + len(expected["failures"])
            assert shown.get_attribute("title") == expected["note"]
    assert verdicts == set(CSS)  # every verdict is on the page
    total = data["totals"]
    summary = page.inner_text("#summary")
    assert all(f"{total[verdict]} {verdict}" in summary for verdict in CSS if total[verdict])
    assert "deadline-wraps" in page.inner_text("#legend-findings")


def test_a_finding_links_to_its_counterexample_page(page, matrix):
    out, data = matrix
    open_page(page, out / "index.html")
    link = page.locator("td.cell.finding li.finding-item a").first
    name = link.inner_text()
    finding = next(finding for row in data["rows"] for cell in row["cells"].values() for finding in cell["findings"])
    assert name == finding["name"]
    link.click()
    page.wait_for_selector("body[data-ready='1']")  # the view's page, drawn
    assert page.url == (out / finding["view"]).resolve().as_uri()
    [trace] = read_traces(out / finding["trace"])
    assert page.inner_text("#summary").startswith(trace.trace_id)


def test_a_failure_links_to_its_counterexample_page_and_the_verdict_to_its_details(page, matrix):
    out, data = matrix
    open_page(page, out / "index.html")
    failing = page.locator("td.cell.failure").first
    failing.locator("a.word").click()
    target = page.evaluate("location.hash").lstrip("#")
    entry = page.locator(f"[id='{target}']")
    assert entry.is_visible() and "scenarios: failure" in entry.locator("h3").inner_text()
    failing.locator("li.failure-item a").first.click()
    page.wait_for_selector("body[data-ready='1']")
    assert "divergence" in page.inner_text("#verdict").lower() or "fail" in page.inner_text("#verdict").lower()


def test_untrusted_text_shows_as_text(page, matrix):
    out, data = matrix
    open_page(page, out / "index.html")
    assert page.get_attribute("body", "data-pwned") is None
    assert page.locator("script").count() == 0 and page.locator("img").count() == 0
    hostile = next(row for row in data["rows"] if row["name"] == HOSTILE_NAME)
    header = page.locator("table.matrix tbody th.row").nth(data["rows"].index(hostile)).inner_text()
    assert HOSTILE_NAME in header and hostile["implementation"] in header  # the name and its hello, as text
    details = page.inner_text("#details")
    failure = hostile["cells"]["scenarios"]["failures"][0]["summary"]
    assert failure in details and hostile["implementation"] in failure  # the wrong answer, quoted as text
    raised = next(row for row in data["rows"] if row["name"] == "hostile-hello")["cells"]["purgatory/exact"]["note"]
    assert raised in details and "<script>" in raised  # how the hello failed, as text
