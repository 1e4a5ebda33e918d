"""The live recording's report (conformance/live/report.py) of a small judged recording written by hand
(`eventlog.busy`): report.json counts each purgatory's ops, routes and timings; the page shows them, the broker's run,
the load and the verdicts in tables and definition lists with plots, never as JSON, and every text the recording
brings stays text."""

import json
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from eventlog import FAILURE, STRANGE, busy  # noqa: E402

from kpurgatory.conformance.live.report import write_report  # noqa: E402


class Page(HTMLParser):
    """A page's visible text (style left out), its elements and its table headers."""

    def __init__(self, text: str):
        super().__init__()
        self.parts, self.elements, self.headers, self.images = [], Counter(), [], []
        self.inside: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements[tag] += 1
        if tag == "img":
            self.images.append(dict(attrs))
        if tag not in ("img", "meta", "br"):
            self.inside.append(tag)

    def handle_endtag(self, tag):
        if tag in self.inside:
            del self.inside[len(self.inside) - 1 - self.inside[::-1].index(tag):]

    def handle_data(self, data):
        if "style" in self.inside or "title" in self.inside:
            return
        self.parts.append(data)
        if self.inside and self.inside[-1] == "th":
            self.headers.append(data)

    @property
    def text(self) -> str:
        return " ".join(self.parts)


def test_the_report_counts_each_purgatory(tmp_path):
    folder = busy(tmp_path / "rec")
    write_report(folder, tmp_path / "report")
    document = json.loads((tmp_path / "report" / "report.json").read_text())
    purgatories = document["purgatories"]
    assert purgatories["Produce"]["ops"] == 50 and purgatories["Produce"]["completed"] == {"watch": 50}
    fetch = purgatories["Fetch"]
    assert fetch["ops"] == 9 and fetch["completed"] == {"check": 4, "expire": 4} and fetch["pending"] == 1
    assert fetch["purges"] == 1 and fetch["purged_entries"] == 2
    assert list(fetch["expiry_lateness_ms"]) == ["count", "min", "p50", "p90", "p99", "max"]
    assert fetch["expiry_lateness_ms"]["count"] == 4 and 1 <= fetch["expiry_lateness_ms"]["max"] < 1.01
    assert purgatories[STRANGE]["expiry_lateness_ms"]["max"] < -29  # 30 ms early
    assert purgatories["Heartbeat"]["completed"] == {"other": 1}
    assert purgatories["DeleteRecords"] == {**purgatories["DeleteRecords"], "ops": 0, "checks": 4}
    assert document["broker"]["broker_exit"] == 143 and "load" not in document["broker"]
    pages = {window["trace"]: window["page"] for window in document["verdicts"]["windows"]}
    assert pages["rec.Fetch.0001"] is None
    assert pages["rec._script_alert_1___script___sqrt_.0001"] == "../rec/judged/failing/" \
                                                                   "rec._script_alert_1___script___sqrt_.0001.html"


def test_the_page_shows_tables_and_plots_never_json(tmp_path):
    page = Page(write_report(busy(tmp_path / "rec"), tmp_path / "report").read_text())
    for header in ("completed by", "its watch", "a check", "expiry", "other code", "still waiting at the end",
                   "expiry lateness after the deadline (ms)", "watch to completion (ms)", "min", "p50", "p90", "p99",
                   "max"):
        assert header in page.headers
    assert "{" not in page.text and "}" not in page.text and '"' not in page.text
    for words in ("rate per producer (0: unthrottled) 500 records/s", "acknowledged 973 records/s",
                  "broker CPU during the load 11.2 s", "executor lag 1,000 ms", "events written 13.3 MB",
                  "Fails: 1 of 5 windows break a property (on_time in 1)."):
        assert words in " ".join(page.text.split()), words
    assert [image["alt"].split()[0] for image in page.images] == [
        "Ops", "Expiry", "Latency", "watched():", "numDelayed():"]  # entering per second, the distributions, sizes
    assert all(image["src"].startswith("data:image/png;base64,") for image in page.images)


def test_text_from_the_recording_stays_text(tmp_path):
    html = write_report(busy(tmp_path / "rec"), tmp_path / "report").read_text()
    page = Page(html)
    assert page.elements["script"] == 0 and page.elements["b"] == 0
    assert STRANGE in page.text and FAILURE in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
