"""What a check reached, read off the reference model's state around each step.

A passing check is only as good as the states it visited. `Coverage` names the situations where Kafka's purgatory
and wheel are subtle or have had bugs (kafka-semantics §2.6 and §4: cascades, early firing, wheel lag, stale
entries, the purge trigger's strict inequality, ...) and counts how often each happened; `state_shape` abstracts the
model's state (times relative to the clock, ids dropped, counters clamped) so that the number of distinct shapes
says how much of the state space the steps explored rather than how many steps ran. It also says what of the
structure was reached: each comparison of the wheel's add at the first wheel and an overflow wheel, the wheel sizes
run, and how many of the watcher shards the system declares were used.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from typing import Iterator, NamedTuple

import attrs

from kpurgatory.conformance.check.strategies import level_clocks
from kpurgatory.model import Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import WatcherShards
from kpurgatory.model.purgatory import DelayedOperation
from kpurgatory.model.timer import SystemTimer, TimerTaskList, TimingWheel

#: where an add compares -> its items, named once: (deadline at) the tick, the tick ±1 ms, the interval, the
#: interval ±1 ms, the interval ±1 tick, and an advance to a deadline added at the interval
WHEEL_EDGE_ITEMS = {where: tuple(f"{edge} ({where})" for edge in (
    "deadline at the tick", "deadline at the tick ±1 ms", "deadline at the interval", "deadline at the interval ±1 ms",
    "deadline at the interval ±1 tick", "advance to a deadline at the interval, or 1 ms before"))
    for where in ("first wheel", "overflow wheel")}

TIMER_ITEMS = (
    "entry at level 2", "entry at level 3", "entry at level 4+", "cascade", "cascade from level 3+",
    "fired from an overflow level", "fired on add", "fired early (tick > 1)", "added to a lagging wheel",
    "re-added while pending", "cancelled while pending", "delay_out_of_range", "shutdown with pending entries",
    # where timers' arithmetic breaks (strategies: origins, boundaries, the edge of time)
    "clock past 2^32 ticks", "clock within a level-2 interval of Long.MAX_VALUE", "unaligned deadline (tick > 1)",
    "deadline at a level boundary ±1", "deadline across a 2^32-tick boundary", "advance to a level boundary ±1",
    "advance across a 2^32-tick boundary", "entry at a level whose interval passes Long.MAX_VALUE",
    "deadline exactly Long.MAX_VALUE", "deadline just beyond Long.MAX_VALUE",
    # each comparison of the wheel's add, from the clock of the first wheel or of an overflow wheel (strategies:
    # draw_wheel_edge), and an advance to or just before a deadline added there
    *(item for where in ("first wheel", "overflow wheel") for item in WHEEL_EDGE_ITEMS[where]),
    "overflow wheel created", "overflow wheel created at the interval", "cascade onto a wheel's interval",
    # the wheel sizes of the runs, counted in steps
    "wheel of 2-6 buckets", "wheel of Kafka's 20 buckets", "wheel of 7+ buckets, even", "wheel of 7+ buckets, odd",
    # the ticks of the runs, counted in steps, and the clock off the tick: where rounding to the tick shows
    "tick of 1 ms", "tick > 1, a power of two", "tick > 1, odd", "tick > 1, even, not a power of two",
    "start off the tick", "advance off the tick",
    # where registry timers broke: an entry added again a whole turn of the wheel later, the clock at its end
    "re-added while pending, a wheel turn after its add", "clock at Long.MAX_VALUE",
)
#: sequences the timer profile drives on purpose; a purgatory run meets them only by chance, through its ops' delays
TIMER_PROFILE_ONLY = (
    *(f"advance to a deadline at the interval, or 1 ms before ({where})" for where in ("first wheel", "overflow wheel")),
    "cascade onto a wheel's interval",
)
PURGATORY_ITEMS = tuple(item for item in TIMER_ITEMS if item not in TIMER_PROFILE_ONLY) + (
    "completed via try", "completed via check", "completed via expire", "completed via force",
    "ready on second try", "re-watched op", "re-watched completed op", "watched on duplicate keys",
    "stale entry", "stale entry dropped by check", "cancel_key of a live op", "purge fired",
    "purge fired at the boundary", "purge held at the boundary", "purge of nothing", "empty_keys",
)
ITEMS = {"timer": TIMER_ITEMS, "purgatory": PURGATORY_ITEMS}


@attrs.define(eq=False)
class Levels:
    """What is known of one timer's levels from step to step: they only ever grow and a bucket never moves, so a step
    need not walk dozens of levels, or search them for a bucket, again. Holding the timer keeps its buckets alive, so
    their ids stay theirs."""

    timer: SystemTimer
    wheels: list[TimingWheel] = attrs.field(factory=list)
    #: id(bucket) -> (level, slot), level 1 the finest
    places: dict[int, tuple[int, int]] = attrs.field(factory=dict)
    #: what `lags` last worked out, and from which clock and level times
    last_lags: list[tuple[int, tuple]] = attrs.field(factory=list)
    lags_from: tuple[int, list[int]] | None = None

    def wheels_now(self) -> list[TimingWheel]:
        """The levels that exist, finest first."""
        wheel = self.wheels[-1].overflow_wheel if self.wheels else self.timer.timing_wheel
        while wheel is not None:
            self.wheels.append(wheel)
            wheel = wheel.overflow_wheel
        return self.wheels

    def occupied(self) -> list[tuple[int, int, TimerTaskList]]:
        """(level, slot, bucket) of every non-empty bucket, by level then slot: what a walk over every bucket finds."""
        buckets = self.timer.occupied_buckets()
        if not buckets:
            return buckets
        places = self.places
        occupied = [(*(places.get(id(bucket)) or self.find(bucket)), bucket) for bucket in buckets]
        occupied.sort()  # no two buckets share a place, so the buckets themselves are never compared
        return occupied

    def find(self, bucket: TimerTaskList) -> tuple[int, int]:
        wheels = self.wheels_now()
        for level, wheel in enumerate(wheels, start=1):
            # a bucket's expiration is the start of its tick, so it names the bucket's slot at its own level
            slot = bucket.expiration_ms // wheel.tick_ms % wheel.wheel_size
            if wheel.buckets[slot] is bucket:
                break
        else:  # only a wheel that breaks its invariants puts it elsewhere
            level, slot = next((level, slot) for level, wheel in enumerate(wheels, start=1)
                               for slot, other in enumerate(wheel.buckets) if other is bucket)
        self.places[id(bucket)] = level, slot
        return level, slot

    def lags(self, now: int) -> list[tuple[int, tuple]]:
        """`state_shape` of each level before its buckets: (its lag behind ``now`` in ticks, at most 2; ()). Mostly
        what it was at the step before, as only an advance moves the clock and the levels' times."""
        wheels = self.wheels_now()
        source = (now, [wheel.current_time_ms for wheel in wheels])
        if source != self.lags_from:
            # most levels of a deep wheel are within a tick of the clock: no long division for those
            self.last_lags = [(0, ()) if 0 <= now - wheel.current_time_ms < wheel.tick_ms else
                              (min((now - wheel.current_time_ms) // wheel.tick_ms, 2), ()) for wheel in wheels]
            self.lags_from = source
        return self.last_lags


@functools.lru_cache(maxsize=2)
def levels_of(timer: SystemTimer) -> Levels:
    """The `Levels` of a timer (a check's model's and, as a run begins, the last run's)."""
    return Levels(timer)


def entry_places(timer: SystemTimer, occupied: list | None = None) -> dict[str, tuple[int, int]]:
    """task or op id -> (level, expiration) of every pending entry; level 1 is the finest wheel. ``occupied``: the
    timer's `Levels.occupied`, when already read."""
    occupied = levels_of(timer).occupied() if occupied is None else occupied
    return {entry.task.task_id: (level, entry.expiration_ms) for level, _, bucket in occupied
            for entry in bucket.entries} if occupied else {}


class Before(NamedTuple):
    """The part of the state before a step that its coverage is judged against (a named tuple: one is made for every
    step)."""

    now_ms: int
    wheel_ms: int
    entries: dict[str, tuple[int, int]]
    estimated_total: int
    #: watch: (completed, tryComplete calls) of the op if it already existed
    op: tuple[bool, int] | None
    #: check: whether the key's list held a completed op
    stale_on_key: bool
    #: timer_add and watch: the current time of every wheel level that exists, finest first (the other steps are
    #: not judged against it)
    clocks: tuple[int, ...]

    @classmethod
    def of(cls, model: Model, command: v.Command, entries: dict[str, tuple[int, int]] | None = None) -> Before:
        """``entries``: the model's `entry_places`, when already read."""
        adds = isinstance(command, (v.TimerAdd, v.Watch))
        op = model.ops.get(command.op) if isinstance(command, v.Watch) else None
        stale = isinstance(command, v.Check) and any(listed.completed
                                                     for listed in model.purgatory.watchers.get(command.key, ()))
        return cls(model.now_ms, model.timer.timing_wheel.current_time_ms,
                   entry_places(model.timer) if entries is None else entries,
                   model.purgatory.estimated_total_operations, op and (op.completed, op.try_calls), stale,
                   clocks_of(model.timer) if adds else ())


def clocks_of(timer: SystemTimer) -> tuple[int, ...]:
    """The current time of every wheel level that exists, finest first."""
    return tuple([wheel.current_time_ms for wheel in levels_of(timer).wheels_now()])


def add_levels(p: v.Params, now: int, clocks: tuple[int, ...], created: list[TimingWheel] | tuple = ()
               ) -> Iterator[tuple[int, int]]:
    """`level_clocks` one level at a time: the levels that exist are ``clocks`` at their ticks, and the levels an add
    ``created`` from them started where level_clocks puts them (at the time of the level below, rounded down to
    their own tick), so only a climb past both pays for working out the dozens of levels a wheel can have (an add
    looks at the levels up to where it lands)."""
    tick = p.tick_ms
    for clock in itertools.chain(clocks, [wheel.current_time_ms for wheel in created]):
        if tick > v.LONG_MAX:  # where level_clocks stops
            return
        yield tick, clock
        tick *= p.wheel_size
    yield from level_clocks(p, now, clocks)[len(clocks) + len(created):]


@functools.lru_cache(maxsize=4096)
def shard_of(shards: WatcherShards, key: str) -> int:
    """`WatcherShards.shard`, remembered: runs reuse a handful of keys, and a Java string hash is a loop."""
    return shards.shard(key)


@functools.cache
def wheel_size_item(size: int) -> str:
    """The item that counts the steps of runs with wheels of ``size`` buckets."""
    return ("wheel of 2-6 buckets" if size <= 6 else "wheel of Kafka's 20 buckets" if size == 20 else
            f"wheel of 7+ buckets, {'odd' if size % 2 else 'even'}")


@functools.cache
def tick_item(tick: int) -> str:
    """The item that counts the steps of runs with a tick of ``tick`` ms."""
    if tick == 1:
        return "tick of 1 ms"
    if tick & (tick - 1) == 0:
        return "tick > 1, a power of two"
    return "tick > 1, odd" if tick % 2 else "tick > 1, even, not a power of two"


@attrs.define
class Coverage:
    profile: str
    #: the system's watcher shards (its declarations): the purgatory's coverage says how many of them were used (a
    #: watch left an entry on a key there, or a key there was checked or cancelled)
    shards: WatcherShards = attrs.field(factory=WatcherShards)
    counts: Counter = attrs.field(factory=Counter)
    states: set[int] = attrs.field(factory=set)
    shards_hit: set[int] = attrs.field(factory=set)
    #: pending entries added at a level's interval: task or op id -> (which wheel, deadline)
    at_interval: dict[str, tuple[str, int]] = attrs.field(factory=dict)
    #: task or op id -> the clock at its last accepted add, in the run of ``run_model``
    added_at: dict[str, int] = attrs.field(factory=dict)
    run_model: Model | None = None

    def report(self) -> dict[str, int]:
        """Every item of the profile, reached or not, in a fixed order; the purgatory's ends with how many of the
        system's watcher shards were used."""
        report = {item: self.counts[item] for item in ITEMS[self.profile]}
        if self.profile == "purgatory" and self.shards.hash != "none":
            report[f"watcher shards hit (of {self.shards.count})"] = len(self.shards_hit)
        return report

    def hit(self, item: str, times: int | bool = 1) -> None:
        if times:
            self.counts[item] += times

    def record(self, model: Model, command: v.Command, observation: v.Observation,
               before: Before) -> dict[str, tuple[int, int]]:
        """Count what the step reached, and return the model's `entry_places` after it (the next step's before). It
        runs after every step of a check, and most items are not reached by most steps: their conditions are tested
        before `hit` is called."""
        if model is not self.run_model:  # a new run
            self.run_model, self.added_at = model, {}
        occupied = levels_of(model.timer).occupied()
        self.states.add(hash(state_shape(model, occupied)))
        ok = observation.error is None
        if not ok:
            self.hit(observation.error)
        after = entry_places(model.timer, occupied)
        top = occupied[-1][0] if occupied else 0  # the highest level holding an entry (0: none)
        if top > 1:
            self.hit(f"entry at level {top}" if top < 4 else "entry at level 4+")
        # entries that moved down a level: (level before, level after, expiration)
        cascaded = [(before.entries[task][0], level, expiration) for task, (level, expiration) in after.items()
                    if task in before.entries and level < before.entries[task][0]] if before.entries else []
        if cascaded:
            self.hit("cascade", len(cascaded))
            self.hit("cascade from level 3+", sum(level >= 3 for level, _, _ in cascaded))

        target = (command.task if isinstance(command, (v.TimerAdd, v.TimerCancel)) else
                  command.op if isinstance(command, (v.Watch, v.Cancel)) else None)  # an add's or cancel's
        asks = isinstance(command, (v.TimerAdd, v.Watch))  # accepted or not
        adds = ok and asks
        deadline = asked_deadline(model, command, observation, before) if asks else None
        if adds:
            if target in before.entries:
                self.hit("re-added while pending")
                turn = model.params.tick_ms * model.params.wheel_size
                self.hit("re-added while pending, a wheel turn after its add",
                         model.now_ms - self.added_at.get(target, model.now_ms) >= turn)
            self.added_at[target] = model.now_ms
            if before.wheel_ms + model.params.tick_ms <= before.now_ms:
                self.hit("added to a lagging wheel")
        fired = [e.task if isinstance(e, v.Run) else e.op for e in observation.events
                 if isinstance(e, v.Run) or (isinstance(e, v.Complete) and e.via == "expire")]
        if fired:
            self.hit("fired on add", adds)
            deadlines = {task: expiration for task, (_, expiration) in before.entries.items()}
            if adds:
                deadlines[target] = deadline
            self.hit("fired early (tick > 1)", sum(model.now_ms < deadlines[task] for task in fired))
            self.hit("fired from an overflow level", sum(before.entries.get(task, (1,))[0] > 1 for task in fired))
        if isinstance(command, (v.TimerCancel, v.Cancel)) and target in before.entries:
            self.hit("cancelled while pending")
        if isinstance(command, v.Shutdown) and observation.result:
            self.hit("shutdown with pending entries")
        self.hit(wheel_size_item(model.params.wheel_size))
        self.hit(tick_item(model.params.tick_ms))
        self.hit("start off the tick", model.params.start_ms % model.params.tick_ms != 0)
        self.record_edges(model, command, before, top, deadline)
        if cascaded or self.at_interval or adds:
            self.record_wheel_edges(model, command, before, after, cascaded, deadline if adds else None, target)
        if self.profile == "purgatory":
            self.record_purgatory(model, command, observation, before)
        return after

    def record_edges(self, model: Model, command: v.Command, before: Before, top: int, deadline: int | None) -> None:
        """Where timers' arithmetic breaks: far clocks, boundaries crossed, the edge of time. ``top`` is the highest
        level holding an entry after the step (0: none); ``deadline`` that of a timer_add or watch (accepted or
        rejected with delay_out_of_range)."""
        p, now = model.params, model.now_ms
        tick, interval = p.tick_ms, p.tick_ms * p.wheel_size
        if now // tick >= 2**32:
            self.hit("clock past 2^32 ticks")
        if v.LONG_MAX - now < interval * p.wheel_size:
            self.hit("clock within a level-2 interval of Long.MAX_VALUE")
        # the higher the level, the longer its interval: the top entry's passes Long.MAX_VALUE if any does
        if top and tick * p.wheel_size ** top > v.LONG_MAX:
            self.hit("entry at a level whose interval passes Long.MAX_VALUE")
        if now == v.LONG_MAX:
            self.hit("clock at Long.MAX_VALUE")
        if isinstance(command, v.Advance):
            if command.to_ms % tick != 0:
                self.hit("advance off the tick")
            if command.to_ms > before.now_ms and at_level_boundary(command.to_ms, tick, p.wheel_size):
                self.hit("advance to a level boundary ±1")
            if (before.now_ms // tick) >> 32 != (command.to_ms // tick) >> 32:
                self.hit("advance across a 2^32-tick boundary")
        if deadline is None:
            return
        if deadline == v.LONG_MAX:
            self.hit("deadline exactly Long.MAX_VALUE")
        if v.LONG_MAX < deadline <= v.LONG_MAX + interval:
            self.hit("deadline just beyond Long.MAX_VALUE")
        if deadline <= v.LONG_MAX:
            if tick > 1 and deadline % tick != 0:
                self.hit("unaligned deadline (tick > 1)")
            if deadline > before.now_ms and at_level_boundary(deadline, tick, p.wheel_size):
                self.hit("deadline at a level boundary ±1")
            if (before.now_ms // tick) >> 32 != (deadline // tick) >> 32:
                self.hit("deadline across a 2^32-tick boundary")

    def record_wheel_edges(self, model: Model, command: v.Command, before: Before, after: dict[str, tuple[int, int]],
                           cascaded: list[tuple[int, int, int]], deadline: int | None, target: str | None) -> None:
        """Each comparison of the wheel's add that an accepted deadline met at a level it reached
        (`strategies.draw_wheel_edge`), and an advance to, or a millisecond before, a deadline added at a level's
        interval while it is pending: the pattern that shows a ``<=`` for ``<`` in add. ``cascaded`` are the entries that moved down a level."""
        p = model.params
        if cascaded:  # onto the interval of a level at or below the one it lands in
            reached = list(itertools.islice(add_levels(p, model.now_ms, clocks_of(model.timer)),
                                            max(level for _, level, _ in cascaded)))
            self.hit("cascade onto a wheel's interval", sum(
                any(expiration == clock + tick * p.wheel_size for tick, clock in reached[:level])
                for _, level, expiration in cascaded))
        if self.at_interval:
            if isinstance(command, v.Advance):
                for task, (where, expiration) in self.at_interval.items():
                    if before.entries.get(task, (0, None))[1] == expiration:
                        self.hit(WHEEL_EDGE_ITEMS[where][5], command.to_ms in (expiration - 1, expiration))
            self.at_interval = {task: edge for task, edge in self.at_interval.items() if task in after}
        if deadline is None or deadline > v.LONG_MAX:
            return
        created = levels_of(model.timer).wheels_now()[len(before.clocks):]
        if created:
            self.hit("overflow wheel created")
        for level, (tick, clock) in enumerate(add_levels(p, before.now_ms, before.clocks, created)):
            from_tick, from_interval = deadline - clock - tick, deadline - clock - tick * p.wheel_size
            if abs(from_tick) <= 1 or abs(from_interval) <= tick:  # else none of the edges (a deep climb's levels)
                where = "first wheel" if level == 0 else "overflow wheel"
                at_tick, near_tick, at_interval, near_interval, tick_off_interval, _ = WHEEL_EDGE_ITEMS[where]
                self.hit(at_tick, from_tick == 0)
                self.hit(near_tick, abs(from_tick) == 1)
                self.hit(at_interval, from_interval == 0)
                self.hit(near_interval, abs(from_interval) == 1)
                self.hit(tick_off_interval, tick > 1 and abs(from_interval) == tick)
                if from_interval == 0:
                    if created and level == len(before.clocks) - 1:
                        self.hit("overflow wheel created at the interval")
                    if target in after:
                        self.at_interval[target] = (where, deadline)
            if from_interval < 0:
                return  # placed at this level (or due): the levels above never see it

    def record_purgatory(self, model: Model, command: v.Command, observation: v.Observation, before: Before) -> None:
        for event in observation.events:
            if isinstance(event, v.Complete):
                self.hit(f"completed via {event.via}")
        if any(op.completed for ops in model.purgatory.watchers.values() for op in ops):
            self.hit("stale entry")
        if isinstance(command, v.Watch) and observation.error is None:
            was_completed, tries_before = before.op or (False, 0)
            if before.op is not None:
                self.hit("re-watched completed op" if was_completed else "re-watched op")
            self.hit("ready on second try",
                     observation.result is True and model.ops[command.op].try_calls - tries_before == 2)
            self.hit("watched on duplicate keys", len(set(command.keys)) < len(command.keys) and not was_completed)
            self.shards_hit.update(shard_of(self.shards, key) for key in command.keys
                                   if key in model.purgatory.watchers)
        if isinstance(command, (v.Check, v.CancelKey)):
            self.shards_hit.add(shard_of(self.shards, command.key))
            if isinstance(command, v.Check) and before.stale_on_key:
                self.hit("stale entry dropped by check")
            if isinstance(command, v.CancelKey) and any(not model.ops[op].completed for op in observation.result):
                self.hit("cancel_key of a live op")
        if isinstance(command, v.Advance):
            # the trigger compared the estimate before the step with the timer's size after the drain
            pressure = before.estimated_total - model.timer.size() - model.params.purge_interval
            purges = [e for e in observation.events if isinstance(e, v.Purge)]
            if purges:
                self.hit("purge fired")
                self.hit("purge of nothing", purges[0].count == 0)
                self.hit("purge fired at the boundary", pressure == 1)
            # with purge_interval 0, holding at the boundary only means nothing has completed
            elif pressure == 0 and model.params.purge_interval > 0:
                self.hit("purge held at the boundary")


def asked_deadline(model: Model, command: v.Command, observation: v.Observation, before: Before) -> int | None:
    """The deadline a timer_add or watch asked for, accepted or rejected with delay_out_of_range."""
    if not isinstance(command, (v.TimerAdd, v.Watch)) or observation.error not in (None, "delay_out_of_range"):
        return None
    return before.now_ms + (command.delay_ms if isinstance(command, v.TimerAdd) else model.ops[command.op].delay_ms)


def at_level_boundary(time_ms: int, tick_ms: int, wheel_size: int) -> bool:
    """``time_ms`` is a multiple of a level's interval (tick * wheel_size^k, k >= 1), or a millisecond either side.
    Every level's interval is a multiple of the first's, so the first's decides."""
    interval = tick_ms * wheel_size
    return interval <= time_ms + 1 and (time_ms + 1) % interval <= 2


def state_shape(model: Model, occupied: list | None = None) -> tuple:
    """The model's state up to renaming ids and shifting time: per wheel level its lag behind the clock and its
    non-empty buckets by slot relative to the current one; per watch list its entries' op states; how far the
    purge trigger is from firing. Only integers and booleans, so hashes are stable across processes. ``occupied``:
    the timer's `Levels.occupied`, when already read."""
    timer, levels = model.timer, levels_of(model.timer)
    shape = list(levels.lags(timer.now_ms))
    wheels = levels.wheels
    for level, slot, bucket in levels.occupied() if occupied is None else occupied:
        wheel = wheels[level - 1]
        lag, buckets = shape[level - 1]
        buckets += (((slot - wheel.current_time_ms // wheel.tick_ms) % wheel.wheel_size, len(bucket.entries)),)
        shape[level - 1] = lag, tuple(sorted(buckets)) if len(buckets) > 1 else buckets
    purgatory = model.purgatory
    lists = (tuple(sorted(tuple(map(op_state, ops)) for ops in purgatory.watchers.values())) if purgatory.watchers
             else ())
    pressure = purgatory.estimated_total_operations - timer.size() - purgatory.purge_interval
    return model.params.tick_ms, model.params.wheel_size, tuple(shape), lists, max(min(pressure, 1), -2)


def op_state(op: DelayedOperation) -> tuple:
    """An op as `state_shape` sees it: completed, ready (-1 not set, 0 cleared, 1 set), tries still to go before
    ready_on (-1: none), and whether it is in the timer."""
    tries_to_go = -1 if op.ready_on is None else max(op.ready_on - op.try_calls, 0)
    ready = -1 if op.ready is None else int(op.ready)
    return op.completed, ready, tries_to_go, op.entry is not None
