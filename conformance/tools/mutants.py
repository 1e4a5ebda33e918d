"""Seeded bugs in kpurgatory.impl: how much the conformance check finds, measured rather than assumed (issue 4).

Each mutant is one realistic bug of this field (an off-by-one in the wheel, a lost wakeup, a leak Kafka shipped:
kafka-semantics §4) written as ONE small subclass of ONE impl component that overrides one method. `MutantAdapter`
is the built-in adapter with impl assembled from its usual classes except that one; `Wheel` and `Timer` are the
assembly seams impl lacks (it names TimerTaskList, TimingWheel and DelayQueue directly where it builds them).

Any mutant is a system under test: ``--impl kpurgatory.conformance.tools.mutants:<id>`` (the module resolves every id to
its adapter class). ``kpurgatory mutants`` checks each one in every mode (`MODES`): at the exact and the contract
level, and concurrently (`kpurgatory.conformance.check.concurrent`, on the purgatory profile, over a timer mutant's
timer too), each to its first failure (time to it, shrunk counterexample written to ``--out``), and exits 1 if a
mutant survives them all. A mode that cannot observe a mutant's bug is ``blind`` to it, and the mutant says why: a
mutant marked ``race`` shows only when threads race, so only the concurrent check can kill it.
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
from kpurgatory.model.contract import KAFKA
from kpurgatory.conformance.cli import Unwritable
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
                                              shards=self.watcher_shards, on_error=on_error)


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
    #: (mode, why) for each mode of `MODES` that cannot observe the bug
    blind: tuple[tuple[str, str], ...] = ()
    #: the purgatory's watch lists, when the bug is about their layout (None: impl's own count)
    watcher_shards: int | None = None

    @component.validator
    def _one_kind(self, _attribute, component: type) -> None:
        kinds = [kind for kind in SLOTS if issubclass(component, kind)]
        if len(kinds) != 1:
            raise ValueError(f"{component.__name__} must subclass exactly one of {[k.__name__ for k in SLOTS]}")

    def blind_in(self, mode: str) -> str | None:
        """Why ``mode`` cannot observe the bug (None: it can)."""
        if self.race and mode != "threads":
            return "a race: no single thread's calls show it"
        return dict(self.blind).get(mode)


@functools.cache
def layout(mutant: Mutant) -> dict[str, int]:
    """The adapter attributes that give a mutant's purgatory the watch lists it is about."""
    return {} if mutant.watcher_shards is None else {"watcher_shards": mutant.watcher_shards}


