"""The hierarchical timing wheel: Kafka's SystemTimer, TimingWheel, TimerTaskList and TimerTask, on a virtual clock.

How the wheel works (Kafka's design; the names below are Kafka's)
------------------------------------------------------------------
A TimingWheel of ``wheel_size`` buckets, each ``tick_ms`` wide, covers the window
``[current_time_ms, current_time_ms + interval)`` with ``interval = tick_ms * wheel_size``. A task entry with
absolute expiration E is placed by integer division: its *virtual id* is ``E // tick_ms``, its bucket is
``virtual_id % wheel_size`` and that bucket's expiration becomes ``virtual_id * tick_ms`` — the *start* of the
tick that contains E. Within one window two entries land in the same bucket only if they share a virtual id, so a
bucket always holds one tick's worth of entries.

An entry beyond the window goes to an *overflow wheel*, created lazily the first time it is needed, whose tick is
the whole interval of the wheel below and whose start is the lower wheel's current time. Level k therefore has tick
``tick_ms * wheel_size**(k-1)``; a handful of levels cover any realistic delay.

Buckets, not entries, are scheduled: a bucket is offered to one priority queue (Kafka's DelayQueue) when its
expiration *changes*, i.e. the first time it is filled in a new round of its wheel. When the clock reaches a
bucket's expiration, the bucket is released: every wheel's current time advances to it (rounded down to each
wheel's tick) and the bucket's entries are re-inserted from the finest wheel up. An entry from a coarse bucket thus
cascades into a finer bucket, and runs once it falls inside the current tick ``E < current_time_ms + tick_ms``.

Consequences the model reproduces on purpose, because Kafka has them:
  * a task runs at the start of its tick, up to ``tick_ms - 1`` early; with ``tick_ms == 1`` it runs exactly at E;
  * the wheels' current time moves only when a bucket is released, so it lags an idle clock: the "already
    expired" test on add is made against that lagging time, and a zero-delay task added to an idle wheel waits
    for the next advance instead of running on add. Lag never makes a task late;
  * ``size`` counts entries in buckets; a cancelled entry leaves at once, its emptied bucket stays queued.

Where Kafka misbehaves, the model defines the correct behaviour instead (see `TimerDomainError`): expirations are
bounded by Long.MAX_VALUE and rejected beyond it rather than wrapped; the model's integers do not overflow, so a
level whose interval exceeds Long.MAX_VALUE is simply the top level (Kafka's interval wraps negative and
re-inserts such an entry forever); start times and clocks are non-negative. An expiration of exactly Long.MAX_VALUE
is inside the domain: it is placed like any other (at the first level whose window reaches it) and runs when the
clock reaches Long.MAX_VALUE. Kafka cannot place it: with an even wheel size the overflow intervals wrap to 0 and
the next level divides by zero, with an odd one overflow wheels are created until the stack overflows.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Iterator

import attrs

from kpurgatory.model.vocabulary import LONG_MAX


class TimerDomainError(ValueError):
    """A timer input outside the domain where Kafka's arithmetic is sound.

    ``code`` is the observation's error code when the purgatory reports it (``delay_out_of_range``).
    """

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------------------------------------
# TimerTask and TimerTaskEntry
# ---------------------------------------------------------------------------------------------------------------


@attrs.define(eq=False)
class TimerTask:
    """Something the timer runs when its delay has passed. ``entry`` is its current place in the timer, if any."""

    task_id: str
    delay_ms: int
    entry: TimerTaskEntry | None = attrs.field(default=None, repr=False)
    #: what running the task means; the timer profile records a Run event, a DelayedOperation overrides run().
    on_run: Callable[[TimerTask], None] | None = attrs.field(default=None, repr=False)

    def run(self) -> None:
        if self.on_run is not None:
            self.on_run(self)

    def cancel(self) -> None:
        """TimerTask.cancel: remove the current entry from its bucket and forget it."""
        if self.entry is not None:
            self.entry.remove()
        self.entry = None

    def set_timer_task_entry(self, entry: TimerTaskEntry) -> None:
        """A task has at most one live entry: a new one (re-adding the task) evicts the old one."""
        if self.entry is not None and self.entry is not entry:
            self.entry.remove()
        self.entry = entry


@attrs.define(eq=False)
class TimerTaskEntry:
    """One scheduling of a task: the task, its absolute expiration, and the bucket holding it."""

    task: TimerTask
    expiration_ms: int
    bucket: TimerTaskList | None = attrs.field(default=None, repr=False)

    def cancelled(self) -> bool:
        """An entry is cancelled once its task no longer points at it (cancelled or re-added)."""
        return self.task.entry is not self

    def remove(self) -> None:
        if self.bucket is not None:
            self.bucket.remove(self)


# ---------------------------------------------------------------------------------------------------------------
# TimerTaskList: a bucket
# ---------------------------------------------------------------------------------------------------------------


@attrs.define
class TaskCounter:
    """Kafka's taskCounter: the number of entries in all the buckets of one timer, kept by the buckets themselves."""

    value: int = 0


