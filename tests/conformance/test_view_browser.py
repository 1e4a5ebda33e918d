"""The page of a counterexample and of a concurrent history, opened in a real headless Chromium (Debian's, driven by
Playwright; never a downloaded browser). Screenshots are kept in $KPURGATORY_ARTIFACTS/view (default:
test-artifacts/view under the working directory) for CI to publish."""

import os
import shutil
from pathlib import Path

import pytest

from kpurgatory.conformance.check.concurrent import run_concurrent_check
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.tools.mutants import BY_ID, adapter_class
from kpurgatory.conformance.traces.codec import Header, model_trace
from kpurgatory.conformance.traces.view import property_words, write_view
from kpurgatory.conformance.traces.view_bench import CHROMIUM
from kpurgatory.model import contract
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import Violation

LANE, TOP = 26, 22  # the lanes' geometry in view.js

pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install '.[view]')")
pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason=f"no Chromium at {CHROMIUM} (apt-get install "
                                                                     f"chromium)")


def artifacts() -> Path:
    folder = Path(os.environ.get("KPURGATORY_ARTIFACTS", "test-artifacts")) / "view"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def open_view(page, path: Path) -> None:
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=20_000)


def test_a_seeded_counterexample_shows_its_divergence_and_steps_with_the_keyboard(page, tmp_path):
    result = run_check(adapter_class(BY_ID["cancel_leaves_entry"]), profile="timer", examples=200, seed=1,
                       out_dir=tmp_path)
    assert not result.passed
    failing = result.report.first_failure
    html = result.trace_path.with_suffix(".html")
    open_view(page, html)
    verdict = page.inner_text("#verdict")
    assert f"First divergence at step {failing.seq}" in verdict
    words = property_words(contract)
    for failure in failing.failures:
        if isinstance(failure.what, Violation):  # a contract property, in its words
            assert failure.what.prop in verdict and words[failure.what.prop] in verdict
        else:
            assert "differs from the model exact" in verdict
    assert page.inner_text("#steps .step.selected .seq") == str(failing.seq)
    assert page.inner_text("#steps .step.failing .seq") == str(failing.seq)
    assert page.inner_text("#state-title").startswith(f"After step {failing.seq}:")
    page.screenshot(path=str(artifacts() / "sequential.png"), full_page=True)
    page.keyboard.press("ArrowLeft")
    assert page.inner_text("#state-title").startswith(f"After step {failing.seq - 1}:")
    page.keyboard.press("Home")
    assert page.inner_text("#steps .step.selected .seq") == "1"
    page.keyboard.press("f")
    assert page.inner_text("#steps .step.selected .seq") == str(failing.seq)


def test_the_wheel_of_each_step_is_shown(page, tmp_path):
    header = Header("cascade", "timer", v.Params(tick_ms=1, wheel_size=4))
    trace = model_trace(header, [v.TimerAdd("a", 2), v.TimerAdd("b", 9), v.Advance(8), v.Advance(9)])
    open_view(page, write_view(tmp_path / "cascade.html", trace))
    page.keyboard.press("Home")
    page.keyboard.press("ArrowRight")
    state = page.inner_text("#state")
    assert "After step 2: clock at 0" in state
    assert "a @2" in state and "b @9" in state and "level 2: tick 4" in state
    page.keyboard.press("ArrowRight")  # advance to 8: a ran, b cascaded into level 1
    state = page.inner_text("#state")
    assert "a @2" not in state and "b @9" in state and "current time 8" in state


def lane_of_red(page) -> dict[int, int]:
    """Red pixels of the lanes canvas, by lane."""
    rows = page.evaluate("""() => {
        const canvas = document.getElementById('lanes'), ratio = window.devicePixelRatio || 1;
        const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
        const red = [];
        for (let y = 0; y < canvas.height; y++) {
            let count = 0;
            for (let x = 0; x < canvas.width; x++) {
                const i = 4 * (y * canvas.width + x);
                if (data[i] === 207 && data[i + 1] === 34 && data[i + 2] === 46) count++;
            }
            red.push(count / ratio);
        }
        return red;
    }""")
    by_lane: dict[int, int] = {}
    for y, count in enumerate(rows):
        if count and y >= TOP:
            by_lane[(y - TOP) // LANE] = by_lane.get((y - TOP) // LANE, 0) + count
    return by_lane


def test_a_concurrent_history_shows_lanes_and_its_violating_calls(page, tmp_path):
    result = run_concurrent_check(adapter_class(BY_ID["double_completion"]), threads=3, runs=20, steps=40, seed=1,
                                  out_dir=tmp_path)
    assert not result.passed
    history, violations = result.history, result.violations
    lanes = list(dict.fromkeys(step.timing.thread for step in history.steps))
    open_view(page, result.history_path.with_suffix(".html"))
    assert f"{len(violations)} violations" in page.inner_text("#verdict")
    assert page.locator("#violations .violation").count() == len(violations)
    assert page.get_attribute("#lanes", "aria-label") == "lanes: " + ", ".join(lanes)
    page.click("#violations .violation >> nth=0")
    named = {history.steps[seq - 1].timing.thread for seq in violations[0].seqs}
    red = lane_of_red(page)
    assert {lanes[lane] for lane in red} >= named
    page.screenshot(path=str(artifacts() / "concurrent.png"), full_page=True)
    # hover the first violating call: its command and the property it breaks
    seq = violations[0].seqs[0]
    lane = lanes.index(history.steps[seq - 1].timing.thread)
    box = page.locator("#lanes").bounding_box()
    start, end = page.evaluate(f"""() => {{
        const canvas = document.getElementById('lanes'), ratio = window.devicePixelRatio || 1;
        const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
        const y = Math.round(({TOP} + {lane} * {LANE} + 2) * ratio);
        let start = null;
        for (let x = 0; x < canvas.width; x++) {{
            const i = 4 * (y * canvas.width + x);
            const red = data[i] === 207 && data[i + 1] === 34 && data[i + 2] === 46;
            if (red && start === null) start = x;
            if (!red && start !== null) return [start / ratio, x / ratio];
        }}
        return [start, start];
    }}""")
    page.mouse.move(box["x"] + (start + end) / 2, box["y"] + TOP + lane * LANE + LANE / 2)
    tip = page.inner_text("#tooltip")
    assert f"call {seq} on {lanes[lane]}" in tip and f"VIOLATES {violations[0].property}" in tip
    page.keyboard.press("0")  # fit: zoomed out, every lane still drawn
    assert set(lane_of_red(page)) <= set(range(len(lanes)))


def test_untrusted_text_shows_as_text(page, tmp_path):
    hostile = '</script><img src=x onerror="document.body.dataset.pwned=1"><!--'
    trace = model_trace(Header(hostile, "timer", v.Params(), implementation=hostile), [v.TimerAdd(hostile, 1)])
    open_view(page, write_view(tmp_path / "hostile.html", trace))
    assert page.get_attribute("body", "data-pwned") is None
    assert page.locator("img").count() == 0
    assert hostile in page.inner_text("#summary") and hostile in page.inner_text("#steps")
