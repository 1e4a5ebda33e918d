"""The matrix page, opened in a real headless Chromium (Debian's, driven by Playwright; never a downloaded browser):
cells with their verdicts' classes and details, links that reach the counterexamples' steps and traces, a failure in
its own colour, a system's text shown as text, and the committed page's grid on a laptop's first screen. Screenshots
are kept in $KPURGATORY_ARTIFACTS/matrix (default: test-artifacts/matrix)."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.tools.matrix_page import CSS
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


def open_page(page, path: Path, folded: bool = False) -> None:
    """The page, with every folded section opened unless ``folded``."""
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("#about")
    if not folded:
        page.evaluate("document.querySelectorAll('details').forEach(details => details.open = true)")


def test_each_cell_shows_its_verdict_and_its_details(page, matrix):
    out, data = matrix
    open_page(page, out / "index.html")
    page.screenshot(path=str(artifacts() / "matrix.png"), full_page=True)
    rows = page.locator("table.matrix tbody tr")  # one table: every system ran the same checks
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
            assert shown.get_attribute("title") == expected["note"]
            if expected["findings"] or expected["failures"]:  # each in the cell's details
                target = shown.locator("a.word").get_attribute("href").removeprefix("#")
                entries = page.locator(f"[id='{target}'] li")
                assert entries.count() == len(expected["findings"]) + len(expected["failures"])
    assert verdicts == set(CSS)  # every verdict is on the page
    total = data["totals"]
    summary = page.inner_text("#summary")
    assert all(f"{total[verdict]} {verdict}" in summary for verdict in ("pass", "finding", "n/a") if total[verdict])
    assert f"{total['failure'] + total['broke']} cells failed or broke" in summary
    assert page.locator("#failures li").count() == total["failure"] + total["broke"]
    assert "deadline-wraps" in page.inner_text("#findings")


def test_a_finding_shows_its_steps_and_links_its_trace(page, matrix):
    out, data = matrix
    open_page(page, out / "index.html", folded=True)
    page.locator("#details > summary").click()
    finding = next(finding for row in data["rows"] for cell in row["cells"].values() for finding in cell["findings"])
    entry = page.locator(".detail li", has=page.locator(f"a[href='{finding['trace']}']")).first
    entry.locator("a", has_text="steps").click()  # into the folded counterexamples: the browser unfolds them
    target = page.evaluate("location.hash").lstrip("#")
    steps = page.locator(f"[id='{target}'] table.steps tbody tr")
    [trace] = read_traces(out / finding["trace"])
    assert steps.first.is_visible() and steps.count() == len(trace.steps)
    assert finding["name"] in page.locator(f"[id='{target}'] h3").inner_text()
    open_page(page, out / "index.html", folded=True)
    page.locator("#details > summary").click()
    entry.locator("a", has_text="trace").click()
    assert page.url == (out / finding["trace"]).resolve().as_uri()


def test_a_failure_stands_out_and_leads_to_its_details(page, matrix):
    out, data = matrix
    open_page(page, out / "index.html", folded=True)
    badge = page.locator("#systems a.badge.failure").first
    assert badge.evaluate("element => getComputedStyle(element).backgroundColor") == "rgb(207, 34, 46)"
    badge.click()
    target = page.evaluate("location.hash").lstrip("#")
    entry = page.locator(f"[id='{target}']")
    assert entry.is_visible() and "scenarios: failure" in entry.locator("h3").inner_text()


def test_untrusted_text_shows_as_text(page, matrix):
    out, data = matrix
    open_page(page, out / "index.html")
    assert page.get_attribute("body", "data-pwned") is None
    assert page.locator("script").count() == 0 and page.locator("img").count() == 0
    hostile = next(row for row in data["rows"] if row["name"] == HOSTILE_NAME)
    header = page.locator("table.matrix tbody th.row").nth(data["rows"].index(hostile)).inner_text()
    assert HOSTILE_NAME in header and hostile["implementation"] in header  # the name and its hello, as text
    assert HOSTILE_NAME in page.inner_text("#systems")
    details = page.inner_text("#details")
    failure = hostile["cells"]["scenarios"]["failures"][0]["summary"]
    assert failure in details and hostile["implementation"] in failure  # the wrong answer, quoted as text
    raised = next(row for row in data["rows"] if row["name"] == "hostile-hello")["cells"]["purgatory/exact"]["note"]
    assert raised in details and "<script>" in raised  # how the hello failed, as text
    assert hostile["implementation"] in page.inner_text("#counterexamples")  # its answers in the steps, as text


def test_the_committed_page_opens_on_its_grid_within_a_laptop_screen(browser):
    """At 1366 × 768, folded as it opens: no horizontal scroll, and the grid, the page's first table, whole on the
    first screen, a row per release of the committed matrix."""
    folder = HERE.parents[1] / "docs" / "matrix"
    if not (folder / "matrix.json").exists():
        pytest.skip("no committed matrix")
    data = json.loads((folder / "matrix.json").read_text())
    page = browser.new_page(viewport={"width": 1366, "height": 768})
    try:
        open_page(page, folder / "index.html", folded=True)
        page.screenshot(path=str(artifacts() / "committed-first-screen.png"))
        measured = page.evaluate("""() => {
            const grid = document.querySelector('table'), box = grid.getBoundingClientRect();
            return {id: grid.id, bottom: box.bottom + scrollY, scrollWidth: document.documentElement.scrollWidth,
                    width: innerWidth, height: innerHeight};
        }""")
        assert measured["id"] == "grid"
        assert measured["scrollWidth"] <= measured["width"]
        assert measured["bottom"] <= measured["height"]
        releases = [row["name"] for row in data["rows"] if row["kind"] == "release"]
        assert page.locator("#grid tbody tr th").all_inner_texts() == releases
    finally:
        page.close()