@attrs.define(eq=False)
class TimerTaskList:
    """A bucket: entries in insertion order, and the expiration of the tick they belong to (-1 when unused)."""

    counter: TaskCounter = attrs.field(repr=False)
    expiration_ms: int = -1
    entries: dict[TimerTaskEntry, None] = attrs.field(factory=dict, repr=False)  # an ordered set

    def add(self, entry: TimerTaskEntry) -> None:
        entry.remove()  # an entry lives in at most one bucket
        self.entries[entry] = None
        entry.bucket = self
        self.counter.value += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        if entry.bucket is self:
            del self.entries[entry]
            entry.bucket = None
            self.counter.value -= 1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Returns whether the expiration changed: only then must the bucket be (re)queued."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def flush(self) -> list[TimerTaskEntry]:
        """Empty the bucket, returning its entries in insertion order, and mark it unused."""
        flushed = list(self.entries)
        for entry in flushed:
            self.remove(entry)
        self.expiration_ms = -1
        return flushed

    def __len__(self) -> int:
        return len(self.entries)


@attrs.define
class DelayQueue:
    """Kafka's DelayQueue of buckets, ordered by bucket expiration. Ties are broken by offer order; Kafka's heap
    breaks them differently, which is why observations treat events of equal expiration as unordered."""

    heap: list[tuple[int, int, TimerTaskList]] = attrs.field(factory=list, repr=False)
    _offers: Iterator[int] = attrs.field(factory=itertools.count, repr=False)

    def offer(self, bucket: TimerTaskList) -> None:
        heapq.heappush(self.heap, (bucket.expiration_ms, next(self._offers), bucket))

    def expirations(self) -> list[int]:
        """The expirations of the queued buckets, sorted; a bucket queued twice counts twice."""
        return sorted(expiration for expiration, _, _ in self.heap)

    def poll_due(self, now_ms: int) -> TimerTaskList | None:
        """The earliest bucket whose expiration is at or before ``now_ms``, removed from the queue; else None."""
        if self.heap and self.heap[0][0] <= now_ms:
            return heapq.heappop(self.heap)[2]
        return None


# ---------------------------------------------------------------------------------------------------------------
# TimingWheel
# ---------------------------------------------------------------------------------------------------------------


@attrs.define(eq=False)
class TimingWheel:
    tick_ms: int
    wheel_size: int
    current_time_ms: int
    queue: DelayQueue = attrs.field(repr=False)
    counter: TaskCounter = attrs.field(repr=False)
    buckets: list[TimerTaskList] = attrs.field(repr=False)
    overflow_wheel: TimingWheel | None = None

    @classmethod
    def create(cls, tick_ms: int, wheel_size: int, start_ms: int, queue: DelayQueue,
               counter: TaskCounter) -> TimingWheel:
        return cls(
            tick_ms=tick_ms,
            wheel_size=wheel_size,
            current_time_ms=start_ms - start_ms % tick_ms,  # rounded down to a multiple of the tick
            queue=queue,
            counter=counter,
            buckets=[TimerTaskList(counter) for _ in range(wheel_size)],
        )

    @property
    def interval(self) -> int:
        return self.tick_ms * self.wheel_size

    def add(self, entry: TimerTaskEntry) -> bool:
        """Place ``entry`` in this wheel or an overflow wheel. False means: cancelled, or due now (run it)."""
        expiration = entry.expiration_ms
        if entry.cancelled():
            return False
        if expiration < self.current_time_ms + self.tick_ms:
            return False  # already expired: within the current tick
        if expiration < self.current_time_ms + self.interval:
            virtual_id = expiration // self.tick_ms
            bucket = self.buckets[virtual_id % self.wheel_size]
            bucket.add(entry)
            if bucket.set_expiration(virtual_id * self.tick_ms):
                self.queue.offer(bucket)
            return True
        return self.add_overflow_wheel().add(entry)

    def add_overflow_wheel(self) -> TimingWheel:
        """Created on first use: tick = this wheel's interval, start = this wheel's current time."""
        if self.overflow_wheel is None:
            self.overflow_wheel = TimingWheel.create(self.interval, self.wheel_size, self.current_time_ms, self.queue,
                                                     self.counter)
        return self.overflow_wheel

    def advance_clock(self, time_ms: int) -> None:
        """Move to the tick containing ``time_ms`` if that is a later tick; overflow wheels follow."""
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - time_ms % self.tick_ms
            if self.overflow_wheel is not None:
                self.overflow_wheel.advance_clock(self.current_time_ms)

    def levels(self) -> Iterator[TimingWheel]:
        wheel: TimingWheel | None = self
        while wheel is not None:
            yield wheel
            wheel = wheel.overflow_wheel


