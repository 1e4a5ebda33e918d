"""Races that happen: start barriers, the overlap figures, shrinking a failing run, the race schedules through gates
(in process and through the stdio adapter), the race mutants they kill, the races of older Kafka releases as findings
of the systems that declare them, and schedules whose waiting assumptions a system does not meet."""

import io
import json
import random
import sys
import threading
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

from kpurgatory.conformance.adapters.builtin import BuiltinAdapter
from kpurgatory.conformance.adapters.gates import Gates, GateSpec
from kpurgatory.conformance.adapters.stdio import serve
from kpurgatory.conformance.adapters.subprocess import SubprocessSystem
from kpurgatory.conformance.check.concurrent import (CLOCK, STALE_OP, Plan, check_history, driver_for, execute, overlap,
                                                     plan_run, run_concurrent_check, shrink)
from kpurgatory.conformance.check.schedules import SCHEDULES, run_schedule
from kpurgatory.conformance.check import strategies
from kpurgatory.conformance.cli import main
from kpurgatory.conformance.tools.mutants import BY_ID, adapter_class
from kpurgatory.conformance.traces.codec import Header, Step, Timing, Trace, dumps, loads
from kpurgatory.model import vocabulary as v

PARAMS = v.Params(tick_ms=1, wheel_size=4, start_ms=0, purge_interval=1000)
STDIO = f"{sys.executable} -m kpurgatory.conformance.adapters.stdio --concurrent"


def timed(*intervals) -> Trace:
    steps = [Step(seq, v.Size(), v.Observation(0), Timing("w0", 2 * seq, 2 * seq + 1, exec_ns=interval))
             for seq, interval in enumerate(intervals, start=1)]
    return Trace(Header("t", "purgatory", PARAMS, "test", threads=2), steps)


# --- the overlap figures --------------------------------------------------------------------------------------


def test_overlap_counts_calls_whose_intervals_intersect_and_the_most_at_once():
    figures = overlap(timed((0, 10), (5, 15), (20, 30), (30, 40), (50, 60), (8, 9)))
    assert (figures.calls, figures.overlapping, figures.most) == (6, 5, 3)
    assert "83% of 6 calls" in str(figures) and "at most 3 at once" in str(figures)


def test_overlap_ignores_calls_without_intervals_and_says_so():
    assert overlap(timed((0, 10), None, (20, 30))).overlapping == 0
    assert "unknown" in str(overlap(timed(None)))


def test_execution_intervals_round_trip_and_are_validated():
    trace = timed((0, 10), (5, 15))
    assert loads(dumps(trace)) == [trace]
    with pytest.raises(ValueError, match="exec_ns"):
        loads(dumps(timed((10, 5))))


class Rendezvous(BuiltinAdapter):
    """Each watch of a round returns only once all four watches of its round are in the system: a harness that did
    not run a round's calls at once would break the barrier. (The drain's watch runs alone.)"""

    def __init__(self):
        super().__init__()
        self.round = threading.Barrier(4, timeout=60)

    def step(self, command):
        if isinstance(command, v.Watch) and command.op != STALE_OP:
            self.round.wait()
        return super().step(command)


def test_the_calls_of_a_round_really_run_at_once():
    """Every call has an execution interval, and the calls of a round are in the system together: their intervals
    overlap, all four at once (how much real calls overlap is what `kpurgatory check --threads` measures)."""
    system = Rendezvous()
    rounds = tuple(tuple((f"w{thread}", v.Watch(f"o{number}.{thread}", ("k",), 100, None)) for thread in range(4))
                   for number in range(3))
    history = execute(system, system.hello(), Plan(PARAMS, rounds), timeout=60, trace_id="o")
    assert history.steps[-1].command == v.Shutdown() and not system.round.broken
    assert all(step.timing.exec_ns is not None for step in history.steps)
    figures = overlap(attrs.evolve(history, steps=tuple(step for step in history.steps
                                                        if isinstance(step.command, v.Watch)
                                                        and step.command.op != STALE_OP)))
    assert (figures.calls, figures.overlapping, figures.most) == (12, 12, 4)


# --- start barriers and gates in the stdio server -------------------------------------------------------------


