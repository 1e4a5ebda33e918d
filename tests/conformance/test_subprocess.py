"""The subprocess adapter: a correct adapter passes through it; one that crashes, hangs, writes garbage or breaks the
protocol fails the check with a report of which, and its shrunk run replays to the same break."""

import functools
import signal
import subprocess
import sys
import time
from xml.etree import ElementTree
from pathlib import Path

import attrs
import pytest

from kpurgatory.conformance.adapters import open_system
from kpurgatory.conformance.adapters import subprocess as adapter_module
from kpurgatory.conformance.adapters.subprocess import AdapterCrashed, SubprocessSystem
from kpurgatory.conformance.adapters.sut import play_each
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.traces.replay import replay
from kpurgatory.conformance.traces.codec import read_traces
from kpurgatory.model import vocabulary as v

REFERENCE = "kpurgatory.conformance.adapters.reference:factory"
MISBEHAVING = f"{sys.executable} {Path(__file__).with_name('misbehaving_adapter.py')}"
SERVED_MODEL = f"{sys.executable} -m kpurgatory.conformance.adapters.stdio {REFERENCE}"


def test_the_model_served_over_the_protocol_passes():
    result = run_check(functools.partial(SubprocessSystem, SERVED_MODEL), profile="purgatory", examples=15,
                       steps=30, seed=1)
    assert result.passed, result.failure_summary
    assert result.steps_run > 100


BREAKS = {  # mode: (kind, detail); the adapter misbehaves on the third command of every run
    "crash": ("adapter crashed", "exited with code 3 before answering request"),
    "hang": ("adapter timed out", "no response to request"),
    "garbage": ("adapter wrote garbage", "not JSON: Expecting value at column 1: 'this is not json'"),
    "deep": ("adapter wrote garbage", "arrays and objects nested deeper than 64 levels"),
    "fork-crash": ("adapter crashed", "exited with code 4 before answering request"),
    "wrong-seq": ("protocol violation", "responses must echo their request's seq"),
    "bad-event": ("protocol violation", "response to request"),
    "failure": ("adapter reported a failure", "the implementation cannot do that"),
    "hung": ("adapter stopped a call that would not end", "it would never end"),
}