# ---------------------------------------------------------------------------------------------------------------
# SystemTimer on a virtual clock
# ---------------------------------------------------------------------------------------------------------------


def check_expiration(now_ms: int, delay_ms: int) -> int:
    """Kafka computes ``delayMs + now`` in a long and a huge delay wraps negative, so the task runs at once.
    The model refuses instead: a deadline past Long.MAX_VALUE is a caller's bug, not an instant timeout. A deadline
    of exactly Long.MAX_VALUE is accepted (see the module docstring)."""
    expiration = now_ms + delay_ms
    if expiration > LONG_MAX:
        raise TimerDomainError(
            "delay_out_of_range",
            f"delay_ms={delay_ms} at now={now_ms} gives expiration {expiration} > Long.MAX_VALUE ({LONG_MAX})",
        )
    return expiration


@attrs.define(eq=False)
class SystemTimer:
    """SystemTimer(tickMs, wheelSize, startMs) with the clock injected: ``now_ms`` moves only by ``advance_clock``.

    Where Kafka hands a due task to its executor thread, the model runs it inline, at the point of the hand-off.
    ``on_bucket`` is told each released bucket's expiration, so observers can group what it caused.
    """

    tick_ms: int
    wheel_size: int
    now_ms: int
    timing_wheel: TimingWheel
    queue: DelayQueue
    counter: TaskCounter
    on_bucket: Callable[[int], None] = attrs.field(default=lambda expiration_ms: None, repr=False)

    @classmethod
    def create(cls, tick_ms: int, wheel_size: int, start_ms: int, **kwargs) -> SystemTimer:
        validate_timer_params(tick_ms, wheel_size, start_ms)
        queue, counter = DelayQueue(), TaskCounter()
        return cls(tick_ms, wheel_size, start_ms, TimingWheel.create(tick_ms, wheel_size, start_ms, queue, counter),
                   queue, counter, **kwargs)

    def add(self, task: TimerTask, expiration_ms: int | None = None) -> None:
        """A fresh entry at now + delay replaces the task's previous one (so re-adding resets the deadline).
        ``expiration_ms`` is a deadline fixed elsewhere (an op built before KAFKA-3470 carries its own)."""
        if expiration_ms is None:
            expiration_ms = check_expiration(self.now_ms, task.delay_ms)
        entry = TimerTaskEntry(task, expiration_ms)
        task.set_timer_task_entry(entry)
        self.add_timer_task_entry(entry)

    def add_timer_task_entry(self, entry: TimerTaskEntry) -> None:
        if not self.timing_wheel.add(entry) and not entry.cancelled():
            entry.task.run()  # Kafka: taskExecutor.submit(task)

    def advance_clock(self, to_ms: int) -> None:
        """The reaper catching up to ``to_ms``: release every bucket due by then, earliest first, advancing the wheels
        to each one and re-inserting its entries (cascading them down a level, or running them)."""
        if to_ms < self.now_ms:
            raise TimerDomainError("clock_backwards", f"advance to {to_ms} is before now ({self.now_ms})")
        if to_ms > LONG_MAX:
            raise TimerDomainError("clock_out_of_range", f"advance to {to_ms} exceeds Long.MAX_VALUE")
        self.now_ms = to_ms
        while (bucket := self.queue.poll_due(to_ms)) is not None:
            self.on_bucket(bucket.expiration_ms)
            self.timing_wheel.advance_clock(bucket.expiration_ms)
            for entry in bucket.flush():
                self.add_timer_task_entry(entry)

    def size(self) -> int:
        """Entries currently in buckets, at any level (invariant 5 of `wheel_invariants`)."""
        return self.counter.value

    def pending(self) -> list[TimerTask]:
        return [entry.task for wheel in self.timing_wheel.levels() for bucket in wheel.buckets for entry in bucket.entries]

    def occupied_buckets(self) -> list[TimerTaskList]:
        """Every non-empty bucket, once each. Observers read them after every step, so they come from the delay queue,
        which holds every non-empty bucket (invariant 4), not from levels of up to hundreds of mostly empty buckets."""
        return list({bucket: None for _, _, bucket in self.queue.heap if bucket.entries})

    def queued_expirations(self) -> list[int]:
        """The delay queue read-out: expirations of the queued buckets, sorted, duplicates kept."""
        return self.queue.expirations()

    def describe(self) -> dict:
        """The wheel read-out of the ``wheel`` command: levels finest first, non-empty buckets by slot."""
        return {
            "levels": [
                {
                    "tick_ms": wheel.tick_ms,
                    "wheel_size": wheel.wheel_size,
                    "current_ms": wheel.current_time_ms,
                    "buckets": [
                        {"slot": slot, "expiration_ms": bucket.expiration_ms,
                         "entries": [entry.task.task_id for entry in bucket.entries]}
                        for slot, bucket in enumerate(wheel.buckets) if bucket.entries
                    ],
                }
                for wheel in self.timing_wheel.levels()
            ]
        }


