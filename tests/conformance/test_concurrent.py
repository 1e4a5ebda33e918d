"""The concurrent check: runs that really interleave, the history checker on hand-made histories (one per property,
and a clean one), bugs it catches in real runs, systems that hang or raise, and the history's file and commands."""

import functools
import random
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.adapters.builtin import AdapterOperation, BuiltinAdapter
from kpurgatory.conformance.adapters.subprocess import SubprocessSystem
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.cli import main
from kpurgatory.conformance.check.concurrent import (CLOCK, DRAIN, check_history, execute, plan_run,
                                               run_concurrent_check)
from kpurgatory.conformance.check.findings import Signature
from kpurgatory.conformance.tools.mutants import adapter_class, BY_ID
from kpurgatory.conformance.traces.codec import (Header, Step, Timing, Trace, TraceFormatError, dumps, loads, read_traces,
                                          write_traces)
from kpurgatory.model import vocabulary as v

PARAMS = v.Params(tick_ms=1, wheel_size=4, start_ms=0, purge_interval=1000)


def history(*calls, params=PARAMS) -> Trace:
    """calls: (thread, invoked, returned, command, result, events), in any order."""
    steps = [Step(seq, command, v.Observation(result, tuple(events)), Timing(thread, invoked, returned))
             for seq, (thread, invoked, returned, command, result, events)
             in enumerate(sorted(calls, key=lambda call: call[1]), start=1)]
    return Trace(Header("h", "purgatory", params, "test", threads=2), steps)


def properties(trace: Trace) -> set[str]:
    return {violation.property for violation in check_history(trace)}


def drained(*calls, op_keys=(("a", ("k",)),), last=100):
    """``calls`` followed by a drain that finds everything complete and clean."""
    keys = sorted({key for _, keys in op_keys for key in keys})
    tail = [(DRAIN, last + 2 * i, last + 2 * i + 1, command, result, ())
            for i, (command, result) in enumerate([*((v.Check(key), 0) for key in keys), (v.Watched(), 0),
                                                   (v.Delayed(), 0), (v.WatcherKeys(), []), (v.Shutdown(), [])])]
    return history(*calls, *tail)


# --- the checker on hand-made histories -----------------------------------------------------------------------


def test_a_clean_history_has_no_violations():
    clean = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, None), False, ()),
        ("w1", 1, 5, v.SetReady("a"), None, ()),
        ("w1", 6, 9, v.Check("k"), 1, (v.Complete("a", "check"),)),
        (CLOCK, 2, 8, v.Advance(20), None, ()),
    )
    assert check_history(clean) == []


def test_two_completions_break_exactly_once():
    trace = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, 1), True, (v.Complete("a", "try"),)),
        ("w1", 1, 5, v.Force("a"), True, (v.Complete("a", "force"),)),
    )
    [violation] = check_history(trace)
    assert violation.property == "exactly_once" and violation.seqs == (1, 2)


def test_an_expiry_needs_its_expire_event_right_after():
    trace = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 5, None), False, ()),
        (CLOCK, 4, 6, v.Advance(5), None, (v.Complete("a", "expire"),)),
    )
    assert properties(trace) == {"exactly_once"}


def test_an_op_never_completed_nor_cancelled_is_lost():
    trace = history(
        ("w0", 0, 3, v.Watch("a", ("k",), 5, None), False, ()),
        (DRAIN, 10, 11, v.Shutdown(), [], ()),
    )
    assert "no_lost_op" in properties(trace)
    dropped = history(
        ("w0", 0, 3, v.Watch("a", ("k",), 5, None), False, ()),
        (DRAIN, 10, 11, v.Shutdown(), ["a"], ()),
    )
    assert "no_lost_op" not in properties(dropped)


