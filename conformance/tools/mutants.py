"""Seeded bugs in kpurgatory.impl: how much the conformance check finds, measured rather than assumed (issue 4).

Each mutant is one realistic bug of this field (an off-by-one in the wheel, a lost wakeup, a leak Kafka shipped:
kafka-semantics §4) written as ONE small subclass of ONE impl component that overrides one method. `MutantAdapter`
is the built-in adapter with impl assembled from its usual classes except that one; `Wheel` and `Timer` are the
assembly seams impl lacks (it names TimerTaskList, TimingWheel and DelayQueue directly where it builds them).

Any mutant is a system under test: ``--impl kpurgatory.conformance.tools.mutants:<id>`` (the module resolves every id to
its adapter class). ``kpurgatory mutants`` checks each one at the exact level (time to first failure, shrunk
counterexample written to ``--out``), at the contract level and, for the purgatory, concurrently
(`kpurgatory.conformance.check.concurrent`), and exits 1 if a mutant survives them all. A mutant marked ``race`` shows only
when threads race, so only the concurrent check can kill it.
"""

from __future__ import annotations

import functools
import random
import statistics
import sys
from pathlib import Path
from typing import ClassVar

import attrs
import click
from rich.progress import Progress
from rich.table import Table

from kpurgatory.conformance.adapters.builtin import AdapterOperation, AdapterTask, BuiltinAdapter
from kpurgatory.conformance.check.sequential import DEFAULT_EXAMPLES, CheckResult, run_check
from kpurgatory.conformance.check.concurrent import ConcurrentResult, run_concurrent_check
from kpurgatory.conformance.adapters.sut import Hello
from kpurgatory.conformance.traces.codec import write_traces
from kpurgatory.impl import SELECTED
from kpurgatory.impl.purgatory import DelayedOperationPurgatory, checked_keys
from kpurgatory.impl.timer import DelayQueue, SystemTimer, TimerTaskList, TimingWheel
from kpurgatory.model import vocabulary as v
from kpurgatory.conformance.terminal import command_console

# ---------------------------------------------------------------------------------------------------------------
# Assembling impl from replaceable components
# ---------------------------------------------------------------------------------------------------------------


class Wheel(TimingWheel):
    """impl's TimingWheel building its buckets from ``bucket_class`` and its overflow wheels as its own class, so a
    mutated bucket or wheel is used at every level."""

    __slots__ = ()
    bucket_class: ClassVar[type[TimerTaskList]] = TimerTaskList

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, queue: DelayQueue, counter) -> None:
        super().__init__(tick_ms, wheel_size, start_ms, queue, counter)
        self.buckets = [self.bucket_class(counter) for _ in range(wheel_size)]

    def add_overflow_wheel(self) -> TimingWheel:
        if self.overflow_wheel is None:
            self.overflow_wheel = type(self)(self.interval, self.wheel_size, self.current_time_ms, self.queue,
                                             self.counter)
        return self.overflow_wheel


class Timer(SystemTimer):
    """impl's SystemTimer with its delay queue and wheel rebuilt from ``queue_class`` and ``wheel_class`` (nothing
    is scheduled yet when they are replaced)."""

    wheel_class: ClassVar[type[Wheel]] = Wheel
    queue_class: ClassVar[type[DelayQueue]] = DelayQueue

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.queue = self.queue_class(self._lock)
        self.timing_wheel = self.wheel_class(self.tick_ms, self.wheel_size, self.timing_wheel.current_time_ms,
                                             self.queue, self.counter)


class MutantAdapter(BuiltinAdapter):
    """The built-in adapter over impl assembled from the classes its class attributes name; `adapter_class` makes
    one per mutant, with the mutant's class in its place."""

    mutant: ClassVar[Mutant]
    timer_class: ClassVar[type[Timer]] = Timer
    purgatory_class: ClassVar[type[DelayedOperationPurgatory]] = DelayedOperationPurgatory

    def hello(self) -> Hello:
        return attrs.evolve(super().hello(), implementation=f"kpurgatory.impl ({SELECTED.name}) with mutant "
                                                            f"{self.mutant.id}")

    def init(self, profile: str, params: v.Params) -> None:
        super().init(profile, params)  # validates the params and discards the previous run
        on_error = self.timer.on_error
        self.timer = self.timer_class.virtual(params.tick_ms, params.wheel_size, params.start_ms, on_error=on_error)
        self.purgatory = self.purgatory_class(purge_interval=params.purge_interval, timer=self.timer,
                                              on_error=on_error)