def validate_timer_params(tick_ms: int, wheel_size: int, start_ms: int) -> None:
    """The domain where the wheel is well defined (Kafka checks none of these)."""
    if tick_ms < 1:
        raise TimerDomainError("invalid_params", f"tick_ms must be >= 1, got {tick_ms}")
    if wheel_size < 2:
        # a one-bucket wheel's overflow wheel has the same interval: Kafka would recurse forever
        raise TimerDomainError("invalid_params", f"wheel_size must be >= 2, got {wheel_size}")
    if not 0 <= start_ms <= LONG_MAX:
        # Java's truncating % and / give negative bucket indexes for negative times
        raise TimerDomainError("invalid_params", f"start_ms must be in [0, Long.MAX_VALUE], got {start_ms}")
    if tick_ms > LONG_MAX or tick_ms * wheel_size > LONG_MAX:
        raise TimerDomainError("invalid_params", "tick_ms * wheel_size must not exceed Long.MAX_VALUE")


def wheel_invariants(timer: SystemTimer) -> list[str]:
    """The structural invariants of the hierarchy, each stated once; returns the ones violated (tests check this
    after every step).

    1. Tick: an entry in a bucket of a level with tick t expires within that bucket's tick,
       ``bucket.expiration_ms <= E < bucket.expiration_ms + t``; so a bucket never mixes rounds.
    2. Ownership: every entry in a bucket is its task's current entry, and a task is in at most one bucket.
    3. Levels: level k+1 has tick equal to level k's interval, and every level's current time is a multiple of its
       tick and no later than the clock.
    4. Queued: every non-empty bucket is in the delay queue under its current expiration.
    5. Count: the task counter equals the entries in all buckets.
    """
    violations = []
    queued = {(expiration, id(bucket)) for expiration, _, bucket in timer.queue.heap}
    seen: set[int] = set()
    previous: TimingWheel | None = None
    for level, wheel in enumerate(timer.timing_wheel.levels(), start=1):
        if previous is not None and wheel.tick_ms != previous.interval:
            violations.append(f"levels: level {level} tick {wheel.tick_ms} != level {level - 1} interval")
        if wheel.current_time_ms % wheel.tick_ms or wheel.current_time_ms > timer.now_ms:
            violations.append(f"levels: level {level} current time {wheel.current_time_ms} is unaligned or ahead")
        for bucket in wheel.buckets:
            for entry in bucket.entries:
                if not bucket.expiration_ms <= entry.expiration_ms < bucket.expiration_ms + wheel.tick_ms:
                    violations.append(f"tick: {entry.task.task_id} (E={entry.expiration_ms}) in level {level} bucket "
                                      f"{bucket.expiration_ms}")
                if entry.cancelled() or id(entry.task) in seen:
                    violations.append(f"ownership: {entry.task.task_id} has a stale or second entry")
                seen.add(id(entry.task))
            if bucket.entries and (bucket.expiration_ms, id(bucket)) not in queued:
                violations.append(f"queued: level {level} bucket {bucket.expiration_ms} is not in the delay queue")
        previous = wheel
    in_buckets = sum(len(bucket) for wheel in timer.timing_wheel.levels() for bucket in wheel.buckets)
    if timer.counter.value != in_buckets:
        violations.append(f"count: the task counter says {timer.counter.value}, the buckets hold {in_buckets}")
    return violations