def adapter_class(mutant: Mutant) -> type[MutantAdapter]:
    """The `MutantAdapter` with ``mutant.component`` in its slot: calling it makes a fresh system under test.

    On the compiled implementation the timer's buckets, wheels, queue and task links are C, which Python subclasses
    cannot reach: a timer mutant there is the same bug seeded in the C core (its ``faults`` bit of the same name),
    a purgatory mutant's class is put in front of the compiled purgatory (its overrides call into the C core through
    super(), and the core calls its overrides of the hooks), and an op's mutant subclasses the compiled op."""
    slot = next(SLOTS[kind] for kind in SLOTS if issubclass(mutant.component, kind))
    if SELECTED.name == "compiled":
        from kpurgatory.impl.compiled import FAULTS  # a timer mutant is the core's fault of the same id

        fault = FAULTS.get(mutant.id, 0) if mutant.profile == "timer" else 0
        timer = type("Timer", (SELECTED.SystemTimer,), {"faults": fault})
        purgatory = SELECTED.DelayedOperationPurgatory
        if slot == "purgatory_class":  # the mutant's methods over the compiled purgatory (super() reaches the C core)
            purgatory = (mutant.component if mutant.pure_python else
                         type(mutant.component.__name__, (mutant.component, purgatory), {}))
        chosen = {} if fault or slot == "purgatory_class" else {slot: mutant.component}
        return type(f"Mutant_{mutant.id}", (MutantAdapter,), {
            "mutant": mutant, "timer_class": timer, "purgatory_class": purgatory, **layout(mutant),
            **{name: chosen[name] for name in ("operation_class", "task_class") if name in chosen},
        })
    chosen = {slot: mutant.component}
    wheel = type("Wheel", (chosen.get("wheel_class", Wheel),),
                 {"__slots__": (), "bucket_class": chosen.get("bucket_class", TimerTaskList)})
    timer = type("Timer", (Timer,),
                 {"wheel_class": wheel, "queue_class": chosen.get("queue_class", DelayQueue)})
    return type(f"Mutant_{mutant.id}", (MutantAdapter,), {
        "mutant": mutant, "timer_class": timer, **layout(mutant),
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


class StartNotRounded(Wheel):
    """A wheel starts at its start time itself, not rounded down to its tick: with a tick above 1 and a start off
    the tick, the first wheel's window, and every overflow wheel's, begins mid-tick."""

    __slots__ = ()

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, queue: DelayQueue, counter) -> None:
        super().__init__(tick_ms, wheel_size, start_ms, queue, counter)
        self.current_time_ms = start_ms


class AdvanceRoundsUp(Wheel):
    """Advancing moves a wheel's clock to the time rounded up to its tick, not down: a level above the first runs
    ahead of the finer one, and its window with it."""

    __slots__ = ()

    def advance_clock(self, time_ms: int) -> None:
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = -(-time_ms // self.tick_ms) * self.tick_ms
            if self.overflow_wheel is not None:
                self.overflow_wheel.advance_clock(self.current_time_ms)


class BucketRoundsUp(Wheel):
    """An entry goes to the bucket of its deadline rounded up to its level's tick, not down: with a tick above 1, an
    entry due off the tick runs up to a tick after its deadline (a coarser level's entry cascades that much late)."""

    __slots__ = ()

    def add(self, entry) -> bool:
        expiration = entry.expiration_ms
        if entry.task.entry is not entry or expiration < self.current_time_ms + self.tick_ms:
            return super().add(entry)
        wheel = self
        while expiration >= wheel.current_time_ms + wheel.interval:
            wheel = wheel.overflow_wheel or wheel.add_overflow_wheel()
        virtual_id = -(-expiration // wheel.tick_ms)
        bucket = wheel.buckets[virtual_id % wheel.wheel_size]
        bucket.add(entry)
        if bucket.set_expiration(virtual_id * wheel.tick_ms):
            wheel.queue.offer(bucket)
        return True


class WindowEndInside(Wheel):
    """The window test is ``E <= c + interval`` instead of ``E < c + interval``: an entry due exactly one interval
    ahead stays on the level whose window it ends, in the bucket of the level's current slot (the one being emptied
    now, or about to be), instead of going up to the overflow wheel."""

    __slots__ = ()

    def add(self, entry) -> bool:
        expiration = entry.expiration_ms
        if entry.task.entry is entry and expiration >= self.current_time_ms + self.tick_ms:
            for wheel in self.levels():
                if expiration < wheel.current_time_ms + wheel.interval:
                    break  # inside a window: placed where impl places it
                if expiration == wheel.current_time_ms + wheel.interval:
                    virtual_id = expiration // wheel.tick_ms
                    bucket = wheel.buckets[virtual_id % wheel.wheel_size]
                    bucket.add(entry)
                    if bucket.set_expiration(virtual_id * wheel.tick_ms):
                        wheel.queue.offer(bucket)
                    return True
        return super().add(entry)


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


class CancelKeepsTimeout(DelayedOperationPurgatory):
    """cancelForKey removes the key's list but no longer cancels its ops' timer entries: a cancelled op still times
    out (and still counts as delayed)."""

    def cancel_for_key(self, key):
        shard = self._watcher_list(key)
        with shard.lock:
            return shard.watchers_by_key.pop(key, [])


class PurgeSkipsLastShard(DelayedOperationPurgatory):
    """The purge sweeps every watcher shard but the last: completed ops watched on a key of the last shard stay on
    its list until a check of that key. Run with Kafka's 512 shards, where a run's few keys rarely reach the last."""

    def purge_completed(self) -> int:
        purged = 0
        for shard in self._shards[:-1]:
            with shard.lock:
                for key, operations in list(shard.watchers_by_key.items()):
                    survivors = [op for op in operations if not op.completed]
                    purged += len(operations) - len(survivors)
                    operations[:] = survivors
                    self._remove_key_if_empty(shard, key, operations)
        return purged


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
    Mutant("kafka_17848_try_completed", "safeTryComplete does not skip a completed op (KAFKA-17848 reverted)",
           "KAFKA-17848: tryComplete after completion", "purgatory", TriesCompleted, race=True),
    Mutant("window_end_inside", "the window test is E <= c + interval instead of E < c + interval: an entry due "
                                "exactly one interval ahead stays on the level, in its current slot's bucket",
           "off-by-one: window end (interval)", "timer", WindowEndInside),
    Mutant("start_not_rounded", "a wheel starts at its start time, not rounded down to its tick",
           "clock rounding: start", "timer", StartNotRounded),
    Mutant("advance_rounds_up", "advancing rounds a wheel's clock up to its tick instead of down",
           "clock rounding: advance", "timer", AdvanceRoundsUp,
           blind=(("contract", "impl asks whether an entry is due at the first wheel only, whose clock moves to bucket "
                               "expirations, multiples of its tick: a coarser clock rounded up only widens its "
                               "wheel's window, so entries reach finer wheels sooner and still run on time; only the "
                               "wheel read-out shows it"),)),
    Mutant("bucket_rounds_up", "an entry goes to the bucket of its deadline rounded up to the tick, not down: an "
                               "entry due off the tick runs up to a tick late",
           "clock rounding: bucket", "timer", BucketRoundsUp),
    Mutant("cancel_key_keeps_timeout", "cancelForKey does not cancel its ops' timer entries: a cancelled op still "
                                       "times out",
           "cancelForKey: timer entry kept", "purgatory", CancelKeepsTimeout, pure_python=True),
    Mutant("purge_skips_last_shard", "the purge skips the last watcher shard: completed ops on its keys' lists stay "
                                     "until a check of the key",
           "purge: a shard never swept", "purgatory", PurgeSkipsLastShard, pure_python=True,
           watcher_shards=KAFKA.watcher_shards.count),
    Mutant("unlocked_operation", "an op without its lock: tryComplete runs in two threads at once",
           "race: no per-op lock", "purgatory", UnlockedOperation, race=True),
    Mutant("unlocked_find_or_create", "watchForOperation finds or creates a key's list without the shard lock",
           "race: watch list find-or-create unlocked", "purgatory", UnlockedFindOrCreate, race=True,
           pure_python=True),
)
BY_ID: dict[str, Mutant] = {mutant.id: mutant for mutant in MUTANTS}
#: the concurrent check of a mutant: worker threads and calls per thread of each run, and its shrinking's budget
CONCURRENT_THREADS, CONCURRENT_STEPS, CONCURRENT_SHRINK_S = 4, 40, 30.0


def __getattr__(name: str) -> type[MutantAdapter]:
    """``kpurgatory.conformance.tools.mutants:<id>``: the mutant's adapter class, a factory of systems under test."""
    if name in BY_ID:
        return adapter_class(BY_ID[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------------------------
# Running the suite against the mutants
# ---------------------------------------------------------------------------------------------------------------


#: the checks a mutant goes through: the sequential check at either level, and the concurrent check (``check
#: --threads``), which drives the purgatory profile (a timer mutant's timer under the purgatory's ops)
MODES = ("exact", "contract", "threads")


@attrs.frozen
class Outcome:
    """A mutant's checks, by mode (`MODES`)."""

    mutant: Mutant
    results: dict[str, CheckResult | ConcurrentResult] = attrs.Factory(dict)

    def caught(self, mode: str) -> bool:
        return mode in self.results and not self.results[mode].passed

    @property
    def killed(self) -> bool:
        return any(self.caught(mode) for mode in self.results)

    def first_failure_s(self, mode: str) -> float | None:
        """How long ``mode``'s check took to its first failure (the concurrent check: to the end of the check, which
        stops at its first failure, shrinking included)."""
        if not self.caught(mode):
            return None
        result = self.results[mode]
        return result.time_to_first_failure_s if isinstance(result, CheckResult) else result.elapsed_s

    def shrunk_length(self, mode: str) -> int | None:
        """Steps of ``mode``'s shrunk counterexample (the concurrent check: calls of its shrunk history)."""
        if not self.caught(mode):
            return None
        result = self.results[mode]
        if isinstance(result, CheckResult):
            return result.shrunk_length
        return None if result.history is None else len(result.history.steps)

    @property
    def time_to_first_failure_s(self) -> float | None:
        """The soonest any mode failed it."""
        return min((time for mode in self.results if (time := self.first_failure_s(mode)) is not None), default=None)


def check_mutant(mutant: Mutant, *, examples: int, seed: int, out_dir: Path | None,
                 modes: tuple[str, ...] = MODES) -> Outcome:
    """The checks of one mutant in ``modes``, each stopping at its first failure (runs of the check's default
    length); a sequential check's counterexample is written to ``out_dir/<id>.jsonl`` (exact) or
    ``<id>-contract.jsonl``, a failing concurrent history to ``out_dir/<id>-concurrent.jsonl``."""
    factory = adapter_class(mutant)
    results: dict[str, CheckResult | ConcurrentResult] = {}
    for mode in modes:
        if mode == "threads":
            results[mode] = concurrent_check(mutant, factory, examples=examples, seed=seed, out_dir=out_dir)
            continue
        result = run_check(factory, profile=mutant.profile, level=mode, examples=examples, seed=seed, max_failures=1)
        if result.counterexample is not None and out_dir is not None:
            header = attrs.evolve(result.counterexample.header, trace_id=f"mutant-{mutant.id}" + suffix(mode),
                                  description=f"mutant {mutant.id} ({mutant.description}): {result.failure_summary}")
            path = write_traces(out_dir / f"{mutant.id}{suffix(mode)}.jsonl",
                                attrs.evolve(result.counterexample, header=header))
            result = attrs.evolve(result, trace_path=path)
        results[mode] = result
    return Outcome(mutant, results)


def suffix(mode: str) -> str:
    """The file-name suffix of a mode's counterexample: none for the exact level's, as before there were modes."""
    return {"exact": "", "threads": "-concurrent"}.get(mode, f"-{mode}")


def concurrent_check(mutant: Mutant, factory, *, examples: int, seed: int, out_dir: Path | None) -> ConcurrentResult:
    result = run_concurrent_check(factory, threads=CONCURRENT_THREADS, runs=examples, steps=CONCURRENT_STEPS,
                                  seed=seed, shrink_budget_s=CONCURRENT_SHRINK_S)
    if not result.passed and out_dir is not None:
        history = attrs.evolve(result.history, header=attrs.evolve(
            result.history.header, trace_id=f"mutant-{mutant.id}-concurrent",
            description=f"mutant {mutant.id} ({mutant.description})"))
        path = write_traces(out_dir / f"{mutant.id}{suffix('threads')}.jsonl", history)
        result = attrs.evolve(result, history=history, history_path=path)
    return result


def verdict(outcome: Outcome, mode: str) -> str:
    """A mode's verdict: caught; blind (the mode cannot observe the bug: `Mutant.blind_in` says why); missed (it
    could, and did not, while another mode caught it); SURVIVED (no mode caught it); - (not run)."""
    if mode not in outcome.results:
        return "-"
    if outcome.caught(mode):
        return "[green]caught[/]"
    if outcome.mutant.blind_in(mode):
        return "[dim]blind[/]"
    return "[yellow]missed[/]" if outcome.killed else "[bold red]SURVIVED[/]"


def results_table(outcomes: list[Outcome], seed: int, examples: int, modes: tuple[str, ...]) -> Table:
    table = Table(title=f"mutants: seed {seed}, up to {examples} examples per check; per mode: verdict, time to "
                        f"first failure, shrunk length (steps; calls for threads)")
    for column in ("mutant", "profile", "bug class"):
        table.add_column(column)
    for mode in modes:
        table.add_column(mode)
        table.add_column("first", justify="right")
        table.add_column("shrunk", justify="right")
    for outcome in outcomes:
        cells = [outcome.mutant.id, outcome.mutant.profile, outcome.mutant.bug_class]
        for mode in modes:
            first, length = outcome.first_failure_s(mode), outcome.shrunk_length(mode)
            cells += [verdict(outcome, mode),
                      "" if first is None else f"{first:.2f} s", "" if length is None else str(length)]
        table.add_row(*cells)
    return table


def medians(outcomes: list[Outcome]) -> tuple[float | None, float | None]:
    """Median time to first failure over the mutants killed, and median shrunk length of the sequential
    counterexamples (a mutant's shortest)."""
    times = [outcome.time_to_first_failure_s for outcome in outcomes if outcome.killed]
    lengths = [min(lengths) for outcome in outcomes
               if (lengths := [length for mode in ("exact", "contract")
                               if (length := outcome.shrunk_length(mode)) is not None])]
    return (statistics.median(times) if times else None, statistics.median(lengths) if lengths else None)


def parse_modes(_context, _parameter, value: str) -> tuple[str, ...]:
    modes = tuple(mode.strip() for mode in value.split(",") if mode.strip())
    if not modes or set(modes) - set(MODES):
        raise click.BadParameter(f"a comma-separated list of {', '.join(MODES)}, got {value!r}")
    return tuple(mode for mode in MODES if mode in modes)


@click.command("mutants")
@click.option("--only", multiple=True, metavar="ID", help="Check only these mutants (repeatable).")
@click.option("--modes", default=",".join(MODES), show_default=True, callback=parse_modes,
              help="The checks to run each mutant through: exact and contract (the sequential check at that "
                   "level), threads (the concurrent check, --threads 4, on the purgatory profile).")
@click.option("--examples", type=click.IntRange(1), default=DEFAULT_EXAMPLES, show_default=True,
              help="Runs to generate per check at most (a killed mutant stops at its first failure).")
@click.option("--seed", type=click.IntRange(0), help="Seed of the generated runs [default: a fresh one, printed].")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("kpurgatory-mutants"),
              show_default=True, help="Where each mutant's counterexamples are written as <id>[-MODE].jsonl.")
@click.option("--list", "list_only", is_flag=True, help="List the mutants and exit.")
def mutants_command(only, modes, examples, seed, out, list_only):
    """Check the conformance suite's power: run `kpurgatory check` against seeded bugs in the built-in
    implementation, in every mode: at the exact and the contract level and with threads (--threads 4).

    Prints, per mutant and mode, whether the mode caught it (or is blind to it, and the mutant's description says
    why), how long the first failure took and how short the counterexample shrank, and the medians. Exits 1 if a
    mutant survives every mode."""
    unknown = sorted(set(only) - set(BY_ID))
    if unknown:
        raise click.BadParameter(f"unknown mutant ids: {', '.join(unknown)}", param_hint="--only")
    chosen = [mutant for mutant in MUTANTS if not only or mutant.id in only]
    if list_only:
        for mutant in chosen:
            blind = "; ".join(f"{mode}: blind, {mutant.blind_in(mode)}" for mode in MODES if mutant.blind_in(mode))
            click.echo("\t".join([mutant.id, mutant.profile, mutant.bug_class, mutant.description, blind]).rstrip())
        return
    seed = random.randrange(2**32) if seed is None else seed
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # said before any check runs
        raise Unwritable(out, error) from None
    console = command_console()
    outcomes = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("mutants", total=len(chosen))
        for mutant in chosen:
            progress.update(task, description=mutant.id)
            outcomes.append(check_mutant(mutant, examples=examples, seed=seed, out_dir=out, modes=modes))
            progress.advance(task)
    console.print(results_table(outcomes, seed, examples, modes))
    for outcome in outcomes:
        for mode in modes:
            if why := outcome.mutant.blind_in(mode):
                console.print(f"{outcome.mutant.id}: {mode} is blind to it: {why}", markup=False, highlight=False)
    median_time, median_length = medians(outcomes)
    killed = sum(outcome.killed for outcome in outcomes)
    by_mode = ", ".join(f"{mode} {sum(outcome.caught(mode) for outcome in outcomes)}" for mode in modes)
    console.print(f"killed {killed}/{len(outcomes)} ({by_mode}); median time to first failure "
                  f"{'-' if median_time is None else f'{median_time:.2f} s'}, median shrunk length "
                  f"{'-' if median_length is None else f'{median_length:g} steps'}")
    if any(outcome.caught(mode) for outcome in outcomes for mode in ("exact", "contract")):
        console.print(f"counterexamples in {out}/; reproduce one with: kpurgatory replay {out}/ID.jsonl "
                      f"--impl kpurgatory.conformance.tools.mutants:ID", markup=False, highlight=False)
    if any(outcome.caught("threads") for outcome in outcomes):
        console.print(f"failing histories in {out}/ID-concurrent.jsonl; check one with: kpurgatory check-history "
                      f"{out}/ID-concurrent.jsonl", markup=False, highlight=False)
    survivors = [outcome.mutant.id for outcome in outcomes if not outcome.killed]
    if survivors:
        console.print(f"[bold red]FAIL[/] survived every check: {', '.join(survivors)}")
    sys.exit(1 if survivors else 0)
