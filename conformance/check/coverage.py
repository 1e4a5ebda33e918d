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

from collections import Counter

import attrs

from kpurgatory.conformance.check.strategies import level_clocks
from kpurgatory.model import Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import WatcherShards
from kpurgatory.model.timer import SystemTimer

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
    # wheel_edges), and an advance to or just before a deadline added there
    *(f"{edge} ({where})" for where in ("first wheel", "overflow wheel") for edge in (
        "deadline at the tick", "deadline at the tick ±1 ms", "deadline at the interval",
        "deadline at the interval ±1 ms", "deadline at the interval ±1 tick",
        "advance to a deadline at the interval, or 1 ms before")),
    "overflow wheel created", "overflow wheel created at the interval", "cascade onto a wheel's interval",
    # the wheel sizes of the runs, counted in steps
    "wheel of 2-6 buckets", "wheel of Kafka's 20 buckets", "wheel of 7+ buckets, even", "wheel of 7+ buckets, odd",
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


def entry_places(timer: SystemTimer) -> dict[str, tuple[int, int]]:
    """task or op id -> (level, expiration) of every pending entry; level 1 is the finest wheel."""
    return {entry.task.task_id: (level, entry.expiration_ms)
            for level, wheel in enumerate(timer.timing_wheel.levels(), start=1)
            for bucket in wheel.buckets for entry in bucket.entries}


@attrs.frozen
class Before:
    """The part of the state before a step that its coverage is judged against."""

    now_ms: int
    wheel_ms: int
    entries: dict[str, tuple[int, int]]
    estimated_total: int
    #: watch: (completed, tryComplete calls) of the op if it already existed
    op: tuple[bool, int] | None
    #: check: whether the key's list held a completed op
    stale_on_key: bool
    #: the current time of every wheel level that exists, finest first
    clocks: tuple[int, ...]

    @classmethod
    def of(cls, model: Model, command: v.Command) -> Before:
        op = model.ops.get(command.op) if isinstance(command, v.Watch) else None
        listed = model.purgatory.watchers.get(command.key, ()) if isinstance(command, v.Check) else ()
        return cls(model.now_ms, model.timer.timing_wheel.current_time_ms, entry_places(model.timer),
                   model.purgatory.estimated_total_operations, op and (op.completed, op.try_calls),
                   any(op.completed for op in listed), clocks_of(model.timer))