def test_the_stdio_server_holds_a_barrier_until_all_its_parties_arrived():
    """The first request of a barrier of two is answered only after the second arrives: an unrelated request sent
    in between is answered first."""
    lines = [{"seq": 0, "cmd": "hello", "args": {"protocol_version": 1}},
             {"seq": 1, "cmd": "init", "args": {"profile": "purgatory", "params": {
                 "tick_ms": 1, "wheel_size": 4, "start_ms": 0, "purge_interval": 1000}}},
             {"seq": 2, "cmd": "size", "args": {}, "barrier": {"id": "r", "parties": 2}},
             {"seq": 3, "cmd": "delayed", "args": {}},
             {"seq": 4, "cmd": "watched", "args": {}, "barrier": {"id": "r", "parties": 2}}]
    out = io.StringIO()

    class Input:
        """Sends seq 4 only once seq 3 was answered."""

        def __iter__(self):
            for line in lines:
                if line["seq"] == 4:
                    while 3 not in [json.loads(answer)["seq"] for answer in out.getvalue().splitlines()]:
                        threading.Event().wait(0.01)
                yield json.dumps(line) + "\n"

    serve(BuiltinAdapter(), Input(), out, concurrent=True)
    responses = [json.loads(line) for line in out.getvalue().splitlines()]
    assert "barrier" in responses[0]["result"]["features"] and "gates" in responses[0]["result"]["features"]
    answered = [response["seq"] for response in responses]
    assert answered.index(3) < answered.index(2)
    assert all(len(response["exec_ns"]) == 2 for response in responses[2:])


def test_a_gate_stops_the_chosen_try_until_opened():
    gates, order = Gates(), []

    def request():
        with gates.armed(GateSpec("g", 2, "entry")):
            for number in (1, 2, 3):
                gates.at("entry")
                order.append(number)
                gates.at("decision")

    caller = threading.Thread(target=request)
    caller.start()
    assert gates.reached("g") and order == [1]
    gates.open("g")
    caller.join(60)
    assert order == [1, 2, 3]
    with gates.armed(GateSpec("h", 5)):
        gates.at("entry")
    assert gates.reached("h") is False


# --- shrinking ------------------------------------------------------------------------------------------------


def test_a_failing_run_shrinks_to_the_calls_that_matter():
    """Emptied lists kept (KAFKA-2160) fails every run that watches a key and empties its list: a few calls stay."""
    system = adapter_class(BY_ID["kafka_2160_empty_lists_kept"])()
    hello = system.hello()
    plan = plan_run(random.Random(5), 3, 20)
    history = execute(system, hello, plan, timeout=60, trace_id="s")
    violations = tuple(check_history(history))
    assert violations
    small, shrunk, still = shrink(lambda candidate: execute(system, hello, candidate, timeout=60, trace_id="s"),
                                  plan, history, violations, budget_s=600)  # it ends once nothing smaller fails
    assert still and check_history(shrunk)
    # the calls and the drain, which also cancels a key on each of the other watcher shards
    others = len(strategies.shard_keys(hello.declarations.watcher_shards))
    assert small.size() <= 2 < plan.size() and len(shrunk.steps) <= 19 + others


# --- race schedules -------------------------------------------------------------------------------------------


#: the time a schedule gives a call to reach the lock a held call holds: generous, as a loaded machine may start a
#: thread late (a call that got there late would miss the race the schedule makes)
SETTLE_S = 0.5


def schedule_violations(system) -> dict[str, set[str]]:
    hello = system.hello()
    driver = driver_for(system, hello)
    try:
        return {schedule.name: {violation.property for violation in check_history(
            run_schedule(system, hello, driver, schedule, timeout=60, settle_s=SETTLE_S).history)}
            for schedule in SCHEDULES}
    finally:
        system.close()


def test_the_builtin_implementation_passes_every_race_schedule_in_process_and_through_stdio():
    assert schedule_violations(BuiltinAdapter()) == {schedule.name: set() for schedule in SCHEDULES}
    assert schedule_violations(SubprocessSystem(f"{STDIO} kpurgatory.conformance.adapters.builtin:factory")) == {
        schedule.name: set() for schedule in SCHEDULES}


@pytest.mark.parametrize("mutant, schedule, broken", [
    ("kafka_17848_try_completed", "locked_completion_during_walk", "justified"),
    ("unlocked_operation", "checks_race_for_an_op", "justified"),
    ("missing_second_try", "ready_between_watch_tries", "no_lost_wakeup"),
])
def test_a_schedule_shows_its_race_every_time(mutant, schedule, broken):
    assert broken in schedule_violations(adapter_class(BY_ID[mutant])())[schedule]


def test_a_schedule_shows_its_race_through_the_stdio_adapter():
    failed = schedule_violations(SubprocessSystem(f"{STDIO} kpurgatory.conformance.tools.mutants:unlocked_operation"))
    assert failed["checks_race_for_an_op"] == {"justified"}


# --- the race that only preemption shows ---------------------------------------------------------------------


