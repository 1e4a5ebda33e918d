"""End to end: `kpurgatory record-broker` records a real Kafka 3.9.1 broker (jars from Maven Central through mvn) for
20 seconds under client load, with the live agent; the recording converts into histories that pass, and a broker
whose agent plants the early_expire fault is judged on Spark as failing on_time, with its failing windows, pages and
report. Slow: each recording starts and stops a broker (the recorder stops it on every way out, and a SIGKILL of the
command or of the recorder leaves no JVM behind)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

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


def descendants(pid: int) -> set[int]:
    """The processes pid started, and theirs (Linux's /proc)."""
    found: set[int] = set()
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in map(int, children.read_text().split()):
            found |= {child} | descendants(child)
    return found


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("killed", ["the command", "the recorder"])
def test_a_sigkill_leaves_no_jvm_running(tmp_path, killed):
    """A SIGKILL runs none of its victim's cleanup, yet no JVM is left: the recorder's JVM stops (and stops its broker)
    when the command's end closes its standard input, and the broker's JVM ends when the recorder's does."""
    out = tmp_path / "rec"
    command = subprocess.Popen([sys.executable, "-c", "from kpurgatory.conformance.cli import main; main()",
                                "record-broker", "--kafka", "3.9.1", "--seconds", "300", "--out", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    jvms: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while not (out / "broker.pid").is_file():
            assert command.poll() is None and time.monotonic() < deadline, f"no broker started ({command.poll()})"
            time.sleep(0.5)
        broker = int((out / "broker.pid").read_text())
        [recorder] = [pid for pid in descendants(command.pid) if broker in descendants(pid)]
        jvms = {recorder, broker}
        assert all(map(running, jvms))
        os.kill(command.pid if killed == "the command" else recorder, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while any(map(running, jvms)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not [pid for pid in jvms if running(pid)], f"a JVM was left running after {killed} was killed"
    finally:
        for pid in [command.pid, *jvms]:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        command.wait()
