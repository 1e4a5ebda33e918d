"""The controlled scheduler: one thread at a time, switches only at points, the same seed or schedule gives the same
history, failures are found, shrunk to few switches and replayed."""

from __future__ import annotations

import json
import random
import re
import sys
import threading
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.adapters import BUILTIN, BUILTIN_PYTHON
from kpurgatory.conformance.adapters.builtin import PYTHON, BuiltinAdapter, PythonAdapter, PythonOperation
from kpurgatory.conformance.check import concurrent
from kpurgatory.conformance.check.scheduler import Deadlock, Replay, Scheduler, Scheduling, carried
from kpurgatory.conformance.cli import main
from kpurgatory.conformance.tools import mutants
from kpurgatory.conformance.tools.mutants import UnlockedFindOrCreate
from kpurgatory.conformance.traces.codec import Schedule, dumps, read_traces, write_traces


def plan(seed: int, threads: int = 4, rounds: int = 15) -> concurrent.Plan:
    system = PythonAdapter()
    hello = system.hello()
    return concurrent.plan_run(random.Random(seed), threads, rounds, hello.unsupported,
                               hello.declarations.watcher_shards)


def run(scheduler: Scheduler, plan_: concurrent.Plan, system=None):
    system = system or PythonAdapter()
    return concurrent.execute(system, system.hello(), plan_, timeout=10, trace_id="t", scheduler=scheduler)


def without_times(history) -> str:
    return re.sub(r',"exec_ns":\[\d+,\d+\]', "", dumps(history))


@pytest.mark.parametrize("system", [PythonAdapter, BuiltinAdapter], ids=["python", "selected"])
@pytest.mark.parametrize("scheduling", [Scheduling("pct"), Scheduling("random"), Scheduling("random", bound=5),
                                        Scheduling("random", granularity="calls")], ids=str)
def test_the_same_seed_gives_the_same_history_and_its_schedule_replays_it(scheduling, system):
    plan_ = plan(1)
    first = run(scheduling.scheduler(7), plan_, system())
    assert without_times(run(scheduling.scheduler(7), plan_, system())) == without_times(first)
    assert first.header.schedule.switches, "a run of 5 threads with no switch from the default order"
    if scheduling.bound is not None:
        assert len(first.header.schedule.switches) <= scheduling.bound
    again, differs = concurrent.replay_history(system(), system().hello(), first, timeout=10)
    assert differs is None and without_times(again) == without_times(first)
    assert concurrent.scheduled_plan(first) == plan_


def test_seeds_give_different_interleavings():
    plan_ = plan(2)
    digests = set()
    for seed in range(8):
        scheduler = Scheduling("pct").scheduler(seed)
        run(scheduler, plan_)
        digests.add(scheduler.interleaving)
    assert len(digests) == 8


def test_a_schedule_survives_the_trace_file(tmp_path):
    history = run(Scheduling("random").scheduler(3), plan(3))
    [read] = read_traces(write_traces(tmp_path / "h.jsonl", history))
    assert read.header.schedule == history.header.schedule
    assert read.header.schedule.rounds and read.header.schedule.granularity == "sync"


def test_one_thread_runs_at_a_time_and_locks_exclude():
    scheduler = Scheduling("random").scheduler(11)
    guard = scheduler.primitives.lock("shared")
    inside, most, order = [0], [0], []

    def body(name: str):
        def go():
            for _ in range(5):
                with guard:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                    scheduler.point("probe", name)  # a switch inside the critical section
                    inside[0] -= 1
                order.append(name)
        return go

    scheduler.run([(name, body(name)) for name in "abc"])
    assert most[0] == 1 and sorted(order) == sorted("abc" * 5)
    assert order != sorted(order), "the random walk never interleaved the threads"


def test_a_deadlock_is_raised_in_the_threads_that_wait():
    def deadlocking(scheduler: Scheduler) -> list[str]:
        first, second = scheduler.primitives.lock("first"), scheduler.primitives.lock("second")
        raised = []

        def taking(one, other, name):
            def go():
                try:
                    with one:
                        with other:
                            pass
                except Deadlock:
                    raised.append(name)
            return go

        scheduler.run([("a", taking(first, second, "a")), ("b", taking(second, first, "b"))])
        return raised

    assert deadlocking(Scheduler(Replay(Schedule("replay", 0, ())), 0)) == []  # a runs alone to its end first
    # b goes on when a, holding the first lock, reaches the second
    assert deadlocking(Scheduler(Replay(Schedule("replay", 0, ((0, 3, 1),))), 0)) in (["a", "b"], ["b", "a"])


def test_a_schedule_carries_over_to_a_smaller_plan():
    rounds = [(("w0", 1), ("w1", 2)), (("w0", 3), ("w1", 4), ("clock", 5))]
    schedule = Schedule("pct", 1, ((0, 3, 1), (1, 2, 2), (1, 4, 1)))
    smaller = [(("w0", 3), ("clock", 5))]  # round 0 dropped, w1's call of round 1 dropped
    assert carried(schedule, rounds, smaller).switches == ((0, 2, 1),)