def clocks_of(timer: SystemTimer) -> tuple[int, ...]:
    """The current time of every wheel level that exists, finest first."""
    return tuple(wheel.current_time_ms for wheel in timer.timing_wheel.levels())


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

    def record(self, model: Model, command: v.Command, observation: v.Observation, before: Before) -> None:
        self.states.add(hash(state_shape(model)))
        ok = observation.error is None
        if not ok:
            self.hit(observation.error)
        after = entry_places(model.timer)
        top = max((level for level, _ in after.values()), default=1)
        if top > 1:
            self.hit(f"entry at level {top}" if top < 4 else "entry at level 4+")
        moved_down = [before.entries[task][0] for task, (level, _) in after.items()
                      if task in before.entries and level < before.entries[task][0]]
        self.hit("cascade", len(moved_down))
        self.hit("cascade from level 3+", sum(level >= 3 for level in moved_down))

        target = getattr(command, "task", getattr(command, "op", None))
        adds = ok and isinstance(command, (v.TimerAdd, v.Watch))
        deadlines = {task: expiration for task, (_, expiration) in before.entries.items()}
        deadline = asked_deadline(model, command, observation, before)
        if adds:
            deadlines[target] = deadline
            self.hit("re-added while pending", target in before.entries)
            self.hit("added to a lagging wheel", before.wheel_ms + model.params.tick_ms <= before.now_ms)
        fired = [e.task if isinstance(e, v.Run) else e.op for e in observation.events
                 if isinstance(e, v.Run) or (isinstance(e, v.Complete) and e.via == "expire")]
        self.hit("fired on add", adds and bool(fired))
        self.hit("fired early (tick > 1)", sum(model.now_ms < deadlines[task] for task in fired))
        self.hit("fired from an overflow level", sum(before.entries.get(task, (1,))[0] > 1 for task in fired))
        self.hit("cancelled while pending", isinstance(command, (v.TimerCancel, v.Cancel)) and target in before.entries)
        self.hit("shutdown with pending entries", isinstance(command, v.Shutdown) and bool(observation.result))
        size = model.params.wheel_size
        self.hit("wheel of 2-6 buckets" if size <= 6 else "wheel of Kafka's 20 buckets" if size == 20 else
                 f"wheel of 7+ buckets, {'odd' if size % 2 else 'even'}")
        self.record_edges(model, command, before, after, deadline)
        self.record_wheel_edges(model, command, before, after, deadline if adds else None, target)
        if self.profile == "purgatory":
            self.record_purgatory(model, command, observation, before)

    def record_edges(self, model: Model, command: v.Command, before: Before, after: dict[str, tuple[int, int]],
                     deadline: int | None) -> None:
        """Where timers' arithmetic breaks: far clocks, boundaries crossed, the edge of time. ``deadline`` is that
        of a timer_add or watch (accepted or rejected with delay_out_of_range)."""
        p = model.params
        tick, interval = p.tick_ms, p.tick_ms * p.wheel_size
        self.hit("clock past 2^32 ticks", model.now_ms // tick >= 2**32)
        self.hit("clock within a level-2 interval of Long.MAX_VALUE",
                 v.LONG_MAX - model.now_ms < interval * p.wheel_size)
        self.hit("entry at a level whose interval passes Long.MAX_VALUE",
                 any(tick * p.wheel_size ** level > v.LONG_MAX for level, _ in after.values()))
        if isinstance(command, v.Advance):
            self.hit("advance to a level boundary ±1", command.to_ms > before.now_ms and
                     at_level_boundary(command.to_ms, tick, p.wheel_size))
            self.hit("advance across a 2^32-tick boundary",
                     (before.now_ms // tick) >> 32 != (command.to_ms // tick) >> 32)
        if deadline is None:
            return
        self.hit("deadline exactly Long.MAX_VALUE", deadline == v.LONG_MAX)
        self.hit("deadline just beyond Long.MAX_VALUE", v.LONG_MAX < deadline <= v.LONG_MAX + interval)
        if deadline <= v.LONG_MAX:
            self.hit("unaligned deadline (tick > 1)", tick > 1 and deadline % tick != 0)
            self.hit("deadline at a level boundary ±1", deadline > before.now_ms and
                     at_level_boundary(deadline, tick, p.wheel_size))
            self.hit("deadline across a 2^32-tick boundary", (before.now_ms // tick) >> 32 != (deadline // tick) >> 32)

    def record_wheel_edges(self, model: Model, command: v.Command, before: Before, after: dict[str, tuple[int, int]],
                           deadline: int | None, target: str | None) -> None:
        """Each comparison of the wheel's add that an accepted deadline met at a level it reached (`wheel_edges`),
        and an advance to, or a millisecond before, a deadline added at a level's interval while it is pending: the
        pattern that shows a ``<=`` for ``<`` in add."""
        after_clocks = level_clocks(model.params, model.now_ms, clocks_of(model.timer))
        self.hit("cascade onto a wheel's interval", sum(
            any(expiration == clock + tick * model.params.wheel_size for tick, clock in after_clocks[:level])
            for task, (level, expiration) in after.items()
            if task in before.entries and level < before.entries[task][0]))
        if isinstance(command, v.Advance):
            for task, (where, expiration) in self.at_interval.items():
                if before.entries.get(task, (0, None))[1] == expiration:
                    self.hit(f"advance to a deadline at the interval, or 1 ms before ({where})",
                             command.to_ms in (expiration - 1, expiration))
        self.at_interval = {task: edge for task, edge in self.at_interval.items() if task in after}
        if deadline is None or deadline > v.LONG_MAX:
            return
        p = model.params
        created = len(clocks_of(model.timer)) > len(before.clocks)
        self.hit("overflow wheel created", created)
        for level, (tick, clock) in enumerate(level_clocks(p, before.now_ms, before.clocks)):
            where, interval = "first wheel" if level == 0 else "overflow wheel", tick * p.wheel_size
            self.hit(f"deadline at the tick ({where})", deadline == clock + tick)
            self.hit(f"deadline at the tick ±1 ms ({where})", abs(deadline - clock - tick) == 1)
            self.hit(f"deadline at the interval ({where})", deadline == clock + interval)
            self.hit(f"deadline at the interval ±1 ms ({where})", abs(deadline - clock - interval) == 1)
            self.hit(f"deadline at the interval ±1 tick ({where})",
                     tick > 1 and abs(deadline - clock - interval) == tick)
            if deadline == clock + interval:
                self.hit("overflow wheel created at the interval", created and level == len(before.clocks) - 1)
                if target in after:
                    self.at_interval[target] = (where, deadline)
            if deadline < clock + interval:
                return  # placed at this level (or due): the levels above never see it

    def record_purgatory(self, model: Model, command: v.Command, observation: v.Observation, before: Before) -> None:
        for event in observation.events:
            if isinstance(event, v.Complete):
                self.hit(f"completed via {event.via}")
        self.hit("stale entry", any(op.completed for ops in model.purgatory.watchers.values() for op in ops))
        if isinstance(command, v.Watch) and observation.error is None:
            was_completed, tries_before = before.op or (False, 0)
            if before.op is not None:
                self.hit("re-watched completed op" if was_completed else "re-watched op")
            self.hit("ready on second try",
                     observation.result is True and model.ops[command.op].try_calls - tries_before == 2)
            self.hit("watched on duplicate keys", len(set(command.keys)) < len(command.keys) and not was_completed)
            self.shards_hit.update(self.shards.shard(key) for key in command.keys if key in model.purgatory.watchers)
        if isinstance(command, (v.Check, v.CancelKey)):
            self.shards_hit.add(self.shards.shard(command.key))
        self.hit("stale entry dropped by check", isinstance(command, v.Check) and before.stale_on_key)
        self.hit("cancel_key of a live op", isinstance(command, v.CancelKey) and
                 any(not model.ops[op].completed for op in observation.result))
        if isinstance(command, v.Advance):
            # the trigger compared the estimate before the step with the timer's size after the drain
            pressure = before.estimated_total - model.timer.size() - model.params.purge_interval
            purges = [e for e in observation.events if isinstance(e, v.Purge)]
            self.hit("purge fired", bool(purges))
            self.hit("purge of nothing", bool(purges) and purges[0].count == 0)
            self.hit("purge fired at the boundary", bool(purges) and pressure == 1)
            # with purge_interval 0, holding at the boundary only means nothing has completed
            self.hit("purge held at the boundary", not purges and pressure == 0 and model.params.purge_interval > 0)


def asked_deadline(model: Model, command: v.Command, observation: v.Observation, before: Before) -> int | None:
    """The deadline a timer_add or watch asked for, accepted or rejected with delay_out_of_range."""
    if not isinstance(command, (v.TimerAdd, v.Watch)) or observation.error not in (None, "delay_out_of_range"):
        return None
    return before.now_ms + (command.delay_ms if isinstance(command, v.TimerAdd) else model.ops[command.op].delay_ms)


def at_level_boundary(time_ms: int, tick_ms: int, wheel_size: int) -> bool:
    """``time_ms`` is a multiple of a level's interval (tick * wheel_size^k, k >= 1), or a millisecond either side."""
    interval = tick_ms * wheel_size
    while interval <= time_ms + 1:
        if (time_ms + 1) % interval <= 2:
            return True
        interval *= wheel_size
    return False


def state_shape(model: Model) -> tuple:
    """The model's state up to renaming ids and shifting time: per wheel level its lag behind the clock and its
    non-empty buckets by slot relative to the current one; per watch list its entries' op states; how far the
    purge trigger is from firing. Only integers and booleans, so hashes are stable across processes."""
    timer = model.timer
    wheels = []
    for wheel in timer.timing_wheel.levels():
        current = wheel.current_time_ms // wheel.tick_ms
        lag = min((timer.now_ms - wheel.current_time_ms) // wheel.tick_ms, 2)
        buckets = tuple(sorted(((slot - current) % wheel.wheel_size, len(bucket))
                               for slot, bucket in enumerate(wheel.buckets) if bucket.entries))
        wheels.append((lag, buckets))

    def op_state(op) -> tuple:
        tries_to_go = -1 if op.ready_on is None else max(op.ready_on - op.try_calls, 0)
        ready = -1 if op.ready is None else int(op.ready)  # not set, cleared, set
        return op.completed, ready, tries_to_go, op.entry is not None

    purgatory = model.purgatory
    lists = tuple(sorted(tuple(op_state(op) for op in ops) for ops in purgatory.watchers.values()))
    pressure = purgatory.estimated_total_operations - timer.size() - purgatory.purge_interval
    return model.params.tick_ms, model.params.wheel_size, tuple(wheels), lists, max(min(pressure, 1), -2)