#: where a component of each kind goes: the Wheel, Timer or MutantAdapter attribute that names its class
SLOTS: dict[type, str] = {
    TimerTaskList: "bucket_class", Wheel: "wheel_class", DelayQueue: "queue_class",
    DelayedOperationPurgatory: "purgatory_class", AdapterOperation: "operation_class", AdapterTask: "task_class",
}


@attrs.frozen
class Mutant:
    """One seeded bug: ``component`` subclasses exactly one kind in `SLOTS` and overrides one of its methods."""

    id: str
    description: str
    bug_class: str
    profile: str = attrs.field(validator=attrs.validators.in_(v.PROFILES))
    component: type = attrs.field()
    #: the bug shows only when threads race: no sequential run tells it from impl, the concurrent check must
    race: bool = False
    #: the bug is in purgatory code the compiled core runs in C with no hook for a subclass: on the compiled impl,
    #: the mutant is the pure-Python purgatory (over the compiled timer and ops)
    pure_python: bool = False

    @component.validator
    def _one_kind(self, _attribute, component: type) -> None:
        kinds = [kind for kind in SLOTS if issubclass(component, kind)]
        if len(kinds) != 1:
            raise ValueError(f"{component.__name__} must subclass exactly one of {[k.__name__ for k in SLOTS]}")


@functools.cache
def adapter_class(mutant: Mutant) -> type[MutantAdapter]:
    """The `MutantAdapter` with ``mutant.component`` in its slot: calling it makes a fresh system under test.

    On the compiled implementation the timer's buckets, wheels, queue and task links are C, which Python subclasses
    cannot reach: a timer mutant there is the same bug seeded in the C core (its ``faults`` bit of the same name),
    a purgatory mutant's class is put in front of the compiled purgatory (its overrides call into the C core through
    super(), and the core calls its overrides of the hooks), and an op's mutant subclasses the compiled op."""
    slot = next(SLOTS[kind] for kind in SLOTS if issubclass(mutant.component, kind))
    if SELECTED.name == "compiled":
        from kpurgatory.impl.compiled import FAULTS  # every timer mutant has its fault, by the same id

        fault = FAULTS.get(mutant.id, 0) if mutant.profile == "timer" else 0
        timer = type("Timer", (SELECTED.SystemTimer,), {"faults": fault})
        purgatory = SELECTED.DelayedOperationPurgatory
        if slot == "purgatory_class":  # the mutant's methods over the compiled purgatory (super() reaches the C core)
            purgatory = (mutant.component if mutant.pure_python else
                         type(mutant.component.__name__, (mutant.component, purgatory), {}))
        chosen = {} if fault or slot == "purgatory_class" else {slot: mutant.component}
        return type(f"Mutant_{mutant.id}", (MutantAdapter,), {
            "mutant": mutant, "timer_class": timer, "purgatory_class": purgatory,
            **{name: chosen[name] for name in ("operation_class", "task_class") if name in chosen},
        })
    chosen = {slot: mutant.component}
    wheel = type("Wheel", (chosen.get("wheel_class", Wheel),),
                 {"__slots__": (), "bucket_class": chosen.get("bucket_class", TimerTaskList)})
    timer = type("Timer", (Timer,),
                 {"wheel_class": wheel, "queue_class": chosen.get("queue_class", DelayQueue)})
    return type(f"Mutant_{mutant.id}", (MutantAdapter,), {
        "mutant": mutant, "timer_class": timer,
        **{name: chosen[name] for name in ("purgatory_class", "operation_class", "task_class") if name in chosen},
    })