class TriesCompleted(PythonOperation):
    """KAFKA-17848 reverted: a check's try does not skip a completed op."""

    __slots__ = ()

    def safe_try_complete(self) -> bool:
        with self.lock:
            return self.try_complete()


class StaleTries(PythonAdapter):
    operation_class = TriesCompleted


class SelectedStaleTries(BuiltinAdapter):
    """The same bug on the implementation kpurgatory.impl selects (the compiled core, unless told otherwise), whose
    op locks the scheduler takes over through the core's hook."""

    operation_class = mutants.TriesCompleted


class UnlockedLists(PythonAdapter):
    implementation = SimpleNamespace(**{**vars(PYTHON), "DelayedOperationPurgatory": UnlockedFindOrCreate})


@pytest.mark.parametrize("system, scheduling, runs", [
    (StaleTries, Scheduling("random"), 50),
    (SelectedStaleTries, Scheduling("random"), 50),
    (UnlockedLists, Scheduling("random", granularity="calls"), 30),
], ids=["kafka_17848_reverted-random", "kafka_17848_reverted-selected-impl-random",
        "unlocked_find_or_create-random-calls"])
def test_a_race_is_found_shrunk_to_few_switches_and_replayed(system, scheduling, runs, tmp_path):
    result = concurrent.run_concurrent_check(system, threads=4, runs=runs, steps=20, seed=0, out_dir=tmp_path,
                                             scheduling=scheduling, shrink_budget_s=60)
    assert not result.passed and result.failures
    history = result.failures[0].history
    assert len(history.header.schedule.switches) <= 40
    again, differs = concurrent.replay_history(system(), system().hello(), history, timeout=10)
    assert differs is None and tuple(concurrent.check_history(again)) == result.failures[0].violations
    correct = BuiltinAdapter if system is SelectedStaleTries else PythonAdapter
    fixed, _ = concurrent.replay_history(correct(), correct().hello(), history, timeout=10)
    assert not tuple(concurrent.check_history(fixed))


@pytest.mark.parametrize("scheduling", [Scheduling("pct"), Scheduling("random", granularity="calls")], ids=str)
def test_the_implementation_passes_under_the_scheduler(scheduling):
    result = concurrent.run_concurrent_check(PythonAdapter, threads=4, runs=15, steps=30, seed=5,
                                             scheduling=scheduling)
    assert result.passed, result.violations
    assert result.interleavings.distinct == 15 and len(result.interleavings.reached) >= 10


def test_the_cli_replays_a_schedule_and_refuses_what_it_cannot_schedule(tmp_path):
    runner = CliRunner()
    refused = runner.invoke(main, ["check", "--scheduler", "pct"])
    assert refused.exit_code == 2 and "--threads" in refused.output
    stdio = f"{sys.executable} -m kpurgatory.conformance.adapters.stdio kpurgatory.conformance.adapters.builtin:factory"
    refused = runner.invoke(main, ["check", "--threads", "2", "--scheduler", "pct", "--adapter", stdio])
    assert refused.exit_code == 2 and "'scheduler' feature" in refused.output
    history = write_traces(tmp_path / "h.jsonl", run(Scheduling("pct").scheduler(4), plan(4)))
    replayed = runner.invoke(main, ["replay", str(history)])
    assert replayed.exit_code == 0, replayed.output
    assert "the same history, call for call" in replayed.output and "pass" in replayed.output
    # a history another system recorded is not replayed on a built-in one unless asked to
    [header, *steps] = history.read_text().splitlines()
    header = json.loads(header)
    recorder, header["header"]["implementation"] = header["header"]["implementation"], "my purgatory 0.3"
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text("\n".join([json.dumps(header), *steps]) + "\n")
    refused = runner.invoke(main, ["replay", str(foreign)])
    assert refused.exit_code == 2 and "recorded by my purgatory 0.3" in refused.output, refused.output
    impl = BUILTIN_PYTHON if recorder == PythonAdapter().hello().implementation else BUILTIN
    assert runner.invoke(main, ["replay", str(foreign), "--impl", impl]).exit_code == 0


def test_threads_outside_the_scheduler_use_its_locks_as_plain_locks():
    scheduler = Scheduling("pct").scheduler(0)
    lock = scheduler.primitives.reentrant_lock("op")
    with lock, lock:
        assert lock.locked()
    assert not lock.locked()
    outside = threading.Thread(target=lambda: lock.acquire() and lock.release())
    outside.start()
    outside.join(5)
    assert not outside.is_alive()


def test_the_view_names_each_switch_and_marks_the_call_it_let_go_on():
    from kpurgatory.conformance.traces.view import SWITCHED, concurrent_view

    history = run(Scheduling("random", bound=3).scheduler(5), plan(5))
    page = concurrent_view(history)
    switches = history.header.schedule.switches
    assert page["schedule"]["strategy"] == "random" and len(page["schedule"]["switches"]) == len(switches) > 0
    marked = [seq for seq, flags in enumerate(page["calls"]["flags"], 1) if flags & SWITCHED]
    named = {history.header.schedule.rounds[round_][thread] for round_, _, thread in switches
             if round_ < len(history.header.schedule.rounds)}
    assert set(marked) == named
    assert all(f"call {seq} (" in " ".join(page["schedule"]["switches"]) for seq in named)
