"""The contract: properties every purgatory or timer must have, checkable on any observed trace.

The exact level asks an implementation to behave like Kafka step by step. The contract level asks only what a user of
a purgatory relies on, so a timer or purgatory that is not a Kafka clone (another bucket layout, eager cleanup, no
wheel at all) can be checked too. `ContractMonitor` reads commands and the observations a system gave for them, and
keeps only what the observations imply, never the system's internals. Each property is stated once:

  exactly_once     An operation completes at most once, whatever the route; onExpiration runs only right after
                   the operation's own completion by expiry. A timer task runs at most once per scheduling.
  justified        An operation completes by try/check only if its condition could hold (set_ready was seen, or
                   ready_on was given); by check only through a key it is watched on; by force only in a force of
                   that op; by expiry only while it is in the timer. watch, try and force return True exactly when
                   they completed the op themselves; a watch with keys inside the domain answers no error. A check
                   never calls tryComplete on a completed op (stale_try, KAFKA-17848).
  no_lost_wakeup   An operation whose condition is known to hold (set_ready seen) is completed by a check of a key
                   it is watched on, or by a direct try.
  on_time          Nothing fires before the earliest time its declared firing window allows, and nothing that is
                   still pending survives an advance to the latest time it allows (see `Declarations`; Kafka's
                   window: from the start of its tick, floor(E / tick) * tick, so at most tick - 1 ms early and never
                   early with tick 1, and fired by an advance to E).
  domain           A timer_add or watch is rejected with delay_out_of_range exactly when its deadline lies outside
                   the declared delay domain, and a rejected one fires nothing. An input the declarations leave
                   undefined ends the judgement: nothing after it is judged. A watch with no keys is rejected with
                   empty_keys and fires nothing (Kafka rejects an empty key list); no other command answers an
                   error.
  watcher_cleanup  A completed operation leaves a key's list no later than the next check of that key (except the
                   earlier entries of an op listed twice that this very check completed at a later visit), a cancel
                   of that key, or the next purge: watched() lies between the live entries and the live entries plus
                   the completed entries not yet due for removal; cancel_key returns exactly the key's entries.
  purge_rule       A purge removes every completed entry from every list.
  counters         delayed() and size() equal the entries pending in the timer; shutdown reports exactly them
                   (with lazy_size declared: also, until the next advance, entries that left the timer since the
                   last one).

What a system promises is declared in its hello (`Declarations`, specs/protocol.md §3); the defaults are Kafka's
behaviour. Declarations relax or tighten on_time, domain and counters only, and only at the contract level: the exact
level is Kafka's behaviour whatever a system declares, except the Kafka release it follows (``kafka_version``),
whose rules (`model/releases.py`) both levels apply.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, defaultdict
from typing import Callable, Iterator

import attrs

from kpurgatory.model import vocabulary as v
from kpurgatory.model.releases import Release

PROPERTIES = ("exactly_once", "justified", "no_lost_wakeup", "on_time", "domain", "watcher_cleanup", "purge_rule",
              "counters")


@attrs.frozen
class Violation:
    prop: str
    message: str


#: the firing windows a system may declare (`Declarations.earliest_ms`, `Declarations.latest_ms`)
FIRING = ("kafka", "never_early_up_to_tick_late", "min_one_tick")
#: how a delay outside the declared domain is treated, and a negative delay (which may also run at once)
OUTSIDE = ("rejected", "undefined")
NEGATIVE = ("run_at_once", *OUTSIDE)


def _release_version(instance, attribute, value) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{attribute.name} must be a Kafka release number such as \"3.7.1\", got {value!r}")
    Release.parse(value)  # its ValueError says what is wrong


def _deadline(instance, attribute, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= v.LONG_MAX:
        raise ValueError(f"{attribute.name} must be an integer in [0, Long.MAX_VALUE], got {value!r}")


#: how a system picks a key's watcher shard: Java's String.hashCode of the key's name (Kafka), or no shards at all
SHARD_HASHES = ("java-string-hashcode", "none")


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: h = 31 * h + c over the UTF-16 code units, in 32-bit two's complement."""
    units = text.encode("utf-16-be", "surrogatepass")  # a lone surrogate is one code unit, as in Java
    h = 0
    for at in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[at:at + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@attrs.frozen
class WatcherShards:
    """How a purgatory spreads its watch lists: ``count`` lists, a key's chosen by ``hash`` of its name. Kafka (from
    2.2.0, KAFKA-6431): 512 lists, Math.abs(key.hashCode() % 512). Not a promise the contract judges: it tells
    exploration which keys reach which lists, so that every list is used."""

    count: int = attrs.field(default=512)
    hash: str = attrs.field(default="java-string-hashcode", validator=attrs.validators.in_(SHARD_HASHES))

    @count.validator
    def _count(self, attribute, value) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65536:
            raise ValueError(f"watcher_shards.count must be an integer in [1, 65536], got {value!r}")
        if self.hash == "none" and value != 1:
            raise ValueError(f"watcher_shards.count must be 1 when the hash is \"none\", got {value}")

    def shard(self, key: str) -> int:
        """The list ``key`` lands in (0 for a system without shards). Java's % keeps the dividend's sign, so
        Math.abs(h % count) is |h| mod count."""
        return 0 if self.hash == "none" else abs(java_string_hash(key)) % self.count


def _watcher_shards(value) -> WatcherShards:
    """A hello's ``{"count": ..., "hash": ...}`` (either may be left out), or a `WatcherShards` as it is."""
    if isinstance(value, WatcherShards):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"watcher_shards must be an object with count and hash, got {value!r}")
    return WatcherShards(**value)