def test_a_completion_by_check_needs_a_ready_op_watched_on_that_key():
    never_ready = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, None), False, ()),
        ("w1", 4, 5, v.Check("k"), 1, (v.Complete("a", "check"),)),
    )
    assert properties(never_ready) == {"justified"}
    ready_too_late = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, None), False, ()),
        ("w1", 4, 5, v.Check("k"), 1, (v.Complete("a", "check"),)),
        ("w0", 6, 7, v.SetReady("a"), None, ()),
    )
    assert properties(ready_too_late) == {"justified"}
    other_key = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, None), False, ()),
        ("w0", 4, 5, v.SetReady("a"), None, ()),
        ("w1", 6, 7, v.Check("j"), 1, (v.Complete("a", "check"),)),
        op_keys=(("a", ("k", "j")),),
    )
    assert properties(other_key) == {"justified"}


def test_a_completion_must_come_from_a_route_the_call_can_take():
    trace = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, 1), False, ()),
        ("w1", 4, 5, v.CancelKey("k"), ["a"], (v.Complete("a", "try"),)),
    )
    assert properties(trace) == {"justified"}


def test_results_must_agree_with_events():
    trace = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, None), False, ()),
        ("w0", 4, 5, v.SetReady("a"), None, ()),
        ("w1", 6, 7, v.Check("k"), 2, (v.Complete("a", "check"),)),
    )
    assert properties(trace) == {"results"}


def test_an_expiry_before_the_deadlines_tick_is_early():
    early = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, None), False, ()),
        (CLOCK, 4, 6, v.Advance(9), None, (v.Complete("a", "expire"), v.Expire("a"))),
    )
    assert properties(early) == {"on_time"}
    params = v.Params(tick_ms=10, wheel_size=4, start_ms=0, purge_interval=1000)
    tick_start = history(  # deadline 15 lies in the tick [10, 20): firing at 10 is Kafka's granularity
        ("w0", 0, 3, v.Watch("a", ("k",), 15, None), False, ()),
        (CLOCK, 4, 6, v.Advance(10), None, (v.Complete("a", "expire"), v.Expire("a"))),
        params=params)
    assert "on_time" not in properties(tick_start)


def test_the_clock_moving_during_a_watch_widens_the_deadline():
    """The watch overlaps an advance to 5: its deadline is 10 or 15, so an expiry at 12 is not early, and an
    advance to 12 does not have to expire it."""
    trace = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, None), False, ()),
        (CLOCK, 1, 2, v.Advance(5), None, ()),
        (CLOCK, 4, 5, v.Advance(12), None, ()),
        (CLOCK, 6, 7, v.Advance(15), None, (v.Complete("a", "expire"), v.Expire("a"))),
    )
    assert check_history(trace) == []


def test_an_op_still_pending_after_its_deadline_is_late_unless_cancelled():
    late = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, None), False, ()),
        (CLOCK, 4, 5, v.Advance(10), None, ()),
        (CLOCK, 6, 7, v.Advance(11), None, (v.Complete("a", "expire"), v.Expire("a"))),
    )
    assert properties(late) == {"on_time"}
    cancelled = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, None), False, ()),
        ("w1", 1, 4, v.Cancel("a"), None, ()),
        (CLOCK, 5, 6, v.Advance(10), None, ()),
        ("w1", 7, 8, v.Force("a"), True, (v.Complete("a", "force"),)),
    )
    assert check_history(cancelled) == []


def test_lists_must_be_empty_and_gone_once_everything_completed_and_every_key_was_checked():
    trace = history(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, 1), True, (v.Complete("a", "try"),)),
        (DRAIN, 10, 11, v.Check("k"), 0, ()),
        (DRAIN, 12, 13, v.Watched(), 1, ()),
        (DRAIN, 14, 15, v.WatcherKeys(), ["k"], ()),
        (DRAIN, 16, 17, v.Delayed(), 1, ()),
        (DRAIN, 18, 19, v.Shutdown(), [], ()),
    )
    violations = check_history(trace)
    assert {violation.property for violation in violations} == {"watcher_cleanup"}
    assert sorted(seq for violation in violations for seq in violation.seqs) == [3, 4, 5]


