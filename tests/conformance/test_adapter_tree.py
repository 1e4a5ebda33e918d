"""Nothing an adapter starts outlives the command that drove it, daemons that call setsid() and double-fork included:
whether the check passes, finds a failure, or the adapter crashes or hangs, in `replay`, and when the harness itself
is killed outright."""

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

HERE = Path(__file__).parent
ESCAPING = f"{sys.executable} {HERE / 'escaping_adapter.py'}"
MISBEHAVING = f"{sys.executable} {HERE / 'misbehaving_adapter.py'}"
SCENARIOS = HERE.parent.parent / "conformance" / "scenarios"
SERVED = f"{sys.executable} -m kpurgatory.conformance.adapters.stdio"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a subreaper is Linux's; elsewhere only the group")


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def survivors(pidfile: Path) -> list[int]:
    """The adapters and their daemons still running: none may be; and each adapter started one."""
    pids = [int(pid) for pid in pidfile.read_text().split()]
    assert pids, "no adapter started"
    return [pid for pid in pids if alive(pid)]


@pytest.fixture
def served_tests(monkeypatch):
    """Adapters, and this process, may serve the systems in this folder (test_check:LateReaper)."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))


CASES = {  # case: (the adapter, check's options, its exit code)
    "pass": (f"{SERVED} kpurgatory.conformance.adapters.reference:factory", [], 0),
    "failure": (f"{SERVED} test_check:LateReaper", [], 1),
    "crash": (f"{MISBEHAVING} crash 4", [], 3),
    "hang": (f"{MISBEHAVING} hang 4", ["--timeout", "3"], 3),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_daemon_of_an_adapter_outlives_check(case, tmp_path, served_tests):
    adapter, options, code = CASES[case]
    pidfile = tmp_path / "pids"
    result = CliRunner().invoke(main, ["check", "--adapter", f"{ESCAPING} {pidfile} {adapter}", "--profile", "timer",
                                       "--examples", "5", "--steps", "10", "--seed", "1", "--max-failures", "1",
                                       *options, "--out", str(tmp_path / "out")])
    assert result.exit_code == code, result.output
    assert survivors(pidfile) == []


def test_no_daemon_of_an_adapter_outlives_replay(tmp_path, served_tests):
    pidfile, trace = tmp_path / "pids", tmp_path / "kafka-TimerTest.jsonl"
    shutil.copy(SCENARIOS / trace.name, trace)  # its failing page is written beside it
    result = CliRunner().invoke(main, ["replay", "--adapter", f"{ESCAPING} {pidfile} {SERVED} test_check:LateReaper",
                                       str(trace)])
    assert result.exit_code == 1, result.output
    assert survivors(pidfile) == []


def test_no_adapter_nor_its_daemon_outlives_a_harness_killed_outright(tmp_path):
    pidfile = tmp_path / "pids"
    harness = subprocess.Popen(
        [sys.executable, "-c", "from kpurgatory.conformance.cli import main; main()", "check", "--adapter",
         f"{ESCAPING} {pidfile} {MISBEHAVING} hang 4", "--timeout", "600", "--profile", "timer", "--out",
         str(tmp_path / "out")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120  # a budget for a loaded machine, not a measurement
    while not (pidfile.exists() and pidfile.read_text().endswith("\n")):
        assert time.monotonic() < deadline and harness.poll() is None
        time.sleep(0.1)
    harness.send_signal(signal.SIGKILL)  # no atexit hook runs: the keeper sees its control socket close
    harness.wait()
    while survivors(pidfile) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert survivors(pidfile) == []
