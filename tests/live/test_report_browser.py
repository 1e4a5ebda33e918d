"""The live recording's report opened in a real headless Chromium (Debian's, driven by Playwright; never a downloaded
browser) at a laptop's width: it fits without scrolling sideways, its visible text holds no JSON, its plots load, and
text from the recording shows as text. The screenshot is kept in $KPURGATORY_ARTIFACTS/live (default:
test-artifacts/live under the working directory) for CI to publish."""

import os
import shutil
import sys
from pathlib import Path

import pytest

from kpurgatory.conformance.live.report import write_report
from kpurgatory.conformance.traces.view_bench import CHROMIUM

sys.path.insert(0, str(Path(__file__).parent))
from eventlog import STRANGE, busy  # noqa: E402

pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install '.[view]')")
pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason=f"no Chromium at {CHROMIUM} (apt-get install "
                                                                     f"chromium)")


def test_the_report_fits_a_laptop_and_shows_no_json(page, tmp_path):
    page.set_viewport_size({"width": 1366, "height": 900})
    page.goto(write_report(busy(tmp_path / "rec"), tmp_path / "report").resolve().as_uri())
    width, visible = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert width <= visible
    text = page.inner_text("body")
    assert "{" not in text and '"' not in text
    assert STRANGE in text and page.locator("script").count() == 0
    assert page.locator("th", has_text="completed by").count() == 1
    assert page.locator("th", has_text="expiry lateness after the deadline (ms)").count() == 1
    assert page.evaluate("[...document.images].every(image => image.complete && image.naturalWidth > 0)")
    folder = Path(os.environ.get("KPURGATORY_ARTIFACTS", "test-artifacts")) / "live"
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / "report.png"), full_page=True)