def _allowance(instance, attribute, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"real_time.{attribute.name} must be a whole number of milliseconds, 0 or more, got "
                         f"{value!r}")


@attrs.frozen
class RealTime:
    """The real-time allowances of a system on a real clock (`Declarations.real_time`): how much earlier and later
    than the virtual-clock bounds of on_time its ops may expire."""

    clock_granularity_ms: int = attrs.field(default=1, validator=_allowance)
    executor_lag_ms: int = attrs.field(default=1000, validator=_allowance)
    reaper_ms: int = attrs.field(default=200, validator=_allowance)

    @property
    def early_ms(self) -> int:
        """How long before the start of its deadline's tick an op may expire."""
        return self.clock_granularity_ms

    @property
    def late_ms(self) -> int:
        """How long after its deadline an op may still be pending."""
        return self.clock_granularity_ms + self.executor_lag_ms


def _real_time(value) -> RealTime | None:
    """A hello's or header's ``{"clock_granularity_ms": ..., "executor_lag_ms": ..., "reaper_ms": ...}`` (any may be
    left out), a `RealTime` as it is, or None (the virtual clock)."""
    if value is None or isinstance(value, RealTime):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"real_time must be an object with clock_granularity_ms, executor_lag_ms and reaper_ms, got "
                         f"{value!r}")
    unknown = sorted(set(value) - set(attrs.fields_dict(RealTime)))
    if unknown:
        raise ValueError(f"real_time.{unknown[0]} is not an allowance: the fields are "
                         f"{', '.join(attrs.fields_dict(RealTime))}")
    return RealTime(**value)