def test_a_call_that_raised_or_never_returned_is_a_failure():
    trace = history(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, None), False, ()),
        ("w1", 1, None, v.Check("k"), None, ()),
    )
    assert "no_failure" in properties(trace)


def test_a_sequential_trace_is_not_a_history():
    with pytest.raises(ValueError, match="not a concurrent history"):
        check_history(Trace(Header("s", "purgatory", PARAMS), ()))


# --- real runs --------------------------------------------------------------------------------------------------


def test_the_builtin_implementation_passes():
    result = run_concurrent_check(BuiltinAdapter, threads=4, runs=30, steps=40, seed=3)
    assert result.passed, result.violations
    assert result.runs == 30 and result.calls > 30 * 4 * 40


def test_calls_of_different_threads_really_overlap():
    """Some call of one worker is invoked while another worker's call is running. A run on a machine whose cores
    are busy elsewhere may not interleave at all (a waiting thread cannot ask for the GIL while the OS does not run
    it), so this looks at runs until one does, up to a hundred."""
    def overlapping(run: int) -> int:
        trace = execute(BuiltinAdapter(), BuiltinAdapter().hello(), plan_run(random.Random(run), 4, 60), timeout=60,
                        trace_id=f"overlap-{run}")
        assert trace.steps[-1].command == v.Shutdown() and check_history(trace) == []
        workers = [step.timing for step in trace.steps if step.timing.thread.startswith("w")]
        return sum(a.thread != b.thread and a.invoked < b.invoked < a.returned for a in workers for b in workers)

    assert any(map(overlapping, range(100)))


@pytest.mark.parametrize("mutant, broken", [
    ("double_completion", "exactly_once"),
    ("cancel_key_completes", "justified"),
    ("flush_drops_entries", "on_time"),
    ("kafka_2160_empty_lists_kept", "watcher_cleanup"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_a_buggy_implementation_fails_with_its_history(mutant, broken, tmp_path):
    result = run_concurrent_check(adapter_class(BY_ID[mutant]), threads=3, runs=50, steps=40, seed=1,
                                  out_dir=tmp_path)
    assert not result.passed
    assert broken in {violation.property for violation in result.violations}
    [saved] = read_traces(result.history_path)
    assert saved == result.history
    outcome = CliRunner().invoke(main, ["check-history", str(result.history_path)])
    assert outcome.exit_code == 1 and broken in outcome.output


class CheckThenSet(AdapterOperation):
    """forceComplete as a check followed by a set, not a compare-and-set: right in one thread, wrong in two."""

    __slots__ = ()

    def force_complete(self) -> bool:
        if self.completed:
            return False
        time.sleep(0)  # let another thread in between the check and the set, as a JVM would on another core
        self.completed = True
        self.cancel()
        self.on_complete()
        return True


class NotAtomic(BuiltinAdapter):
    operation_class = CheckThenSet


def test_a_race_that_no_sequential_run_shows_is_caught():
    assert run_check(NotAtomic, profile="purgatory", examples=100, seed=1).passed
    # the check stops at the race: the runs are a budget for a loaded machine, where threads interleave less
    result = run_concurrent_check(NotAtomic, threads=4, runs=500, steps=40, seed=1, shrink_budget_s=5)
    assert not result.passed and "exactly_once" in {violation.property for violation in result.violations}


class Hanging(BuiltinAdapter):
    """Blocks forever in its third check: the run must end anyway, with the call shown as never returned."""

    def __init__(self):
        super().__init__()
        self.checks, self.forever = 0, threading.Event()

    def step(self, command):
        if isinstance(command, v.Check):
            self.checks += 1
            if self.checks == 3:
                self.forever.wait()
        return super().step(command)


class Raising(BuiltinAdapter):
    def step(self, command):
        if isinstance(command, v.SetReady):
            raise RuntimeError("the implementation fell over")
        return super().step(command)


@pytest.mark.parametrize("system, says, signature", [
    (Hanging, "never returned", Signature("hung", "check", "")),
    (Raising, "the implementation fell over", Signature("raised", "set_ready", "RuntimeError")),
])
def test_a_hanging_or_raising_system_is_reported_once_and_the_check_goes_on(system, says, signature):
    """Every history fails the same way: it is reported once, each later one counts as met again, and a fresh system
    plays each run (a hung one is abandoned)."""
    result = run_concurrent_check(system, threads=3, runs=5, steps=40, seed=2, timeout=1, max_failures=5)
    assert not result.passed
    [failure] = result.failures
    assert failure.signature == signature and failure.repeats >= 5
    assert any(violation.property == "no_failure" and says in violation.message for violation in result.violations)
    assert result.runs == 5 and not any(step.command == v.Shutdown() for step in result.history.steps)


# --- the history as a file, and the commands ----------------------------------------------------------------------


def test_a_history_round_trips_and_its_timings_are_validated():
    trace = drained(("w0", 0, 3, v.Watch("a", ("k",), 10, 1), True, (v.Complete("a", "try"),)))
    assert loads(dumps(trace)) == [trace]
    untimed = dumps(trace).replace(',"thread":"w0","invoked":0,"returned":3', "")
    with pytest.raises(TraceFormatError, match="needs thread, invoked and returned"):
        loads(untimed)
    with pytest.raises(TraceFormatError, match="returned must come after invoked"):
        loads(dumps(trace).replace('"invoked":0,"returned":3', '"invoked":3,"returned":3'))
    with pytest.raises(TraceFormatError, match="invoked"):
        loads(dumps(trace).replace('"invoked":0,', ""))


def test_check_history_exit_codes(tmp_path):
    clean = write_traces(tmp_path / "clean.jsonl", drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, 1), True, (v.Complete("a", "try"),))))
    sequential = write_traces(tmp_path / "seq.jsonl", Trace(Header("s", "purgatory", PARAMS), ()))
    runner = CliRunner()
    assert runner.invoke(main, ["check-history", str(clean)]).exit_code == 0
    outcome = runner.invoke(main, ["check-history", str(sequential)])
    assert outcome.exit_code == 2 and "not a concurrent history" in outcome.output
    outcome = runner.invoke(main, ["replay", str(clean)])
    assert outcome.exit_code == 2 and "check-history" in outcome.output


