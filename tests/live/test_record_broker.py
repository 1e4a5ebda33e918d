"""End to end: `kpurgatory record-broker` records a real Kafka 3.9.1 broker (jars from Maven Central through mvn) for
20 seconds under client load, with the live agent; the recording converts into histories that pass, and a broker
whose agent plants the early_expire fault is judged on Spark as failing on_time, with its failing windows, pages and
report. Slow: each recording starts and stops a broker (the recorder stops it on every way out)."""

import json
import shutil

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.live import recording as rec
from kpurgatory.conformance.live.judge import judge_locally

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (shutil.which("mvn") and shutil.which("java")), reason="needs mvn and java")]


def test_a_healthy_broker_passes(tmp_path):
    out = tmp_path / "rec"
    result = CliRunner().invoke(main, ["record-broker", "--kafka", "3.9.1", "--seconds", "20", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.splitlines()[0])["records_acked"] > 0
    recording = rec.read_recording(out)
    kinds = {(event["purgatory"], event["ev"]) for event in recording.events if "purgatory" in event}
    assert {("Produce", "watch"), ("Fetch", "watch"), ("Fetch", "check"), ("Fetch", "expire")} <= kinds
    judged = judge_locally(list(rec.histories(recording)))
    assert [(item.trace.trace_id, item.violations) for item in judged if item.violations] == []


def test_a_broker_that_expires_ops_early_fails_on_time(tmp_path):
    out = tmp_path / "rec"
    result = CliRunner().invoke(main, ["record-broker", "--kafka", "3.9.1", "--seconds", "20", "--out", str(out),
                                       "--fault", "early_expire", "--judge"])
    assert result.exit_code == 1, result.output
    summary = json.loads((out / "judged" / "summary.json").read_text())
    assert summary["properties"].get("on_time", 0) >= 1 and summary["quarantined_rows"] == 0
    assert list((out / "judged" / "failing").glob("*.html"))
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["faults"].startswith("early_expire") and report["verdicts"]["summary"]["verdicts"]["fail"] >= 1
    earliest = min(p["expiry_lateness_ms"]["min"] for p in report["purgatories"].values() if p["expiry_lateness_ms"])
    assert earliest < -50  # ms: expired long before its deadline
    page = (out / "report" / "index.html").read_text()
    assert page.count("data:image/png;base64,") >= 2 and "<th>p99</th>" in page and "failing/" in page