# ---------------------------------------------------------------------------------------------------------------
# The bugs. Each docstring says what goes wrong; MUTANTS below says which bug class it stands for.
# ---------------------------------------------------------------------------------------------------------------


class ShiftedSlots(list):
    """A bucket array indexed one slot off: ``buckets[i]`` is bucket i + 1."""

    def __getitem__(self, index):
        return super().__getitem__((index + 1) % len(self))


class BucketOffByOne(Wheel):
    """Entries go to the bucket after the one their virtual id names."""

    __slots__ = ()

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.buckets = ShiftedSlots(self.buckets)


class ExpiredAtNextTick(Wheel):
    """The already-expired test is ``E <= c + tick`` instead of ``E < c + tick``: an entry due at the start of the
    next tick runs on add, up to a tick early."""

    __slots__ = ()

    def add(self, entry) -> bool:
        return False if entry.expiration_ms == self.current_time_ms + self.tick_ms else super().add(entry)


class OverflowStartsAhead(Wheel):
    """The overflow wheel starts where this wheel's window ends (c + interval) instead of at its current time c,
    so entries in its first tick count as already expired."""

    __slots__ = ()

    def add_overflow_wheel(self) -> TimingWheel:
        if self.overflow_wheel is None:
            super().add_overflow_wheel().current_time_ms += self.interval
        return self.overflow_wheel


class FlushHeadOnly(TimerTaskList):
    """flush empties the bucket but hands back only its head: the other entries are neither run nor re-inserted."""

    __slots__ = ()

    def flush(self):
        return super().flush()[:1]


class RequeuedOnEveryAdd(TimerTaskList):
    """set_expiration always reports a change, so a bucket is queued once per entry instead of once per round."""

    __slots__ = ()

    def set_expiration(self, expiration_ms: int) -> bool:
        super().set_expiration(expiration_ms)
        return True


class QueuedOnlyWhenNew(TimerTaskList):
    """set_expiration reports a change only for a bucket never used before: reused in a later round, it is never
    queued again and its entries never fire."""

    used = False

    def set_expiration(self, expiration_ms: int) -> bool:
        changed = super().set_expiration(expiration_ms) and not self.used
        self.used = True
        return changed


class LateQueue(DelayQueue):
    """The reaper releases a bucket 1 ms after its expiration (a tick late at tick_ms = 1)."""

    __slots__ = ()

    def poll_due(self, now_ms: int):
        return super().poll_due(now_ms - 1)


class MicrosecondQueue(DelayQueue):
    """KAFKA-938's class: the queue reads the clock in the wrong unit (µs for ms), so buckets fall due early."""

    __slots__ = ()

    def poll_due(self, now_ms: int):
        return super().poll_due(now_ms * 1000)


class CancelKeepsEntry(AdapterTask):
    """cancel forgets the task's entry but leaves it linked in its bucket, where it is still counted."""

    __slots__ = ()

    def cancel(self) -> None:
        self.entry = None


class NoSecondTry(AdapterOperation):
    """tryCompleteElseWatch watches the keys after a failed try but never tries again: a condition that became true
    in between is lost until a check or the timeout."""

    __slots__ = ()

    def safe_try_complete_or_else(self, action) -> bool:
        with self.lock:
            if self.try_complete():
                return True
            action()
            return False


class NoCompareAndSet(AdapterOperation):
    """forceComplete without the compare-and-set: every caller completes the op and runs onComplete again."""

    __slots__ = ()

    def force_complete(self) -> bool:
        self.completed = False
        return super().force_complete()


class TriesCompleted(AdapterOperation):
    """KAFKA-17848: safeTryComplete calls tryComplete on an op that is already completed."""

    __slots__ = ()

    def safe_try_complete(self) -> bool:
        with self.lock:
            return self.try_complete()


