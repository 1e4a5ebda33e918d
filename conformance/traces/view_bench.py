"""``kpurgatory view-bench``: how fast the page of a large concurrent history renders, and how big it is.

It records a history of about ``--calls`` calls of the built-in implementation (the concurrent check's workers and
clock thread, unchecked: `check_history` is not what is measured), marks ``--violations`` calls spread over it as
violating so that highlighting is drawn too, writes the page and opens it ``--runs`` times in headless Chromium
(Debian's, driven by Playwright). It reports the page's size, the time to write it, the time from navigation to the
first complete drawing of the lanes (decoding, parsing and indexing the embedded history included; the page records
it as ``window.kpurgatoryRendered``), and how long one redraw takes zoomed out to the whole history and zoomed in.
The targets: under 2 s to render a 100 000-call history, under 5 MB of HTML. Exits 1 when a target is missed.
"""

from __future__ import annotations

import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import click

from kpurgatory.conformance.adapters.builtin import factory
from kpurgatory.conformance.check.concurrent import Violation, execute, plan_run
from kpurgatory.conformance.traces.view import write_view

CHROMIUM = "/usr/bin/chromium"
#: headless, no sandbox (containers, root), and none of the browser's own network traffic
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
RENDER_BUDGET_MS, SIZE_BUDGET = 2000, 5 * 2**20


def launch_chromium(playwright):
    """Debian's Chromium under Playwright (never a browser Playwright downloads)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def record(calls: int, threads: int, seed: int):
    """A history of about ``calls`` calls, the drain's aside: rounds of one or two calls of each of ``threads``
    workers and an advance of the clock thread."""
    system = factory()
    try:
        plan = plan_run(random.Random(seed), threads, max(1, int(calls / (1.5 * threads + 1))))
        return execute(system, system.hello(), plan, timeout=60, trace_id=f"view-bench-{calls}")
    finally:
        system.close()


def measure(page_path: Path, runs: int) -> tuple[list[float], list[float], list[float]]:
    """Render times (ms) of ``runs`` fresh loads, and redraw times (ms) zoomed out and zoomed in."""
    from playwright.sync_api import sync_playwright

    rendered, zoomed_out, zoomed_in = [], [], []
    redraw = """(factor) => {
        const canvas = document.getElementById('lanes'), box = canvas.getBoundingClientRect();
        const start = performance.now();
        canvas.dispatchEvent(new WheelEvent('wheel', {deltaY: factor, clientX: box.left + box.width / 2,
                                                      clientY: box.top + 40, cancelable: true}));
        return performance.now() - start;
    }"""
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            for _ in range(runs):
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(page_path.resolve().as_uri())
                page.wait_for_selector("body[data-ready='1']", timeout=60_000)
                rendered.append(page.evaluate("window.kpurgatoryRendered"))
                zoomed_out.append(page.evaluate(redraw, 100))
                for _ in range(25):
                    page.evaluate(redraw, -100)
                zoomed_in.append(page.evaluate(redraw, -100))
                page.close()
        finally:
            browser.close()
    return rendered, zoomed_out, zoomed_in


@click.command("view-bench")
@click.option("--calls", type=click.IntRange(100), default=100_000, show_default=True,
              help="Calls in the recorded history (about).")
@click.option("--threads", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option("--violations", type=click.IntRange(0), default=50, show_default=True,
              help="Calls marked as violating, spread over the history.")
@click.option("--runs", type=click.IntRange(1), default=3, show_default=True, help="Page loads measured.")
@click.option("--seed", type=int, default=7, show_default=True)
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path),
              help="Keep the history and its page in this folder.")
def view_bench_command(calls, threads, violations, runs, seed, keep):
    """Measure the page of a large concurrent history: size, time to write, time to render in headless Chromium."""
    if not Path(CHROMIUM).exists():
        click.echo(f"Error: no Chromium at {CHROMIUM} (apt-get install chromium)", err=True)
        sys.exit(2)
    folder = keep or Path(tempfile.mkdtemp(prefix="kpurgatory-view-bench-"))
    try:
        started = time.monotonic()
        history = record(calls, threads, seed)
        recorded_s = time.monotonic() - started
        every = max(1, len(history.steps) // max(1, violations))
        planted = [Violation("planted", "marked by view-bench to draw a highlighted call", (seq,))
                   for seq in range(every // 2 + 1, len(history.steps) + 1, every)][:violations]
        started = time.monotonic()
        path = write_view(folder / f"{history.trace_id}.html", history, violations={history.trace_id: planted})
        written_s = time.monotonic() - started
        size = path.stat().st_size
        rendered, zoomed_out, zoomed_in = measure(path, runs)
    finally:
        if keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    click.echo(f"history: {len(history.steps):,} calls on {history.header.threads} threads "
               f"(recorded in {recorded_s:.1f} s), {len(planted)} marked violating")
    click.echo(f"page:    {size / 2**20:.2f} MB (budget {SIZE_BUDGET / 2**20:.0f} MB), written in {written_s:.2f} s")
    click.echo(f"render:  median {statistics.median(rendered):.0f} ms, max {max(rendered):.0f} ms over {runs} loads "
               f"(budget {RENDER_BUDGET_MS} ms; navigation start to the lanes drawn)")
    click.echo(f"redraw:  zoomed out {statistics.median(zoomed_out):.1f} ms, zoomed in "
               f"{statistics.median(zoomed_in):.1f} ms (median)")
    within = max(rendered) < RENDER_BUDGET_MS and size < SIZE_BUDGET
    click.echo("within budget" if within else "OVER BUDGET")
    sys.exit(0 if within else 1)


if __name__ == "__main__":
    view_bench_command()
