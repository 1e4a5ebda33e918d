"""Nothing found is lost when a check is cut short: Ctrl-C or SIGTERM at any moment after a failure keeps its best
counterexample so far (marked as not fully shrunk), a hang found while shrinking is shrunk with a bounded number of
runs that hang, a system that will not close or that exits is reported as what it is, and a reference model that
hangs or raises is reported as a bug of kpurgatory with the run that triggers it.

The signals are sent when the check reaches a point the system under test marks with a file (`planted.PAUSE`), never
after a sleep: the tests assert on what was written and on counts, not on time."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kpurgatory.conformance.check import machine
from kpurgatory.conformance.check.findings import Signature
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.traces.codec import read_traces
from kpurgatory.model import vocabulary as v

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # planted.py, which the commands these tests start import too
import planted  # noqa: E402

#: what the paused check gets before the test gives up on it (it is waiting for a signal, not working)
PATIENCE_S = 600
#: the wrong answers of `planted.PausesAfterFailures` by the end of shrinking its failure in the check below (seed 1),
#: found by running it
WRONG_ANSWERS = 33
#: the command line, as the installed ``kpurgatory`` script runs it
KPURGATORY = [sys.executable, "-c", "from kpurgatory.conformance.cli import main; main()"]
CHECK = ["check", "--impl", "planted:PausesAfterFailures", "--profile", "timer", "--examples", "100", "--steps", "30",
         "--seed", "1", "--timeout", str(PATIENCE_S)]


#: planted.py importable by the commands the tests start
PYTHONPATH = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))


def kpurgatory(arguments: list[str], **environment: str) -> subprocess.Popen:
    return subprocess.Popen([*KPURGATORY, *arguments], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": PYTHONPATH, "COLUMNS": "200", **environment})


def signalled_at(marker: Path, process: subprocess.Popen, signum: int) -> tuple[int, str]:
    """Send ``signum`` to the check once the system wrote ``marker``; its exit code and output."""
    deadline = time.monotonic() + PATIENCE_S
    while not marker.exists():
        assert process.poll() is None, f"the check ended before it reached the marker:\n{process.stdout.read()}"
        assert time.monotonic() < deadline, "the check never reached the marker"
        time.sleep(0.05)
    process.send_signal(signum)
    output, _ = process.communicate(timeout=PATIENCE_S)
    return process.returncode, output


@pytest.mark.slow
@pytest.mark.parametrize(("moment", "after", "signum"), [
    ("right after the first failure", 1, signal.SIGINT),
    ("mid-shrink", WRONG_ANSWERS // 2, signal.SIGINT),
    ("late in shrinking", WRONG_ANSWERS - 3, signal.SIGINT),
    ("mid-shrink, by SIGTERM", WRONG_ANSWERS // 2, signal.SIGTERM),
])
def test_an_interrupted_check_keeps_the_counterexample_found(moment, after, signum, tmp_path):
    marker, out, junit = tmp_path / "paused", tmp_path / "out", tmp_path / "junit.xml"
    process = kpurgatory(CHECK + ["--out", str(out), "--junit", str(junit)],
                         **{planted.PAUSE: f"{after}:{marker}"})
    code, output = signalled_at(marker, process, signum)
    assert code == 1, output  # the implementation failed: that much is known
    assert f"interrupted ({signal.Signals(signum).name}): counterexample not fully shrunk" in output
    assert "FAIL seed 1" in output
    [trace] = read_traces(out / "check-timer-1.jsonl")
    assert "not fully shrunk: interrupted" in trace.header.description
    last = trace.steps[-1]  # the wrong answer: one too many
    assert isinstance(last.command, v.Size) and last.system.result == last.observation.result + 1
    assert (out / "check-timer-1.txt").exists() and (out / "check-timer-1.html").exists()
    case = ET.parse(junit).find(".//testcase")
    assert case.find("failure") is not None
    assert int(case.find("properties/property[@name='examples_run']").get("value")) > 0
    replayed = subprocess.run([*KPURGATORY, "replay",
                               str(out / "check-timer-1.jsonl"), "--impl", "planted:PausesAfterFailures"],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr


def test_a_check_interrupted_before_any_failure_says_so_and_exits_3(tmp_path):
    marker, junit = tmp_path / "paused", tmp_path / "junit.xml"
    process = kpurgatory(CHECK + ["--out", str(tmp_path / "out"), "--junit", str(junit)],
                         **{planted.PAUSE: f"0:{marker}"})
    code, output = signalled_at(marker, process, signal.SIGINT)
    assert code == 3, output
    assert "interrupted (SIGINT): stopped before any failure was found" in output
    assert ET.parse(junit).find(".//testcase/error") is not None


def test_an_interruption_that_was_swallowed_still_ends_the_check_at_the_next_step():
    """As if Hypothesis (or a garbage collector callback) had eaten the exception the signal raised: the flag is set,
    and the next step raises again."""
    seen = []

    def swallowed(session: machine.Session) -> None:
        seen.append(session.examples)
        if session.examples == 3:
            session.interrupted = "SIGINT"

    result = run_check(planted.TwoBugs, profile="timer", examples=200, steps=30, seed=1, on_example=swallowed)
    assert result.interrupted == "SIGINT" and not result.passed
    assert max(seen) == 3 and result.examples_run == 3


@pytest.mark.parametrize("timeout", [None, 60.0])
@pytest.mark.parametrize("system", [planted.ExitsInCancel, planted.InterruptsInCancel])
def test_a_system_that_exits_or_raises_keyboard_interrupt_is_a_crash_not_a_hang(system, timeout):
    result = run_check(system, profile="timer", examples=60, steps=20, seed=2, timeout=timeout)
    [failure] = result.failures
    assert failure.signature == Signature("raised", "timer_cancel", system.raised.__name__)
    assert f"system failed: {system.raised.__name__}: 3" in failure.summary and failure.shrunk_length <= 3
    assert result.broken  # it failed to answer: exit 3, as for any system that raises


def test_a_system_that_hangs_in_close_does_not_hold_the_check():
    result = run_check(planted.HangsInClose, profile="timer", examples=5, steps=10, seed=1, timeout=0.5)
    assert result.passed and result.examples_run >= 5  # Hypothesis's count: runs it had to discard come on top


def counted(served: bool):
    """A factory of LivelocksInAdvance, in process or behind the stdio adapter, and how many systems it has made (an
    in-process system is made in a process of its own: counted in shared memory)."""
    if served:
        adapter, made = planted.counted_adapter("LivelocksInAdvance", 3.0)
        return adapter, lambda: len(made)
    shared = multiprocessing.get_context("fork").Value("i", 0)

    def factory():
        shared.value += 1
        return planted.LivelocksInAdvance()

    return factory, lambda: shared.value


@pytest.mark.parametrize("served", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["in process", "through the stdio adapter"])
def test_a_livelock_found_while_shrinking_ends_with_a_counterexample_after_a_bounded_number_of_hangs(
        served, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", PYTHONPATH)
    factory, made = counted(served)
    result = run_check(factory, profile="timer", examples=30, steps=20, seed=2, timeout=1.0, out_dir=tmp_path,
                       hang_budget=4)
    [hang] = [found for found in result.failures if found.signature.kind == "hung"]
    assert hang.signature == Signature("hung", "advance", "")
    assert read_traces(hang.trace_path) == [hang.counterexample] and hang.shrunk_length <= 6
    # a fresh system after each run that hung: the hang found; for each failure (its stuck wheel also fails the wheel
    # read-out) at most 4 runs' worth of the time limit while Hypothesis shrank it and as much while its steps were
    # deleted (a hang is shrunk under a shorter limit, then run again under the full one); 4 while exploring after
    # them (then exploration stops)
    # (an in-process system is made twice for each: once more to answer the calls before the hang, `ForkedSystem`)
    hangs = 1 + (2 * machine.shrink_hang_budget(4, 3.0) + 1) * len(result.failures) + 4
    assert 2 <= made() <= 1 + hangs * (1 if served else 2)
    assert result.cut_short == "exploration stopped after 4 runs that hung with a failure already reported"


@pytest.mark.parametrize("model", [planted.LivelockingModel, planted.RaisingModel])
def test_a_reference_model_that_hangs_or_raises_is_a_bug_of_kpurgatory_with_its_run_written(model, tmp_path,
                                                                                            monkeypatch):
    monkeypatch.setattr(machine, "Model", model)
    result = run_check(planted.TwoBugs, profile="timer", examples=50, steps=20, seed=1, timeout=0.5,
                       out_dir=tmp_path)
    assert not result.passed and result.broken
    [broke] = [found for found in result.failures if found.signature.kind == machine.REFERENCE_BROKE]
    assert "the reference model" in broke.summary and "bug in kpurgatory" in broke.summary
    assert ("hung: no answer within 10 s" if model is planted.LivelockingModel else
            "raised ZeroDivisionError: planted in the model") in broke.summary
    [trace] = read_traces(broke.trace_path)
    assert trace.trace_id == "reference-timer-1" and isinstance(trace.steps[-1].command, v.Advance)
    assert "the reference model" in trace.steps[-1].system and "bug in kpurgatory" in trace.header.description


def test_check_command_reports_a_reference_model_that_raises_as_a_bug_of_kpurgatory(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", "import planted, sys; from kpurgatory.conformance.check import "
                                "machine; machine.Model = planted.RaisingModel; from kpurgatory.conformance.cli "
                                "import main; main()", "check", "--impl", "planted:TwoBugs", "--profile", "timer",
                                "--examples", "50", "--steps", "20", "--seed", "1", "--out", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONPATH": PYTHONPATH, "COLUMNS": "200"})
    output, _ = process.communicate(timeout=PATIENCE_S)
    assert process.returncode == 3, output
    assert "the reference model raised ZeroDivisionError" in output and "Traceback" not in output
    assert (tmp_path / "reference-timer-1.jsonl").exists()


def test_check_with_threads_writes_junit(tmp_path):
    junit = tmp_path / "junit.xml"
    process = kpurgatory(["check", "--threads", "2", "--examples", "2", "--steps", "3", "--seed", "1", "--out",
                          str(tmp_path / "out"), "--junit", str(junit)])
    output, _ = process.communicate(timeout=PATIENCE_S)
    assert process.returncode == 0, output
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "1" and suite.get("failures") == "0" and suite.get("errors") == "0"


def test_check_with_threads_exits_3_when_the_adapter_dies_before_hello(tmp_path):
    junit = tmp_path / "junit.xml"
    process = kpurgatory(["check", "--threads", "2", "--adapter", f"{sys.executable} -c 'import sys; sys.exit(4)'",
                          "--out", str(tmp_path / "out"), "--junit", str(junit)])
    output, _ = process.communicate(timeout=PATIENCE_S)
    assert process.returncode == 3, output
    assert "exited with code 4" in output
    assert ET.parse(junit).find(".//testcase/error") is not None