def test_an_unlocked_find_or_create_loses_an_op_when_watches_of_a_new_key_race():
    """Rounds of four watches of one new key each: the mutant loses one of them from the key's list (a lost wakeup
    once it is made ready and the key checked); impl never does."""
    rounds = tuple(tuple((f"w{thread}", v.Watch(f"w{thread}.{number}", (f"k{number}",), 100, None))
                         for thread in range(4)) + ((CLOCK, v.Advance(0)),) for number in range(20))
    plan = Plan(PARAMS, rounds)

    def fails(system, runs: int) -> bool:
        """Whether one of up to ``runs`` runs fails (a loaded machine preempts less: the mutant may need many)."""
        hello = system.hello()
        return any(check_history(execute(system, hello, plan, timeout=60, trace_id=f"f{run}")) for run in range(runs))

    assert not fails(BuiltinAdapter(), 3)
    assert fails(adapter_class(BY_ID["unlocked_find_or_create"])(), 100)


# --- the races of older releases ----------------------------------------------------------------------------------

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import planted_releases  # noqa: E402

BY_NAME = {schedule.name: schedule for schedule in SCHEDULES}


def play(system, name: str, **options):
    hello = system.hello()
    return run_schedule(system, hello, driver_for(system, hello), BY_NAME[name], timeout=60, **options)


@pytest.mark.parametrize("system, completion", [
    (BuiltinAdapter, ("w1", v.Complete("a", "check"))),  # a blocking op lock (2.7 on): the check waits for it
    (planted_releases.PendingFlagEra, ("w0", v.Complete("a", "try"))),  # tryLock + pending flag (1.1 to 2.6)
    (planted_releases.TryLockEra, ("drain", v.Complete("a", "check"))),  # tryLock alone (1.0): only the drain
])
def test_the_held_second_try_completes_the_op_as_each_releases_locks_do(system, completion):
    history = play(system(), "ready_during_held_second_try", settle_s=SETTLE_S).history
    [completed] = [(step.timing.thread, event) for step in history.steps for event in step.observation.events
                   if event.op == "a"]
    assert completed == completion
    assert {violation.property for violation in check_history(history)} == (
        {"no_lost_wakeup"} if completion[0] == "drain" else set())


def test_a_race_of_the_declared_release_is_a_finding_and_of_current_kafka_a_failure():
    def check(system, **options):
        return run_concurrent_check(system, threads=2, runs=2, steps=10, seed=1, max_failures=5, **options)

    declared = check(planted_releases.TryLockEra)
    assert declared.passed and not declared.failures
    assert [finding.finding.name for finding in declared.findings] == ["trylock-lost-wakeup"]
    assert declared.findings[0].history.trace_id == "schedule-ready_during_held_second_try"
    current = check(planted_releases.TryLockUndeclared)
    assert not current.passed and {failure.signature.detail for failure in current.failures} == {"no_lost_wakeup"}
    stale = check(planted_releases.StaleTryEra)
    assert stale.passed and [finding.finding.name for finding in stale.findings] == ["stale-try"]
    assert not check(planted_releases.StaleTryEra, fail_on_findings=True).passed


def test_check_history_judges_a_history_by_the_release_its_header_declares(tmp_path):
    result = run_concurrent_check(planted_releases.TryLockEra, threads=2, runs=1, steps=5, seed=1, out_dir=tmp_path,
                                  max_failures=5)
    [path] = [report.path for report in result.findings]
    outcome = CliRunner().invoke(main, ["check-history", str(path)], env={"COLUMNS": "250"})
    assert outcome.exit_code == 0 and "Kafka findings (trylock-lost-wakeup)" in outcome.output
    undeclared = path.with_name("undeclared.jsonl")
    undeclared.write_text(path.read_text().replace(',"kafka_version":"1.0.2"', ""))
    assert "kafka_version" not in undeclared.read_text()
    assert CliRunner().invoke(main, ["check-history", str(undeclared)]).exit_code == 1


def test_a_call_that_waits_where_the_schedule_expects_none_opens_the_gates_and_the_run_goes_on():
    """One lock for every op: the new watch in cancel_key_during_check waits for the lock the held check holds.
    The schedule gives up holding it (long before the call's timeout, which would make it a hang), says so, and its
    history is checked like any other."""
    outcome = play(planted_releases.OneLockForAllOps(), "cancel_key_during_check", stall_s=0.3)
    assert outcome.deviation == "the call of w1 took over 0.3 s while gate w0.check held its call: opened early"
    assert check_history(outcome.history) == [] and outcome.history.steps[-1].command == v.Shutdown()
    result = run_concurrent_check(planted_releases.OneLockForAllOps, threads=2, runs=2, steps=10, seed=1)
    assert result.passed and result.schedules == len(SCHEDULES)
    assert [name for name, _ in result.schedule_notes] == ["cancel_key_during_check"]