class NoLock:
    """A lock that keeps nobody out."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return True

    def release(self) -> None:
        pass

    def __enter__(self) -> bool:
        return True

    def __exit__(self, *exc_info: object) -> None:
        pass


class UnlockedOperation(AdapterOperation):
    """The op has no lock: safeTryComplete, tryCompleteElseWatch's tries and a check's tries of one op run at once,
    and a check that found the op pending calls tryComplete after another thread completed it under the lock it
    should have waited for."""

    __slots__ = ()

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.lock = NoLock()


class UnlockedFindOrCreate(DelayedOperationPurgatory):
    """watchForOperation without the shard lock: two watches of a key without a list each create one and the
    second replaces the first, or a check removes the list a watch found before the watch appends to it; either
    way an op is on no list of that key, and a check of the key never completes it."""

    def _watch_for_operation(self, key, op) -> None:
        shard = self._watcher_list(key)
        operations = shard.watchers_by_key.get(key)
        if operations is None:
            shard.watchers_by_key[key] = [op]
        else:
            operations.append(op)


class UncountedWatch(DelayedOperationPurgatory):
    """A watch leaves the estimate of operations unchanged, so the purge never falls due."""

    def try_complete_else_watch(self, op, keys) -> bool:
        estimate = self.estimated_total_operations
        try:
            return super().try_complete_else_watch(op, keys)
        finally:
            self.estimated_total_operations = estimate


class EstimateNeverReset(DelayedOperationPurgatory):
    """A purge does not reset the estimate, so once due it runs after every advance."""

    def advance_clock(self, timeout_ms: float = 0):
        estimate = self.estimated_total_operations
        try:
            return super().advance_clock(timeout_ms)
        finally:
            self.estimated_total_operations = estimate


class PurgeAtInterval(DelayedOperationPurgatory):
    """The purge test is ``estimate - delayed >= purge_interval`` instead of ``>``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.purge_interval -= 1


class EmptyListsKept(DelayedOperationPurgatory):
    """KAFKA-2160: a watch list emptied by a check or a purge stays in the map under its key."""

    @staticmethod
    def _remove_key_if_empty(shard, key, operations) -> None:
        """Never removes anything."""


class CancelCompletes(DelayedOperationPurgatory):
    """cancelForKey completes the ops it removes instead of only cancelling their timeouts."""

    def cancel_for_key(self, key):
        cancelled = super().cancel_for_key(key)
        for op in cancelled:
            op.force_complete()
        return cancelled


class RewatchKeepsDeadline(DelayedOperationPurgatory):
    """Watching an op that is still in the timer keeps its first deadline instead of restarting it."""

    def _add_to_timer(self, op) -> None:
        if not op.scheduled:
            super()._add_to_timer(op)


class DelayedCountsEstimate(DelayedOperationPurgatory):
    """KAFKA-1616's class: numDelayed reports the estimate of watched operations, completed ones included, instead
    of the timer's size."""

    def num_delayed(self) -> int:
        return self.estimated_total_operations


class NeverPurges(DelayedOperationPurgatory):
    """KAFKA-664: the reaper only advances the timer; completed ops stay in the watch lists until a check of each
    of their keys."""

    def advance_clock(self, timeout_ms: float = 0) -> None:
        self.timer.advance_clock(timeout_ms)


class TryPerKey(DelayedOperationPurgatory):
    """KAFKA-1952: one tryComplete per key, as before the fix, instead of one before and one after watching them
    all: an op that becomes completable within those tries completes without being watched."""

    def try_complete_else_watch(self, op, keys) -> bool:
        for _ in checked_keys(keys)[1:]:
            if op.safe_try_complete():
                return True
        return super().try_complete_else_watch(op, keys)


class WatchedWhenCompleted(AdapterOperation):
    """KAFKA-18027: the watch loop's completed check is blind, so an op that is already completed still joins the
    lists of the keys it is watched on."""

    __slots__ = ()

    def safe_try_complete_or_else(self, action) -> bool:
        def watch_as_if_pending() -> None:
            completed, self.completed = self.completed, False
            action()
            self.completed = completed

        return super().safe_try_complete_or_else(watch_as_if_pending)