def lingering(marker: str, within_s: float = 5.0) -> list[int]:
    """`processes_with` once they had ``within_s`` to die: a process killed with SIGKILL is gone only once the
    kernel has torn it down, which a loaded machine takes a moment to do."""
    deadline = time.monotonic() + within_s
    while (found := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker`` (zombies count as gone)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if marker.encode() in (entry / "cmdline").read_bytes() and \
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


@pytest.mark.parametrize("mode", sorted(BREAKS))
def test_a_broken_adapter_fails_the_check_saying_how_with_a_shrunk_run_that_replays(mode, tmp_path):
    kind, detail = BREAKS[mode]
    command = f"{MISBEHAVING} {mode} 4 {tmp_path}"
    timeout = 2.0 if mode == "hang" else 10.0  # long enough for the adapter to start on a busy machine
    result = run_check(functools.partial(SubprocessSystem, command, timeout=timeout), profile="timer", examples=5,
                       steps=10, seed=1, out_dir=tmp_path, max_failures=1)
    assert not result.passed
    assert f"step 3: system failed: {kind}: " in result.failure_summary and detail in result.failure_summary
    signature_kind = "hung" if mode in ("hang", "hung") else kind
    assert result.shrunk_length == 3 and [found.signature.kind for found in result.failures] == [signature_kind]
    trace = result.counterexample
    assert len(trace.steps) == 3 and len(result.report.outcomes) == 2
    assert read_traces(result.trace_path) == [trace]
    if mode == "crash":
        assert "simulated crash: the implementation fell over" in result.failure_summary  # the stderr tail
    target = open_system(adapter=command, timeout=timeout)
    try:
        reproduced = replay(trace, target.system, features=target.hello.features)
    finally:
        target.system.close()
    assert reproduced.error.startswith(f"step 3: system failed: {kind}: ")
    alone = replay(trace)  # the recorded failure to answer, without the adapter
    assert alone.broken and alone.error.startswith(f"step 3: system failed: {kind}: ")
    assert lingering(str(tmp_path)) == []  # the adapter and whatever it forked


def test_a_forked_child_of_a_passing_adapter_does_not_outlive_the_run(tmp_path):
    command = f"{MISBEHAVING} fork 0 {tmp_path}"
    result = run_check(functools.partial(SubprocessSystem, command), profile="timer", examples=3, steps=5, seed=1)
    assert result.passed, result.failure_summary
    assert lingering(str(tmp_path)) == []


def test_an_endless_stderr_line_is_kept_as_a_bounded_tail(tmp_path):
    system = SubprocessSystem(f"{MISBEHAVING} stderr-flood 1 {tmp_path}", timeout=1.5)
    system.hello()
    with pytest.raises(adapter_module.AdapterTimedOut) as caught:
        system.init("timer", v.Params())
    system.close()
    assert "killed it and all it started" in str(caught.value)
    assert 0 < len(caught.value.stderr_tail) <= adapter_module.STDERR_TAIL_BYTES
    assert set(caught.value.stderr_tail) == {"x"}
    assert lingering(str(tmp_path)) == []


def test_an_adapter_that_breaks_on_hello_fails_the_check_without_a_trace():
    result = run_check(functools.partial(SubprocessSystem, f"{MISBEHAVING} crash 0"), profile="timer")
    assert not result.passed and result.counterexample is None
    assert result.failure_summary.startswith("hello: system failed: adapter crashed: exited with code 3")


def test_a_command_that_cannot_start_is_reported():
    with pytest.raises(AdapterCrashed, match="cannot start '/no/such/adapter'"):
        SubprocessSystem("/no/such/adapter")


def test_close_kills_an_adapter_that_ignores_end_of_input(monkeypatch):
    monkeypatch.setattr(adapter_module, "EXIT_GRACE_S", 0.2)
    system = SubprocessSystem(f"{MISBEHAVING} ignore-eof -1")
    system.hello()
    system.close()
    assert system.process.poll() is not None


def test_a_broken_adapter_stays_broken():
    system = SubprocessSystem(f"{MISBEHAVING} garbage 0")
    with pytest.raises(adapter_module.AdapterGarbage) as first:
        system.hello()
    with pytest.raises(adapter_module.AdapterGarbage) as again:
        system.hello()
    assert again.value is first.value and system.process.poll() is not None
    system.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_harness_kills_a_hung_adapter_and_its_children(signum, tmp_path):
    adapter = f"{MISBEHAVING} fork-hang 2 {tmp_path}"
    harness = subprocess.Popen(
        [sys.executable, "-c", "from kpurgatory.conformance.cli import main; main()", "check", "--adapter", adapter,
         "--timeout", "600", "--profile", "timer", "--out", str(tmp_path / "out"), "--junit", str(tmp_path / "j.xml")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    deadline = time.monotonic() + 60
    # the adapter's keeper, the adapter and the child it starts on request 2: the check is running its steps (a
    # signal during hello, before the check handles signals, would be the parent's: ignored by a background job)
    while len(set(processes_with(str(tmp_path))) - {harness.pid}) < 3:
        assert time.monotonic() < deadline and harness.poll() is None, harness.communicate()
        time.sleep(0.1)
    harness.send_signal(signum)
    stdout, stderr = harness.communicate(timeout=30)
    assert harness.returncode == 3, stderr
    assert b"interrupted" in stdout and b"Traceback" not in stdout + stderr
    assert lingering(str(tmp_path)) == []
    [error] = ElementTree.parse(tmp_path / "j.xml").iter("error")  # the report is written on this path too
    assert f"interrupted ({signal.Signals(signum).name})" in error.get("message") + (error.text or "")


def test_the_first_answer_may_take_the_adapters_start_up_and_later_ones_only_the_timeout(tmp_path):
    slow_start = tmp_path / "slow_start.py"  # a start-up longer than the timeout, as a loaded machine's can be
    slow_start.write_text("import os, sys, time\ntime.sleep(2)\nos.execv(sys.argv[1], sys.argv[1:])\n")
    system = SubprocessSystem(f"{sys.executable} {slow_start} {MISBEHAVING} hang 2", timeout=0.5)
    try:
        assert system.hello().implementation
        system.init("timer", v.Params())
        with pytest.raises(adapter_module.AdapterTimedOut, match="within 0.5 s"):
            system.step(v.Advance(1))
    finally:
        system.close()


def test_a_run_in_one_batch_is_answered_as_the_same_requests_one_at_a_time():
    """A failure inside a batch ends the run there, as it would one request at a time; the run after it starts
    afresh (the same adapter, the next init)."""
    params = v.Params(tick_ms=1, wheel_size=4, start_ms=0, purge_interval=2)
    runs = [[v.Watch("o0", ["k0"], 5, None), v.Advance(3), v.Force("nobody"), v.Watched()],
            [v.Watch("o0", ["k0", "k1"], 2, 2), v.Check("k1"), v.Advance(9), v.Watched(), v.Shutdown()]]
    batched, alone = SubprocessSystem(SERVED_MODEL), SubprocessSystem(SERVED_MODEL)
    try:
        assert "batch" in batched.hello().features and alone.hello()
        played = [(batched.play("purgatory", params, commands), play_each(alone, "purgatory", params, commands))
                  for commands in runs]
        for in_one, each in played:
            assert in_one.batched and not each.batched and in_one.observed == each.observed
            assert type(in_one.error) is type(each.error)
        failed, passed = played[0][0], played[1][0]
        assert str(failed.error).endswith("answer 3 (force): CommandError: op: 'nobody' was never watched")
        assert len(failed.observed) == 2 and len(passed.observed) == 5 and batched.broken is None
    finally:
        batched.close()
        alone.close()


def test_the_same_seed_gives_the_same_check_on_any_number_of_workers():
    one, two = (run_check(functools.partial(SubprocessSystem, f"{MISBEHAVING} failure 7"), profile="timer",
                          examples=40, steps=20, seed=5, jobs=jobs) for jobs in (1, 2))
    assert not one.passed and one.failures
    timing = {name: None for name in one.TIMING}
    assert attrs.evolve(one, **timing) == attrs.evolve(two, **timing)