SERVED = f"{sys.executable} -m kpurgatory.conformance.adapters.stdio kpurgatory.conformance.adapters.builtin:factory"


def test_an_adapter_declaring_the_concurrent_feature_is_checked_through_the_protocol(tmp_path):
    """The built-in implementation served by a thread pool: calls overlap inside the adapter process, and a buggy one
    served the same way fails with its history."""
    served = SERVED.replace("stdio ", "stdio --concurrent ")
    result = run_concurrent_check(functools.partial(SubprocessSystem, served), threads=3, runs=5, steps=30, seed=4)
    assert result.passed, result.violations
    assert result.implementation.startswith("kpurgatory.impl (") and result.calls > 5 * 3 * 30
    outcome = CliRunner().invoke(main, ["check", "--threads", "3", "--examples", "3", "--steps", "20", "--seed", "1",
                                        "--adapter", served, "--out", str(tmp_path)])
    assert outcome.exit_code == 0, outcome.output
    buggy = served.replace("adapters.builtin:factory", "tools.mutants:double_completion")
    result = run_concurrent_check(functools.partial(SubprocessSystem, buggy), threads=3, runs=20, steps=30, seed=4)
    assert not result.passed and "exactly_once" in {violation.property for violation in result.violations}


def test_check_threads_passes_on_the_builtin_and_refuses_what_it_cannot_do(tmp_path):
    runner = CliRunner()
    outcome = runner.invoke(main, ["check", "--threads", "3", "--examples", "5", "--steps", "20", "--seed", "1",
                                   "--out", str(tmp_path)])
    assert outcome.exit_code == 0, outcome.output
    assert "pass" in outcome.output
    outcome = runner.invoke(main, ["check", "--threads", "2", "--adapter", SERVED])
    assert outcome.exit_code == 2 and "'concurrent' feature" in outcome.output
    outcome = runner.invoke(main, ["check", "--threads", "2", "--profile", "timer"])
    assert outcome.exit_code == 2 and "purgatory" in outcome.output