MUTANTS: tuple[Mutant, ...] = (
    Mutant("bucket_off_by_one", "bucket index off by one: entries go to the next slot's bucket",
           "off-by-one: bucket index", "timer", BucketOffByOne),
    Mutant("expired_on_add_off_by_one", "already-expired test E <= c + tick instead of E < c + tick",
           "off-by-one: expired-on-add test", "timer", ExpiredAtNextTick),
    Mutant("overflow_wrong_start", "overflow wheel starts at c + interval instead of the current time c",
           "wrong start time: overflow wheel", "timer", OverflowStartsAhead),
    Mutant("flush_drops_entries", "flush hands back only the head: other entries are not re-inserted",
           "lost entries: flush / cascade", "timer", FlushHeadOnly),
    Mutant("requeued_on_every_add", "setExpiration always reports a change: a bucket is queued per entry",
           "setExpiration: double queuing", "timer", RequeuedOnEveryAdd),
    Mutant("requeued_only_when_new", "setExpiration reports a change only for a new bucket: reused, never queued",
           "setExpiration: bucket never re-queued", "timer", QueuedOnlyWhenNew),
    Mutant("cancel_leaves_entry", "cancel forgets the entry but leaves it in its bucket",
           "cancel: stale entry", "timer", CancelKeepsEntry),
    Mutant("late_by_one_ms", "buckets released 1 ms after their expiration (a tick at tick_ms 1)",
           "lateness", "timer", LateQueue),
    Mutant("kafka_938_time_unit", "the delay queue reads the clock in µs instead of ms: buckets fall due early",
           "KAFKA-938: wrong time unit", "timer", MicrosecondQueue),
    Mutant("missing_second_try", "tryCompleteElseWatch does not try again after watching",
           "lost wakeup", "purgatory", NoSecondTry),
    Mutant("double_completion", "forceComplete without the compare-and-set",
           "double completion", "purgatory", NoCompareAndSet),
    Mutant("estimate_not_incremented", "a watch does not increment the estimate of operations",
           "purge trigger: counter not incremented", "purgatory", UncountedWatch),
    Mutant("estimate_not_reset", "a purge does not reset the estimate of operations",
           "purge trigger: counter not reset", "purgatory", EstimateNeverReset),
    Mutant("purge_at_interval", "purge when estimate - delayed >= purge_interval instead of >",
           "off-by-one: purge test", "purgatory", PurgeAtInterval),
    Mutant("cancel_key_completes", "cancelForKey completes the ops it removes",
           "cancelForKey completes ops", "purgatory", CancelCompletes),
    Mutant("rewatch_keeps_deadline", "re-watching an op in the timer keeps its first deadline",
           "re-watch: stale deadline", "purgatory", RewatchKeepsDeadline),
    Mutant("kafka_1616_num_delayed", "numDelayed reports the estimate of operations instead of the timer size",
           "KAFKA-1616: gauge accounting", "purgatory", DelayedCountsEstimate),
    Mutant("kafka_664_no_purge", "the reaper never purges the watch lists",
           "KAFKA-664: no purge (leak)", "purgatory", NeverPurges),
    Mutant("kafka_1952_try_per_key", "one tryComplete per key instead of one before and one after watching",
           "KAFKA-1952: tryComplete per key", "purgatory", TryPerKey),
    Mutant("kafka_18027_completed_watched", "a completed op re-watched still joins the keys' lists",
           "KAFKA-18027: completed op watched", "purgatory", WatchedWhenCompleted),
    Mutant("kafka_2160_empty_lists_kept", "emptied watch lists are never removed from the map",
           "KAFKA-2160: empty lists kept (leak)", "purgatory", EmptyListsKept),
    Mutant("kafka_17848_try_completed", "safeTryComplete does not skip a completed op",
           "KAFKA-17848: tryComplete after completion", "purgatory", TriesCompleted, race=True),
    Mutant("unlocked_operation", "an op without its lock: tryComplete runs in two threads at once",
           "race: no per-op lock", "purgatory", UnlockedOperation, race=True),
    Mutant("unlocked_find_or_create", "watchForOperation finds or creates a key's list without the shard lock",
           "race: watch list find-or-create unlocked", "purgatory", UnlockedFindOrCreate, race=True,
           pure_python=True),
)
BY_ID: dict[str, Mutant] = {mutant.id: mutant for mutant in MUTANTS}
#: the concurrent check of a purgatory mutant: worker threads and calls per thread of each run
CONCURRENT_THREADS, CONCURRENT_STEPS = 4, 40