@attrs.frozen
class Declarations:
    """What a system promises, declared in its hello; the defaults are Kafka's behaviour, as the model has it.

    Each allowance, for an entry scheduled at time A with delay d, so expiration E = A + d, on a wheel of ``tick``:

      firing               when the entry may fire: no earlier than `earliest_ms`, and no longer pending after an
                           advance to `latest_ms` or later.
                             kafka                        from the start of E's tick, floor(E / tick) * tick (up to
                                                          tick - 1 ms early), until E;
                             never_early_up_to_tick_late  from E, until max(E, A) + tick: a wheel that expires a slot
                                                          once the clock has left it (kernel, Netty);
                             min_one_tick                 Kafka's window, but until max(E, A + tick): a delay shorter
                                                          than a tick runs at the next tick, not on add.
      lazy_size            size(), delayed() and shutdown may also count entries that left the timer (ran, expired,
                           were cancelled or completed) since the last advance: a due entry is evicted lazily.
      max_deadline_ms      the latest deadline E accepted (Kafka, the model: Long.MAX_VALUE; at exactly
                           Long.MAX_VALUE the model accepts and fires it when the clock gets there).
      beyond_max_deadline  E > max_deadline_ms is "rejected" (error delay_out_of_range, nothing changes) or
                           "undefined" (the system promises nothing: the contract stops judging there, and generated
                           runs never send it).
      negative_delays      d < 0 "run_at_once" (E is in the past: due at once, as in Kafka), "rejected" or
                           "undefined" (as above).
      runs_due_on_update   a timer_cancel of a task, or a timer_add of a task already pending, may run its pending
                           entry inside that call when the entry is due (its firing window open): Caffeine's wheel
                           expires a due entry when a cancel or re-add touches it. A re-add's new entry stays pending.
      watcher_shards       how many watch lists the purgatory has and how a key's list is picked (`WatcherShards`):
                           not judged, but generated runs draw keys that reach every list.
      kafka_version        the Kafka release the system follows (a port declares the one it ports): the model
                           behaves as that release, at the exact level too, and the contract allows what its rules
                           allow (an op watched again after it completed may be listed again before KAFKA-18027).
      real_time            None: the system runs on the virtual clock, which only its advances move. Else it runs
                           on a real clock (a recording of a broker, ``kpurgatory record-broker``'s), and its
                           allowances (`RealTime`) widen on_time of a concurrent history: a real timer fires on the
                           wall clock, from another thread than the one that advanced it.
                             clock_granularity_ms  how far apart the clock the recording reads and the clock the
                                                   timer reads may be. Kafka's timer reads System.nanoTime in whole
                                                   milliseconds, the agent reads System.nanoTime: 1 ms. An op may
                                                   expire this much before the start of its deadline's tick, and is
                                                   given this much more before it counts as late.
                             executor_lag_ms       how long after its deadline an op may still wait to expire: the
                                                   reaper hands a due bucket's ops to the timer's one executor
                                                   thread, which runs them one after another, after the reaper's
                                                   advance returned; a garbage collection or a loaded machine delays
                                                   both (1000 ms). An op whose deadline passed more than
                                                   clock_granularity_ms + executor_lag_ms before a point of the
                                                   history must have completed by then.
                             reaper_ms             the reaper's advanceClock timeout (Kafka: 200 ms): when nothing
                                                   falls due, a purge check still runs at least this often. Recorded
                                                   for the report; the watcher property judges the watch lists at
                                                   each purge the history shows, whenever it ran.
    """

    firing: str = attrs.field(default="kafka", validator=attrs.validators.in_(FIRING))
    lazy_size: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    max_deadline_ms: int = attrs.field(default=v.LONG_MAX, validator=_deadline)
    beyond_max_deadline: str = attrs.field(default="rejected", validator=attrs.validators.in_(OUTSIDE))
    negative_delays: str = attrs.field(default="run_at_once", validator=attrs.validators.in_(NEGATIVE))
    runs_due_on_update: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    watcher_shards: WatcherShards = attrs.field(factory=WatcherShards, converter=_watcher_shards)
    kafka_version: str | None = attrs.field(default=None, validator=attrs.validators.optional(_release_version))
    real_time: RealTime | None = attrs.field(default=None, converter=_real_time)

    @property
    def release(self) -> Release:
        """The Kafka release the system follows: the model then behaves as that release did (`model/releases.py`)."""
        return Release.parse(self.kafka_version)

    def earliest_ms(self, expiration_ms: int, tick_ms: int) -> int:
        if self.firing == "never_early_up_to_tick_late":
            return expiration_ms
        return expiration_ms - expiration_ms % tick_ms

    def latest_ms(self, expiration_ms: int, scheduled_ms: int, tick_ms: int) -> int:
        if self.firing == "never_early_up_to_tick_late":
            return max(expiration_ms, scheduled_ms) + tick_ms
        if self.firing == "min_one_tick":
            return max(expiration_ms, scheduled_ms + tick_ms)
        return expiration_ms

    def treatment(self, now_ms: int, delay_ms: int) -> str:
        """How a delay scheduled at ``now_ms`` is treated: "accepted", "rejected" or "undefined"."""
        if now_ms + delay_ms > self.max_deadline_ms:
            return self.beyond_max_deadline
        if delay_ms < 0 and self.negative_delays != "run_at_once":
            return self.negative_delays
        return "accepted"

    def within_domain(self, now_ms: int, delay_ms: int) -> bool:
        """The system promises something for this delay (accepted, or rejected as declared)."""
        return self.treatment(now_ms, delay_ms) != "undefined"


KAFKA = Declarations()


@attrs.define(eq=False)
class Pending:
    """A scheduled timer entry as the contract sees it (compared by identity: a re-add is a new entry)."""

    expiration_ms: int
    scheduled_ms: int