def test_the_pytest_fixture_fails_with_the_violations_and_the_history(kpurgatory_check_concurrently, tmp_path):
    assert kpurgatory_check_concurrently(BuiltinAdapter, threads=2, runs=3, steps=20, seed=1).passed
    with pytest.raises(pytest.fail.Exception) as failure:
        kpurgatory_check_concurrently(adapter_class(BY_ID["double_completion"]), threads=2, runs=20, seed=1)
    message = str(failure.value)
    assert "exactly_once" in message and "✗" in message
    path = next(tmp_path.rglob("*.jsonl"))
    assert read_traces(path)[0].header.threads == 3


def test_a_ready_op_a_check_leaves_behind_is_a_lost_wakeup():
    lost = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, None), False, ()),
        ("w1", 4, 5, v.SetReady("a"), None, ()),
        ("w1", 6, 7, v.Check("k"), 0, ()),
        ("w1", 8, 9, v.Force("a"), True, (v.Complete("a", "force"),)),
    )
    assert properties(lost) == {"no_lost_wakeup"}
    raced = drained(  # the watch had not listed the op yet when the check ran; its second try completed it
        ("w0", 0, 9, v.Watch("a", ("k",), 10, None), True, (v.Complete("a", "try"),)),
        ("w1", 1, 2, v.SetReady("a"), None, ()),
        ("w1", 3, 4, v.Check("k"), 0, ()),
    )
    assert check_history(raced) == []
    cancelled = drained(
        ("w0", 0, 3, v.Watch("a", ("k",), 10, None), False, ()),
        ("w1", 4, 5, v.SetReady("a"), None, ()),
        ("w0", 6, 7, v.CancelKey("k"), ["a"], ()),
        ("w1", 8, 9, v.Check("k"), 0, ()),
        ("w1", 10, 11, v.Force("a"), True, (v.Complete("a", "force"),)),
    )
    assert check_history(cancelled) == []


# --- distinct failures in one run ---------------------------------------------------------------------------------

HERE = Path(__file__).parent


def test_each_distinct_race_is_reported_once_with_its_own_history(tmp_path, monkeypatch):
    """Two races in one system (the mutants missing_second_try and kafka_17848_try_completed together): one
    ``check --threads`` run reports both, each with its history written and failing check-history on its own, and
    goes on past each race it already knows."""
    monkeypatch.syspath_prepend(str(HERE))
    outcome = CliRunner().invoke(main, ["check", "--threads", "2", "--examples", "3", "--steps", "10", "--seed", "1",
                                        "--impl", "planted_releases:TwoRaceBugs", "--out", str(tmp_path)],
                                 env={"COLUMNS": "250"})
    assert outcome.exit_code == 1, outcome.output
    assert "purgatory (concurrent): breaks justified (stale_try) in check" in outcome.output
    assert "purgatory (concurrent): breaks no_lost_wakeup in check+set_ready" in outcome.output
    assert "2 distinct failures, 0 Kafka findings" in outcome.output
    histories = sorted(tmp_path.glob("*.jsonl"))
    assert [path.name for path in histories] == ["schedule-locked_completion_during_walk.jsonl",
                                                  "schedule-ready_between_watch_tries.jsonl"]
    for path in histories:
        assert CliRunner().invoke(main, ["check-history", str(path)]).exit_code == 1
    import planted_releases

    capped = run_concurrent_check(planted_releases.TwoRaceBugs, threads=2, runs=3, steps=10, seed=1)
    assert len(capped.failures) == 1 and capped.runs == 0  # the default stops at the first, as before