def __getattr__(name: str) -> type[MutantAdapter]:
    """``kpurgatory.conformance.tools.mutants:<id>``: the mutant's adapter class, a factory of systems under test."""
    if name in BY_ID:
        return adapter_class(BY_ID[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------------------------
# Running the suite against the mutants
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Outcome:
    """A mutant's checks: ``exact`` (whose counterexample is kept), ``contract`` and, for the purgatory,
    ``concurrent`` (whose failing history is kept)."""

    mutant: Mutant
    exact: CheckResult
    contract: CheckResult
    concurrent: ConcurrentResult | None

    @property
    def killed(self) -> bool:
        return not self.exact.passed or (self.concurrent is not None and not self.concurrent.passed)

    @property
    def time_to_first_failure_s(self) -> float | None:
        if not self.exact.passed:
            return self.exact.time_to_first_failure_s
        return None if self.concurrent is None or self.concurrent.passed else self.concurrent.elapsed_s


def check_mutant(mutant: Mutant, *, examples: int, seed: int, out_dir: Path | None) -> Outcome:
    """The checks of one mutant (runs of the check's default length); the exact level's counterexample is written
    to ``out_dir/<id>.jsonl``, a failing concurrent history to ``out_dir/<id>-concurrent.jsonl``."""
    results = {level: run_check(adapter_class(mutant), profile=mutant.profile, level=level, examples=examples,
                                seed=seed)
               for level in ("exact", "contract")}
    exact = results["exact"]
    if exact.counterexample is not None and out_dir is not None:
        header = attrs.evolve(exact.counterexample.header, trace_id=f"mutant-{mutant.id}",
                              description=f"mutant {mutant.id} ({mutant.description}): {exact.failure_summary}")
        path = write_traces(out_dir / f"{mutant.id}.jsonl", attrs.evolve(exact.counterexample, header=header))
        exact = attrs.evolve(exact, trace_path=path)
    concurrent = None
    if mutant.profile == "purgatory":
        concurrent = run_concurrent_check(adapter_class(mutant), threads=CONCURRENT_THREADS, runs=examples,
                                          steps=CONCURRENT_STEPS, seed=seed)
        if not concurrent.passed and out_dir is not None:
            history = attrs.evolve(concurrent.history, header=attrs.evolve(
                concurrent.history.header, trace_id=f"mutant-{mutant.id}-concurrent",
                description=f"mutant {mutant.id} ({mutant.description})"))
            path = write_traces(out_dir / f"{mutant.id}-concurrent.jsonl", history)
            concurrent = attrs.evolve(concurrent, history=history, history_path=path)
    return Outcome(mutant, exact, results["contract"], concurrent)


def verdict(result: CheckResult | ConcurrentResult | None, outcome: Outcome) -> str:
    """Surviving one check is no failure as long as another kills the mutant: the contract level does not ask for
    Kafka's wheel layout or purge schedule, the concurrent check cannot see what no race changes, and a race is
    invisible to the sequential checks."""
    if result is None:
        return "-"
    if not result.passed:
        return "[green]killed[/]"
    return "survived" if outcome.killed else "[bold red]SURVIVED[/]"


def results_table(outcomes: list[Outcome], seed: int, examples: int) -> Table:
    table = Table(title=f"mutants: seed {seed}, up to {examples} examples per check")
    for column in ("mutant", "profile", "bug class", "exact", "first failure", "shrunk (steps)", "contract",
                   "concurrent"):
        table.add_column(column, justify="right" if column in ("first failure", "shrunk (steps)") else "left")
    for outcome in outcomes:
        exact, first_failure = outcome.exact, outcome.time_to_first_failure_s
        table.add_row(outcome.mutant.id, outcome.mutant.profile, outcome.mutant.bug_class,
                      verdict(exact, outcome), "" if first_failure is None else f"{first_failure:.2f} s",
                      "" if exact.shrunk_length is None else str(exact.shrunk_length),
                      verdict(outcome.contract, outcome), verdict(outcome.concurrent, outcome))
    return table


def medians(outcomes: list[Outcome]) -> tuple[float | None, float | None]:
    """Median time to first failure over the mutants killed, and median shrunk length over those the exact level
    killed (a concurrent history is not shrunk)."""
    times = [outcome.time_to_first_failure_s for outcome in outcomes if outcome.killed]
    lengths = [outcome.exact.shrunk_length for outcome in outcomes if outcome.exact.shrunk_length is not None]
    return (statistics.median(times) if times else None, statistics.median(lengths) if lengths else None)


@click.command("mutants")
@click.option("--only", multiple=True, metavar="ID", help="Check only these mutants (repeatable).")
@click.option("--examples", type=click.IntRange(1), default=DEFAULT_EXAMPLES, show_default=True,
              help="Runs to generate per check at most (a killed mutant stops at its first failure).")
@click.option("--seed", type=click.IntRange(0), help="Seed of the generated runs [default: a fresh one, printed].")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("kpurgatory-mutants"),
              show_default=True, help="Where each mutant's counterexample is written as <id>.jsonl.")
@click.option("--list", "list_only", is_flag=True, help="List the mutants and exit.")
def mutants_command(only, examples, seed, out, list_only):
    """Check the conformance suite's power: run `kpurgatory check` against seeded bugs in the built-in
    implementation, at the exact and the contract level and, for the purgatory, with threads (--threads 4).

    Prints whether each mutant was killed, how long the first failure took and how short the counterexample
    shrank, and the medians of both. Exits 1 if a mutant survives every check."""
    unknown = sorted(set(only) - set(BY_ID))
    if unknown:
        raise click.BadParameter(f"unknown mutant ids: {', '.join(unknown)}", param_hint="--only")
    chosen = [mutant for mutant in MUTANTS if not only or mutant.id in only]
    if list_only:
        for mutant in chosen:
            click.echo(f"{mutant.id}\t{mutant.profile}\t{mutant.bug_class}\t{mutant.description}")
        return
    seed = random.randrange(2**32) if seed is None else seed
    console = command_console()
    outcomes = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("mutants", total=len(chosen))
        for mutant in chosen:
            progress.update(task, description=mutant.id)
            outcomes.append(check_mutant(mutant, examples=examples, seed=seed, out_dir=out))
            progress.advance(task)
    console.print(results_table(outcomes, seed, examples))
    median_time, median_length = medians(outcomes)
    killed = sum(outcome.killed for outcome in outcomes)
    by_level = {level: sum(not getattr(outcome, level).passed for outcome in outcomes
                           if getattr(outcome, level) is not None) for level in ("exact", "contract", "concurrent")}
    console.print(f"killed {killed}/{len(outcomes)} (exact level {by_level['exact']}, contract level "
                  f"{by_level['contract']}, concurrent {by_level['concurrent']}); median time to first failure "
                  f"{'-' if median_time is None else f'{median_time:.2f} s'}, median shrunk length "
                  f"{'-' if median_length is None else f'{median_length:g} steps'}")
    if any(outcome.exact.trace_path for outcome in outcomes):
        console.print(f"counterexamples in {out}/; reproduce one with: kpurgatory replay {out}/ID.jsonl "
                      f"--impl kpurgatory.conformance.tools.mutants:ID", markup=False, highlight=False)
    if any(outcome.concurrent and outcome.concurrent.history_path for outcome in outcomes):
        console.print(f"failing histories in {out}/ID-concurrent.jsonl; check one with: kpurgatory check-history "
                      f"{out}/ID-concurrent.jsonl", markup=False, highlight=False)
    survivors = [outcome.mutant.id for outcome in outcomes if not outcome.killed]
    if survivors:
        console.print(f"[bold red]FAIL[/] survived every check: {', '.join(survivors)}")
    sys.exit(1 if survivors else 0)