@attrs.define
class OpState:
    ready_on: int | None
    delay_ms: int
    #: what the last set_ready said (None: none yet, so ready_on decides)
    ready: bool | None = None
    completed: bool = False
    #: when the op was first watched (releases before KAFKA-3470 fix its deadline then)
    built_ms: int | None = None

    def deadline_ms(self, now_ms: int, release: Release) -> int:
        """Where a watch puts the op in the timer (unless a try completes it)."""
        built = now_ms if self.built_ms is None or release.has("KAFKA-3470") else self.built_ms
        return built + self.delay_ms

    def may_complete_by_condition(self) -> bool:
        return self.ready if self.ready is not None else self.ready_on is not None


@attrs.define
class ContractMonitor:
    profile: str
    params: v.Params
    declarations: Declarations = KAFKA
    now_ms: int = attrs.field(init=False)
    ops: dict[str, OpState] = attrs.field(factory=dict)
    #: what is pending in the timer: ops (purgatory profile) and tasks (timer profile) by id
    delayed_ops: dict[str, Pending] = attrs.field(factory=dict)
    tasks: dict[str, Pending] = attrs.field(factory=dict)
    #: (latest time, order, id, entry) of every scheduling; an entry still pending when that time has passed is late
    deadlines: list = attrs.field(factory=list)
    #: entries that left the timer since the last advance (what lazy_size lets size() and delayed() still count)
    departed: list[tuple[str, Pending]] = attrs.field(factory=list)
    #: False once an input the declarations leave undefined was seen: nothing after it is judged
    judging: bool = True
    _order: Iterator[int] = attrs.field(factory=itertools.count)
    #: live watch entries per key: ops not completed (a multiset: duplicates count)
    live: defaultdict[str, Counter] = attrs.field(factory=lambda: defaultdict(Counter))
    #: per key, completed entries that may still be listed (a system may have removed them earlier)
    stale: defaultdict[str, Counter] = attrs.field(factory=lambda: defaultdict(Counter))
    violations: list[Violation] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        self.now_ms = self.params.start_ms

    # --- entry point ------------------------------------------------------------------------------------------

    def observe(self, command: v.Command, observation: v.Observation) -> list[Violation]:
        """Check one step; returns the violations it revealed (also accumulated in ``violations``)."""
        before = len(self.violations)
        if not self.judging:
            return []
        if observation.error is not None and not isinstance(command, (v.TimerAdd, v.Watch)):
            self.fail("domain", f"{command.name} answered the error {observation.error}, which only timer_add and "
                                f"watch answer")
        handler: Callable = getattr(self, f"_on_{command.name}")
        handler(command, observation)
        return self.violations[before:]

    def fail(self, prop: str, message: str) -> None:
        self.violations.append(Violation(prop, message))

    # --- shared pieces ----------------------------------------------------------------------------------------

    def check_not_early(self, what: str, entry: Pending) -> None:
        earliest = self.declarations.earliest_ms(entry.expiration_ms, self.params.tick_ms)
        if self.now_ms < earliest:
            window = ("the start of its tick" if self.declarations.firing == "kafka" else
                      f"the earliest its declared firing window ({self.declarations.firing}) allows,")
            self.fail("on_time", f"{what} fired by time {self.now_ms}, before {window} {earliest} "
                                 f"(expiration {entry.expiration_ms})")

    def check_domain(self, command: v.Command, delay_ms: int, observation: v.Observation) -> bool:
        """The domain property for a command scheduling ``delay_ms`` from now; True when it was accepted."""
        treatment = self.declarations.treatment(self.now_ms, delay_ms)
        rejected = observation.error == "delay_out_of_range"
        if treatment == "undefined":
            self.judging = False
        elif treatment == "rejected" and not rejected:
            self.fail("domain", f"{command.name} with delay_ms={delay_ms} at {self.now_ms} (deadline "
                                f"{self.now_ms + delay_ms}) is outside the declared domain and must be rejected "
                                f"with delay_out_of_range")
        elif treatment == "accepted" and rejected:
            self.fail("domain", f"{command.name} with delay_ms={delay_ms} at {self.now_ms} was rejected with "
                                f"delay_out_of_range, but its deadline {self.now_ms + delay_ms} is inside the "
                                f"declared domain")
        elif rejected and observation.events:
            self.fail("domain", f"a rejected {command.name} caused events")
        return treatment == "accepted" and not rejected

    def expect_result(self, prop: str, command: v.Command, observed: v.Json, expected: v.Json) -> None:
        if observed != expected:
            self.fail(prop, f"{command.name} returned {observed!r}; the observations imply {expected!r}")

    def pending_in_timer(self) -> list[str]:
        return sorted([*self.delayed_ops, *self.tasks])

    def schedule(self, pending: dict[str, Pending], name: str, expiration_ms: int) -> None:
        self.unschedule(pending, name)
        entry = pending[name] = Pending(expiration_ms, self.now_ms)
        latest = self.declarations.latest_ms(expiration_ms, self.now_ms, self.params.tick_ms)
        heapq.heappush(self.deadlines, (latest, next(self._order), name, entry))

    def unschedule(self, pending: dict[str, Pending], name: str) -> Pending | None:
        """Take ``name``'s entry out of the timer, if it has one (a lazy timer may count it until the next advance)."""
        entry = pending.pop(name, None)
        if entry is not None:
            self.departed.append((name, entry))
        return entry

    def check_counter(self, command: v.Command, observed: v.Json) -> None:
        """counters: size() or delayed() is the number of pending entries (plus departed ones, when lazy)."""
        pending = len(self.pending_in_timer())
        lazy = len(self.departed) if self.declarations.lazy_size else 0
        if not isinstance(observed, int) or isinstance(observed, bool) or not pending <= observed <= pending + lazy:
            expected = pending if not lazy else f"between {pending} and {pending + lazy} (lazy_size)"
            self.fail("counters", f"{command.name} returned {observed!r}; the observations imply {expected}")

    def overdue(self) -> list[str]:
        """Entries whose expiration has passed ``now`` and which are still pending, each reported once."""
        late = []
        while self.deadlines and self.deadlines[0][0] <= self.now_ms:
            _, _, name, entry = heapq.heappop(self.deadlines)
            if self.delayed_ops.get(name) is entry or self.tasks.get(name) is entry:
                late.append(name)
        return late

    def apply_events(self, command: v.Command, observation: v.Observation,
                     due: dict[str, Pending] | None = None) -> list[v.Complete]:
        """Apply every event in order, checking exactly_once, justified and on_time; returns the completions.
        ``due``: entries the command took out of the timer that may still run in it, once each
        (``runs_due_on_update``)."""
        completions = []
        events = list(observation.events)
        due = dict(due or {})
        for index, event in enumerate(events):
            if self.profile == "timer" and not isinstance(event, v.Run):
                self.fail("justified", f"{event.kind} during {command.name}: a timer's only event is run")
            elif isinstance(event, v.Run) and due.pop(event.task, None) is not None:
                continue
            elif isinstance(event, v.Run):
                pending = self.unschedule(self.tasks, event.task)
                if pending is None:
                    self.fail("exactly_once", f"task {event.task!r} ran but was not pending")
                else:
                    self.check_not_early(f"task {event.task!r}", pending)
            elif isinstance(event, v.Complete):
                completions.append(event)
                self.complete(command, event)
            elif isinstance(event, v.Expire):
                previous = events[index - 1] if index else None
                if previous != v.Complete(event.op, "expire"):
                    self.fail("exactly_once", f"onExpiration of {event.op!r} not right after its completion by expiry")
            elif isinstance(event, v.Purge):
                self.purge(command)
            elif isinstance(event, v.StaleTry):
                self.fail("justified", f"{command.name} called tryComplete on {event.op!r}, already completed "
                                       f"(KAFKA-17848)")
        return completions

    def complete(self, command: v.Command, event: v.Complete) -> None:
        op = self.ops.get(event.op)
        if op is None:
            self.fail("justified", f"completion of {event.op!r}, which was never watched")
            return
        if op.completed:
            self.fail("exactly_once", f"{event.op!r} completed a second time (via {event.via})")
            return
        if event.via in ("try", "check") and not op.may_complete_by_condition():
            self.fail("justified", f"{event.op!r} completed via {event.via} but its condition "
                                   + ("had been cleared" if op.ready is False else "never held"))
        if not v.may_complete_via(command, event):
            self.fail("justified", f"{event.op!r} completed via {event.via} during {command.name}")
        elif event.via == "check" and not self.live.get(command.key, {}).get(event.op):
            self.fail("justified", f"{event.op!r} completed via check of {command.key!r}, not a key it is watched on")
        pending = self.unschedule(self.delayed_ops, event.op)
        if event.via == "expire":
            if pending is None:
                self.fail("justified", f"{event.op!r} expired but was not in the timer")
            else:
                self.check_not_early(f"op {event.op!r}", pending)
        op.completed = True
        for key, entries in self.live.items():  # its entries turn stale
            if entries.get(event.op):
                self.stale[key][event.op] += entries.pop(event.op)

    def purge(self, command: v.Command) -> None:
        if not isinstance(command, v.Advance):
            self.fail("purge_rule", f"a purge during {command.name}; purges run only after a timer advance")
        self.stale.clear()

    def watch_entries(self, key: str) -> Counter:
        return self.live.get(key, Counter()) + self.stale.get(key, Counter())

    # --- timer profile ----------------------------------------------------------------------------------------

    def due_on_update(self, task: str) -> dict[str, Pending]:
        """The pending entry of ``task`` that a cancel or re-add may run, if the system declares it may and the
        entry is due."""
        entry = self.tasks.get(task)
        if not self.declarations.runs_due_on_update or entry is None:
            return {}
        due = self.declarations.earliest_ms(entry.expiration_ms, self.params.tick_ms) <= self.now_ms
        return {task: entry} if due else {}

    def _on_timer_add(self, command: v.TimerAdd, observation: v.Observation) -> None:
        due = self.due_on_update(command.task)
        if self.check_domain(command, command.delay_ms, observation):
            if observation.error is not None:
                self.fail("domain", f"timer_add of {command.task!r} answered the error {observation.error}, though "
                                    f"its deadline is inside the declared domain")
            self.schedule(self.tasks, command.task, self.now_ms + command.delay_ms)
        elif not self.judging:
            return
        else:
            due = {}
        self.apply_events(command, observation, due)

    def _on_timer_cancel(self, command: v.TimerCancel, observation: v.Observation) -> None:
        due = self.due_on_update(command.task)
        self.unschedule(self.tasks, command.task)
        self.apply_events(command, observation, due)

    # --- purgatory profile ------------------------------------------------------------------------------------

    def _on_watch(self, command: v.Watch, observation: v.Observation) -> None:
        op = self.ops.get(command.op)
        if op is None:  # the caller built the op; a rejected watch leaves it unwatched but usable
            op = self.ops[command.op] = OpState(command.ready_on, command.delay_ms or 0, built_ms=self.now_ms)
        if not command.keys:
            if observation.error != "empty_keys" or observation.events:
                self.fail("domain", f"a watch with no keys must be answered with the error empty_keys and no "
                                    f"events; got {'error ' + observation.error if observation.error else 'no error'}"
                                    f" and {len(observation.events)} events")
            return
        if not self.check_domain(command, op.delay_ms, observation):
            if self.judging:
                self.apply_events(command, observation)
            return
        if observation.error is not None:
            self.fail("justified", f"watch of {command.op!r} on {list(command.keys)} answered the error "
                                   f"{observation.error}, though its deadline is inside the declared domain")
            self.apply_events(command, observation)
            return
        was_completed = op.completed
        if was_completed and not self.declarations.release.has("KAFKA-18027"):
            for key in command.keys:  # re-listed as a stale entry (before KAFKA-8334 the loop gave up instead)
                self.stale[key][command.op] += 1
        if not was_completed:
            # watched under every key; if a try completes it in this call, complete() turns these entries into
            # possibly-stale ones, since a system that succeeds on its first try never lists them
            for key in command.keys:
                self.live[key][command.op] += 1
            self.schedule(self.delayed_ops, command.op, op.deadline_ms(self.now_ms, self.declarations.release))
        completions = self.apply_events(command, observation)
        completed_here = any(c.op == command.op and c.via == "try" for c in completions)
        self.expect_result("justified", command, observation.result, completed_here)

    def _on_set_ready(self, command: v.SetReady, observation: v.Observation) -> None:
        self.ops[command.op].ready = command.ready
        self.apply_events(command, observation)

    def _on_check(self, command: v.Check, observation: v.Observation) -> None:
        listed = dict(self.live.get(command.key, {}))  # before the completions below take entries out
        candidates = [op_id for op_id in listed if self.ops[op_id].ready]
        completions = self.apply_events(command, observation)
        completed_here = {c.op for c in completions if c.via == "check"}
        for op_id in candidates:
            if op_id not in completed_here:
                self.fail("no_lost_wakeup", f"check({command.key!r}) did not complete {op_id!r}, whose condition "
                                            f"holds and which is watched on that key")
        self.expect_result("justified", command, observation.result, len(completed_here))
        # the walk removes every completed entry it visits; an op listed n times and completed at a later visit
        # keeps its n - 1 earlier (already visited) entries
        kept = {op_id: listed[op_id] - 1 for op_id in completed_here if listed.get(op_id, 0) > 1}
        if kept:
            self.stale[command.key] = Counter(kept)
        else:
            self.stale.pop(command.key, None)

    def _on_cancel_key(self, command: v.CancelKey, observation: v.Observation) -> None:
        live = self.live.pop(command.key, Counter())
        stale = self.stale.pop(command.key, Counter())
        returned = Counter(observation.result or [])
        if not (live <= returned <= live + stale):
            self.fail("watcher_cleanup", f"cancel_key({command.key!r}) returned {sorted(returned.elements())}; "
                                         f"the key's entries are {sorted(live.elements())} plus possibly "
                                         f"{sorted(stale.elements())} completed ones")
        for op_id in live:
            self.unschedule(self.delayed_ops, op_id)
        self.apply_events(command, observation)

    def _on_force(self, command: v.Force, observation: v.Observation) -> None:
        was_completed = self.ops[command.op].completed
        self.apply_events(command, observation)
        self.expect_result("justified", command, observation.result, not was_completed)

    def _on_try(self, command: v.Try, observation: v.Observation) -> None:
        op = self.ops[command.op]
        must_complete = op.ready and not op.completed
        completions = self.apply_events(command, observation)
        completed_here = any(c.op == command.op for c in completions)
        if must_complete and not completed_here:
            self.fail("no_lost_wakeup", f"try({command.op!r}) did not complete it although its condition holds")
        self.expect_result("justified", command, observation.result, completed_here)

    def _on_cancel(self, command: v.Cancel, observation: v.Observation) -> None:
        self.unschedule(self.delayed_ops, command.op)
        self.apply_events(command, observation)

    def _on_watched(self, command: v.Watched, observation: v.Observation) -> None:
        live = sum(sum(entries.values()) for entries in self.live.values())
        stale = sum(sum(entries.values()) for entries in self.stale.values())
        if not live <= (observation.result or 0) <= live + stale:
            self.fail("watcher_cleanup", f"watched() = {observation.result}; expected between {live} live entries "
                                         f"and {live + stale} (with completed entries not yet due for removal)")
        self.apply_events(command, observation)

    def _on_delayed(self, command: v.Delayed, observation: v.Observation) -> None:
        self.apply_events(command, observation)
        self.check_counter(command, observation.result)

    # --- both profiles ----------------------------------------------------------------------------------------

    def _on_advance(self, command: v.Advance, observation: v.Observation) -> None:
        self.now_ms = command.to_ms
        self.apply_events(command, observation)
        self.departed.clear()
        overdue = self.overdue()
        if overdue:
            self.fail("on_time", f"still pending after advance to {self.now_ms}, past their expiration"
                                 + ("" if self.declarations.firing == "kafka" else
                                    f" and the lateness their declared firing window ({self.declarations.firing}) "
                                    f"allows") + f": {', '.join(sorted(overdue))}")

    def _on_size(self, command: v.Size, observation: v.Observation) -> None:
        self.apply_events(command, observation)
        self.check_counter(command, observation.result)

    def _on_shutdown(self, command: v.Shutdown, observation: v.Observation) -> None:
        self.apply_events(command, observation)
        reported, pending = sorted(observation.result or []), self.pending_in_timer()
        departed = {name for name, _ in self.departed} if self.declarations.lazy_size else set()
        if not (set(pending) <= set(reported) <= set(pending) | departed and len(set(reported)) == len(reported)):
            self.expect_result("counters", command, reported, pending)

    def _on_wheel(self, command: v.Wheel, observation: v.Observation) -> None:
        self.apply_events(command, observation)

    def _on_delay_queue(self, command: v.DelayQueue, observation: v.Observation) -> None:
        self.apply_events(command, observation)

    def _on_watcher_keys(self, command: v.WatcherKeys, observation: v.Observation) -> None:
        live = {key for key, entries in self.live.items() if +entries}
        stale = {key for key, entries in self.stale.items() if +entries}
        listed = set(observation.result or ())
        if not live <= listed <= live | stale:
            self.fail("watcher_cleanup", f"watcher_keys() = {sorted(listed)}; expected the keys with live entries "
                                         f"{sorted(live)}, plus possibly {sorted(stale - live)} (completed entries "
                                         f"not yet due for removal)")
        self.apply_events(command, observation)
