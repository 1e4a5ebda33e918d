"""What a failure is: its signature, and whether it is one of Kafka's known misbehaviours (a *finding*).

A signature groups the failures that are the same bug: the property a contract violation breaks; the command and the
field (result, error, events) in which a system differs from the model; or how a system failed to answer (raised an
exception of some class, crashed, hung, broke the protocol) and in which command. `kpurgatory check` reports one
shrunk counterexample per signature and, once a signature is reported, treats runs that fail with it as passing, so
exploration goes on to the next bug.

Kafka's own timer misbehaves at the edge of the model's domain, where its ``long`` arithmetic wraps (the model's
choice there is written down in ``model/timer.py``). A system that does what Kafka does there has not diverged from
Kafka; it has Kafka's bug. To know what Kafka does, `KafkaShadow` runs Kafka's timer beside the model's in Java
``long`` arithmetic (`specs.javalong.PY`), from the state *before* each step: an add that wraps a window end, an
advance whose bucket re-inserts its entries into itself, a read-out of wrapped levels. `FINDINGS` names each
behaviour by that input class (an `Edge`) and the system's outcome on it, judged by exception *family* (a divide by
zero, an index out of bounds, a stack overflow, in the words of Java, Python, Go, Rust or JavaScript) or by a hang; a
failure that matches one is reported as ``Kafka finding (NAME): …`` with its own shrunk trace, apart from failures,
and does not fail the check unless asked to (``--fail-on-findings``).
"""

from __future__ import annotations

import heapq
import itertools
import re
from typing import Callable

import attrs

from kpurgatory.conformance.adapters.subprocess import (AdapterCrashed, AdapterError, AdapterFailed, AdapterGarbage,
                                                         AdapterStopped, AdapterTimedOut, ProtocolViolation,
                                                         SystemCrashed, SystemTimedOut)
from kpurgatory.conformance.check.compare import Difference
from kpurgatory.model import Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.releases import FIRST, version_key
from kpurgatory.model.timer import SystemTimer, TimerTaskEntry, TimingWheel
from kpurgatory.specs.javalong import PY


@attrs.frozen(order=True)
class Signature:
    """``kind`` is one of differs, breaks, raised, hung, finding or an adapter error's kind (adapter crashed, …);
    ``command`` is the command that failed (empty when the kind alone names the bug: a broken property, a finding);
    ``detail`` is the field, property, exception class or finding name."""

    kind: str
    command: str
    detail: str

    def __str__(self) -> str:
        if self.kind == "differs":
            return f"{self.command}: {self.detail} differs from the model"
        if self.kind == "breaks":
            return f"breaks {self.detail}"
        if self.kind == "finding":
            return f"Kafka finding {self.detail}"
        return f"{self.command}: {self.kind} {self.detail}".rstrip()

    @property
    def slug(self) -> str:
        """The signature as a file-name part."""
        return re.sub(r"[^a-z0-9]+", "-", f"{self.kind} {self.command} {self.detail}".lower()).strip("-")


def failure_signature(command: v.Command, what) -> Signature:
    """The signature of the first failure of a step (a `Difference` or a contract `Violation`)."""
    if isinstance(what, Difference):
        return Signature("differs", command.name, what.field)
    return Signature("breaks", "", what.prop)


def error_signature(where: str, error: Exception) -> Signature:
    """The signature of a system that did not answer ``where`` (a command's name, or init)."""
    if isinstance(error, AdapterTimedOut):
        return Signature("hung", where, "")
    if isinstance(error, AdapterError):
        return Signature(error.kind, where, "")
    return Signature("raised", where, error.raised if isinstance(error, Recorded) else type(error).__name__)


class Recorded(Exception):
    """What an in-process system raised, as a counterexample recorded it ("Class: message"); ``raised`` is the
    exception's class."""

    def __init__(self, text: str):
        super().__init__(text)
        self.raised = text.partition(": ")[0]


#: the adapter errors a counterexample may record, each by the kind its text starts with
RECORDED_KINDS = (AdapterCrashed, SystemCrashed, AdapterTimedOut, AdapterStopped, SystemTimedOut, AdapterGarbage,
                  ProtocolViolation, AdapterFailed)
#: where an adapter error's text gives way to the adapter's stderr (`AdapterError`)
STDERR_TAIL = "\n--- adapter stderr (tail) ---\n"


def recorded_error(text: str) -> Exception:
    """A counterexample's record of how its system failed to answer (`codec.Step.system`, `str` of the error as
    check met it) as that error again, so that replaying the trace judges the failure, and names a finding, as the
    check did: an adapter error of the kind the text starts with, else what an in-process system raised."""
    for error in RECORDED_KINDS:
        if text.startswith(f"{error.kind}: "):
            detail, _, tail = text.removeprefix(f"{error.kind}: ").partition(STDERR_TAIL)
            return error(detail, tail)
    return Recorded(text)


# ---------------------------------------------------------------------------------------------------------------
# How a system failed: exception families, whatever the language
# ---------------------------------------------------------------------------------------------------------------

#: family -> what a system says when it fails that way (lower case): Java's exception classes and messages, Python's,
#: Go's and Rust's panics, JavaScript's errors. First match wins: JavaScript's stack overflow is a RangeError too.
FAMILIES: dict[str, tuple[str, ...]] = {
    "stack-overflow": ("stackoverflow", "stack overflow", "recursionerror", "maximum recursion depth",
                       "maximum call stack size exceeded", "overflowed its stack"),
    "out-of-memory": ("outofmemory", "out of memory", "memoryerror", "cannot allocate memory"),
    "divide-by-zero": ("/ by zero", "zerodivisionerror", "divide by zero", "division by zero", "modulo by zero",
                       "remainder with a divisor of zero"),
    "index-out-of-bounds": ("indexoutofbounds", "index out of range", "index out of bounds", "indexerror",
                            "rangeerror"),
}


def said(error: Exception) -> str:
    """What a failed system said: an in-process exception's class and message, the protocol's failure text (not the
    stderr tail, which may still hold an earlier run's failure), or a crashed adapter's exit and last words."""
    if isinstance(error, AdapterFailed):
        return error.detail
    if isinstance(error, AdapterError):
        return str(error)
    return str(error) if isinstance(error, Recorded) else f"{type(error).__name__}: {error}"


def family(error: Exception | None, families: dict[str, tuple[str, ...]] = FAMILIES) -> str | None:
    """The family of a failure: one of ``families`` (`FAMILIES`, or a vector tree's copy of them), ``hung`` for a
    call that timed out, else None. A bare ArithmeticException (a hot JVM may drop its message) is a division by zero
    unless it says overflow."""
    if error is None:
        return None
    if isinstance(error, AdapterTimedOut):
        return "hung"
    text = said(error).lower()
    for name, words in families.items():
        if any(word in text for word in words):
            return name
    if "arithmeticexception" in text and "overflow" not in text:
        return "divide-by-zero"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Kafka's timer in Java long arithmetic
# ---------------------------------------------------------------------------------------------------------------

#: levels an add's climb is followed: past them it fails, whether or not it would end, for Kafka's TimingWheel.add
#: recurses once a level and a stack of 3 MB or less does not hold this many frames (a JVM's default 1 MB holds about
#: 5,400). Within them a climb is followed to its end, or known endless once its ticks repeat (`climb_period`).
CLIMB_LIMIT = 1 << 14
#: levels of recursion any JVM stack holds: a climb that ends further up may succeed or overflow the system's stack
#: (the stack's size and the frames' decide), and either is Kafka's
STACK_SAFE_CLIMB = 2_000
ENDLESS_CLIMB = "an add climbs overflow wheels of wrapped intervals that never cover its deadline"
#: bucket releases in one advance before it counts as a livelock (a run holds at most a few dozen entries)
RELEASE_LIMIT = 10_000


class KafkaFailed(Exception):
    """Kafka's timer cannot do the step: ``kind`` is divide-by-zero, index-out-of-bounds, recursion or livelock."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


@attrs.define(eq=False)
class KafkaBucket:
    """A TimerTaskList: its slot, its expiration (-1 unused) and its entries, task -> expiration, in order."""

    slot: int
    expiration: int = -1
    entries: dict[str, int] = attrs.Factory(dict)


@attrs.define(eq=False)
class KafkaLevel:
    tick: int
    size: int
    current: int
    interval: int
    buckets: dict[int, KafkaBucket] = attrs.Factory(dict)


class KafkaTimer:
    """Kafka's SystemTimer, TimingWheel and TimerTaskList with every sum, product, quotient and remainder a Java
    ``long`` (`PY`): the climb to an overflow wheel, the bucket index and expiration, the clock advance of each level,
    and the flush that re-inserts a released bucket's entries until the bucket is empty. Where Kafka throws, recurses
    without end or never leaves a loop, `KafkaFailed` says which."""

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int):
        self.climbed = 0  # the most levels an add of the current step climbed above the first
        self.now = start_ms
        self.size = wheel_size
        self.levels = [self._level(tick_ms, start_ms)]
        self.queue: list[tuple[int, int, KafkaBucket]] = []
        self.offers = itertools.count()
        self.where: dict[str, KafkaBucket] = {}

    @classmethod
    def of(cls, timer: SystemTimer) -> KafkaTimer:
        """Kafka's timer in the model's state: the state it is in as long as no step made it compute a sum past
        Long.MAX_VALUE (`near_the_edge`)."""
        kafka = cls.__new__(cls)
        kafka.climbed = 0
        kafka.now, kafka.size, kafka.levels, kafka.where = timer.now_ms, timer.wheel_size, [], {}
        buckets: dict[int, KafkaBucket] = {}
        for wheel in timer.timing_wheel.levels():
            level = KafkaLevel(wheel.tick_ms, wheel.wheel_size, wheel.current_time_ms, PY.mul(wheel.tick_ms,
                                                                                              wheel.wheel_size))
            for slot, bucket in enumerate(wheel.buckets):
                if bucket.entries or bucket.expiration_ms != -1:
                    copy = buckets[id(bucket)] = level.buckets[slot] = KafkaBucket(slot, bucket.expiration_ms)
                    for entry in bucket.entries:
                        copy.entries[entry.task.task_id] = entry.expiration_ms
                        kafka.where[entry.task.task_id] = copy
            kafka.levels.append(level)
        kafka.queue = [(expiration, order, buckets[id(bucket)]) for expiration, order, bucket in timer.queue.heap]
        kafka.offers = itertools.count(max((order for _, order, _ in kafka.queue), default=0) + 1)
        return kafka

    def _level(self, tick: int, start: int) -> KafkaLevel:
        if tick == 0:
            raise KafkaFailed("divide-by-zero", "an overflow wheel's tick wrapped to 0: startMs % tickMs")
        return KafkaLevel(tick, self.size, PY.sub(start, PY.rem(start, tick)), PY.mul(tick, self.size))

    def add(self, task: str, expiration: int) -> bool:
        """SystemTimer.add of a fresh entry (the task's previous one leaves first); False when Kafka runs it at once."""
        self.cancel(task)
        return self._place(task, expiration)

    def cancel(self, task: str) -> None:
        bucket = self.where.pop(task, None)
        if bucket is not None:
            del bucket.entries[task]

    def _place(self, task: str, expiration: int) -> bool:
        """TimingWheel.add from the finest level up (Kafka recurses; a loop here, with `CLIMB_LIMIT`). After a
        `KafkaFailed` the timer's state is not Kafka's (nor is there one to be had: Kafka threw or never returned)."""
        foreseen = False
        for k in range(CLIMB_LIMIT):
            level = self.levels[k]
            self.climbed = max(self.climbed, k)
            if expiration < PY.add(level.current, level.tick):
                return False
            if expiration < PY.add(level.current, level.interval):
                virtual_id = PY.div(expiration, level.tick)
                slot = PY.rem(virtual_id, level.size)
                if not 0 <= slot < level.size:
                    raise KafkaFailed("index-out-of-bounds", f"bucket index {slot} of level {k + 1}")
                bucket = level.buckets.setdefault(slot, KafkaBucket(slot))
                bucket.entries[task] = expiration
                self.where[task] = bucket
                bucket_expiration = PY.mul(virtual_id, level.tick)
                if bucket.expiration != bucket_expiration:
                    bucket.expiration = bucket_expiration
                    heapq.heappush(self.queue, (bucket_expiration, next(self.offers), bucket))
                return True
            if k + 1 == len(self.levels):
                if level.current == 0 and not foreseen:
                    self._foresee_climb(k, expiration)
                    foreseen = True
                self.levels.append(self._level(level.interval, level.current))
        raise KafkaFailed("recursion", ENDLESS_CLIMB)

    def _foresee_climb(self, top: int, expiration: int) -> None:
        """Raise the failure that the climb past the top level ``top`` (whose current time is 0) ends in, if it
        fails, without building the levels: an endless climb would build `CLIMB_LIMIT` of them for each such add. A
        level created from a current time of 0 starts at 0 (0 - 0 % tick), so the climb compares the deadline with
        each new level's tick and interval alone, and each interval is the next level's tick: once the ticks
        repeat, so does every comparison, and a climb that has not ended within one period never will."""
        tick = self.levels[top].interval  # of the level the climb creates next
        span = 2 ** PY.width  # PY.mul is written out below: the loop may run CLIMB_LIMIT times
        for _ in range(top + 1, min(top + 1 + climb_period(tick, self.size), CLIMB_LIMIT)):
            if tick == 0:
                self._level(tick, 0)  # raises divide-by-zero, as creating that level does
            interval = (tick * self.size - PY.min) % span + PY.min
            if expiration < tick or expiration < interval:
                return  # due at, or placed in, this level: the climb ends there
            tick = interval
        raise KafkaFailed("recursion", ENDLESS_CLIMB)

    def advance(self, to_ms: int) -> list[str]:
        """advanceClock on the virtual clock: release every bucket due by ``to_ms``; the tasks run, in order."""
        self.now, ran, releases = to_ms, [], 0
        while self.queue and self.queue[0][0] <= to_ms:
            expiration, _, bucket = heapq.heappop(self.queue)
            releases += 1
            if releases > RELEASE_LIMIT:
                raise KafkaFailed("livelock", f"{RELEASE_LIMIT} bucket releases in one advance to {to_ms}")
            time_ms = expiration
            for level in self.levels:  # TimingWheel.advanceClock: a level moves, then the one above follows it
                if time_ms < PY.add(level.current, level.tick):
                    break
                level.current = time_ms = PY.sub(time_ms, PY.rem(time_ms, level.tick))
            while bucket.entries:  # TimerTaskList.flush: until the list is empty
                task, entry_expiration = next(iter(bucket.entries.items()))
                self.cancel(task)
                if not self._place(task, entry_expiration):
                    ran.append(task)
                elif self.where[task] is bucket:
                    raise KafkaFailed("livelock", f"{task} is re-inserted into the bucket being flushed "
                                                  f"(expiration {bucket.expiration})")
            bucket.expiration = -1
        return ran

    def pending(self) -> set[str]:
        return set(self.where)

    def describe(self) -> dict:
        """The ``wheel`` read-out, as the model's `SystemTimer.describe`."""
        return {"levels": [{"tick_ms": level.tick, "wheel_size": level.size, "current_ms": level.current,
                            "buckets": [{"slot": slot, "expiration_ms": bucket.expiration,
                                         "entries": list(bucket.entries)}
                                        for slot, bucket in sorted(level.buckets.items()) if bucket.entries]}
                           for level in self.levels]}

    def queued(self) -> list[int]:
        return sorted(expiration for expiration, _, _ in self.queue)


def climb_period(tick: int, size: int) -> int:
    """Levels after which a climb's ticks repeat. Level k's tick is ``tick`` * ``size``^k modulo 2^64; for an odd
    size that repeats with the multiplicative order of ``size`` modulo 2^(64 - the trailing zero bits of ``tick``), a
    power of two (found by squaring, at most 62 times). An even size makes the tick 0 within 64 levels."""
    if size % 2 == 0:
        return PY.width
    unsigned = tick % 2 ** PY.width
    modulus = 2 ** (PY.width - ((unsigned & -unsigned).bit_length() - 1))
    power, period = size % modulus, 1
    while power != 1 % modulus:
        power, period = power * power % modulus, period * 2
    return period


def climbs_past_long_max(timer: SystemTimer, expiration: int) -> bool:
    """Placing ``expiration`` compares it with a sum past Long.MAX_VALUE (a level's current time + tick, the "already
    expired" test, or + interval, the window end), at a level it passes through or lands in, or creates on the way."""
    if expiration > v.LONG_MAX:
        return True
    wheel: TimingWheel | None = timer.timing_wheel  # the levels that exist, walked only as far as the climb goes
    current, tick, size = wheel.current_time_ms, wheel.tick_ms, wheel.wheel_size
    while True:
        if current + tick > v.LONG_MAX or expiration < current + tick:
            return current + tick > v.LONG_MAX
        if current + tick * size > v.LONG_MAX or expiration < current + tick * size:
            return current + tick * size > v.LONG_MAX
        wheel = wheel and wheel.overflow_wheel
        if wheel is not None:
            current, tick = wheel.current_time_ms, wheel.tick_ms
        else:  # the overflow wheel the climb would create: tick = the interval below, started at its current time
            current, tick = current - current % (tick * size), tick * size


def near_the_edge(model: Model, command: v.Command) -> bool:
    """The step may make Kafka compute a sum past Long.MAX_VALUE, from a state where its wheel is still the model's:
    an add or watch whose deadline or placement does, or an advance that may compare with a window end past it
    (every level's current time stays at or before the clock)."""
    timer = model.timer
    if isinstance(command, v.Advance):
        top = timer.timing_wheel
        while top.overflow_wheel is not None:
            top = top.overflow_wheel
        return command.to_ms + top.interval > v.LONG_MAX
    return any(climbs_past_long_max(timer, deadline) for deadline in deadlines(model, command))


def deadlines(model: Model, command: v.Command) -> list[int]:
    """The deadlines an add or watch may give its entry, in exact arithmetic (a watch of an op built before
    KAFKA-3470 keeps the deadline it was built with)."""
    if isinstance(command, v.TimerAdd):
        return [model.now_ms + command.delay_ms]
    if not isinstance(command, v.Watch):
        return []
    op = model.ops.get(command.op)
    delay = command.delay_ms if command.delay_ms is not None else None if op is None else op.delay_ms
    built = None if op is None else op.built_expiration_ms
    return ([] if delay is None else [model.now_ms + delay]) + ([] if built is None else [built])


@attrs.frozen
class Edge:
    """What Kafka's timer does on one step where its arithmetic wraps, judged from its state before the step:
    ``failure`` how it fails (`KafkaFailed` kinds), ``early`` the tasks or ops it runs (expires) there that the model
    does not, ``late`` those the model runs and Kafka does not, ``wrapped_deadline`` whether the step's now + delay_ms
    passed Long.MAX_VALUE, ``read_out_differs`` whether Kafka's wheel or delay-queue read-out is not the model's,
    ``deep_climb`` whether an add climbed past `STACK_SAFE_CLIMB` levels, where Kafka may overflow its stack before
    the climb ends as predicted."""

    failure: str | None = None
    early: frozenset[str] = frozenset()
    late: frozenset[str] = frozenset()
    wrapped_deadline: bool = False
    read_out_differs: bool = False
    deep_climb: bool = False


def timer_runs(observation: v.Observation | None) -> set[str]:
    """The tasks an observation ran and the ops it expired."""
    if observation is None:
        return set()
    return {event.task if isinstance(event, v.Run) else event.op for event in observation.events
            if isinstance(event, (v.Run, v.Expire)) or isinstance(event, v.Complete) and event.via == "expire"}


@attrs.define
class KafkaShadow:
    """Kafka's timer beside the model's through one run. Until a step may make Kafka wrap a sum (`near_the_edge`),
    Kafka's state is the model's and nothing is kept; at that step it is copied from the model (`KafkaTimer.of`),
    and from then on each step is done on both. `before` is called before the model steps,
    `after` once it has: the model's step says which entries the command adds and cancels (a watch adds its op only
    when the op did not complete), Kafka's timer says what its arithmetic makes of them. Once Kafka's timer did
    something else than the model's, it no longer stands for the system's state: the run's later steps have no
    edge."""

    kafka: KafkaTimer | None = None
    derailed: bool = False
    #: before the step under way: the clock and the model's pending entries (None: Kafka's step is the model's)
    now_ms: int = 0
    entries: dict[str, TimerTaskEntry] | None = None

    def before(self, model: Model, command: v.Command) -> None:
        self.entries = None
        if self.derailed:
            return
        if self.kafka is None:
            if not near_the_edge(model, command):
                return
            self.kafka = KafkaTimer.of(model.timer)
        self.now_ms, self.entries = model.now_ms, pending_entries(model.timer)

    def after(self, model: Model, command: v.Command, expected: v.Observation) -> Edge | None:
        """What Kafka does on the step just taken; None where that is what the model does."""
        if self.entries is None:
            return None
        kafka, before, now = self.kafka, self.entries, self.now_ms
        after = pending_entries(model.timer)
        model_ran = timer_runs(expected)
        ran: list[str] = []
        failure, wrapped = None, expected.error == "delay_out_of_range"
        kafka.climbed = 0
        try:
            if isinstance(command, v.Advance):
                ran = kafka.advance(command.to_ms)
            elif isinstance(command, (v.TimerAdd, v.Watch)):
                added = command.task if isinstance(command, v.TimerAdd) else command.op
                if wrapped:
                    delay = command.delay_ms if command.delay_ms is not None else model.ops[added].delay_ms
                    expiration = PY.add(now, delay)
                elif added in after and after[added] is not before.get(added):
                    expiration = after[added].expiration_ms
                elif added in model_ran:  # the model ran it on add: due within the current tick
                    expiration = max(deadlines(model, command))
                else:
                    expiration = None  # a watch that completed the op: no timer entry
                if expiration is not None and not kafka.add(added, expiration):
                    ran.append(added)
        except KafkaFailed as failed:
            failure = failed.kind
        for gone in kafka.pending() - set(after) - set(ran):  # cancelled, completed, shut down
            kafka.cancel(gone)
        read_out = (isinstance(command, v.Wheel) and kafka.describe() != expected.result
                    or isinstance(command, v.DelayQueue) and kafka.queued() != expected.result)
        edge = Edge(failure, frozenset(ran) - model_ran, frozenset(model_ran - set(ran)) if failure is None else
                    frozenset(), wrapped, read_out, kafka.climbed > STACK_SAFE_CLIMB)
        if edge == Edge():
            return None
        self.derailed = edge.failure is not None or bool(edge.early or edge.late) or edge.wrapped_deadline
        return edge


def pending_entries(timer: SystemTimer) -> dict[str, TimerTaskEntry]:
    return {entry.task.task_id: entry for bucket in timer.occupied_buckets() for entry in bucket.entries}


# ---------------------------------------------------------------------------------------------------------------
# Kafka's known misbehaviours at the edge of the domain
# ---------------------------------------------------------------------------------------------------------------

#: an input class: on Kafka's edge of the step, the command and the model's observation of it
Inputs = Callable[[Edge, v.Command, v.Observation], bool]
#: how Kafka's timer fails, by `KafkaFailed` kind -> the families of what a system does that fails the same way
FAILS_LIKE: dict[str, frozenset[str]] = {
    "divide-by-zero": frozenset({"divide-by-zero"}),
    "index-out-of-bounds": frozenset({"index-out-of-bounds"}),
    # Kafka's JVM overflows its stack, or spends minutes and gigabytes building wheels until a time limit stops it
    "recursion": frozenset({"stack-overflow", "out-of-memory", "hung", "crashed"}),
    "livelock": frozenset({"hung"}),
}


@attrs.frozen
class KafkaDoes:
    """What Kafka's own timer does on a step of a finding's input class, as outcomes of a system anyone can
    recognise, in any language (a vector tree carries it as a step's ``expect.kafka``, specs/vectors.md §5.4): the
    system may answer without an error (``answers``), run or expire one of ``runs``, fail in one of the families
    ``fails`` (`FAMILIES`), hang (``hangs``), or crash (``crashes``: a native stack overflow kills the process, with or
    without last words); or do ``anything``."""

    answers: bool = False
    fails: tuple[str, ...] = ()
    hangs: bool = False
    crashes: bool = False
    runs: tuple[str, ...] = ()
    anything: bool = False

    @classmethod
    def failing_as(cls, failure: str | None, **outcomes) -> KafkaDoes:
        """Kafka's timer failing as ``failure`` (a `KafkaFailed` kind; None: it does not fail), besides ``outcomes``."""
        like = FAILS_LIKE.get(failure, frozenset())
        return cls(fails=tuple(name for name in FAMILIES if name in like), hangs="hung" in like,
                   crashes="crashed" in like, **outcomes)

    def matches(self, observed: v.Observation | None, error: Exception | None,
                families: dict[str, tuple[str, ...]] = FAMILIES) -> bool:
        """The system's outcome is one of these: it answered ``observed``, or failed as ``error`` (classified by
        ``families``)."""
        if self.anything:
            return True
        if observed is not None:
            return self.answers and observed.error is None or bool(timer_runs(observed) & set(self.runs))
        outcome = family(error, families)
        if outcome is None and isinstance(error, AdapterCrashed):
            outcome = "crashed"
        return outcome in self.fails or self.hangs and outcome == "hung" or self.crashes and outcome == "crashed"

    def to_json(self) -> dict:
        return {"answers": self.answers, "fails": list(self.fails), "hangs": self.hangs, "crashes": self.crashes,
                "runs": list(self.runs), "anything": self.anything}

    @classmethod
    def from_json(cls, document: dict) -> KafkaDoes:
        return cls(document["answers"], tuple(document["fails"]), document["hangs"], document["crashes"],
                   tuple(document["runs"]), document["anything"])


#: an outcome: on Kafka's edge of the step, what Kafka's timer does there
Outcome = Callable[[Edge], KafkaDoes]


def fails_like_kafka(edge: Edge) -> KafkaDoes:
    """The system fails in the family Kafka's timer fails in on this step."""
    return KafkaDoes.failing_as(edge.failure)


def overflows_like_kafka(edge: Edge) -> KafkaDoes:
    """The system fails as Kafka's recursion does, on a climb without end or deeper than every stack holds."""
    return KafkaDoes.failing_as("recursion" if edge.failure == "recursion" or edge.deep_climb else None)


def answers_or_fails_like_kafka(edge: Edge) -> KafkaDoes:
    return KafkaDoes.failing_as(edge.failure, answers=True)


def runs_early_like_kafka(edge: Edge) -> KafkaDoes:
    """The system answers and runs (expires) one of the entries Kafka runs early on this step."""
    return KafkaDoes(runs=tuple(sorted(edge.early)))


def anything(edge: Edge) -> KafkaDoes:
    return KafkaDoes(anything=True)


#: every Kafka release with the hierarchical timing wheel: its arithmetic is the same in all of them
ALL_RELEASES = f"every release from {FIRST} (the hierarchical timing wheel, KAFKA-1989) to the current one"


@attrs.frozen
class Finding:
    """One of Kafka's known misbehaviours: ``summary`` says what Kafka does, ``releases`` which releases do it and
    ``ticket`` its KAFKA ticket ("no ticket" when none is filed); ``inputs`` and ``outcome`` recognise it."""

    name: str
    summary: str
    inputs: Inputs = attrs.field(repr=False)
    outcome: Outcome = attrs.field(repr=False)
    releases: str = ALL_RELEASES
    ticket: str = "no ticket"
    #: the first release that has it (they all still do)
    since: str = FIRST

    @property
    def description(self) -> str:
        return self.summary

    @property
    def signature(self) -> Signature:
        return Signature("finding", "", self.name)

    def applies_to(self, version: str) -> bool:
        """Whether Kafka ``version`` has it."""
        return version_key(version) >= version_key(self.since)

    def __str__(self) -> str:
        return f"Kafka finding ({self.name}): {self.summary} [{self.releases}; {self.ticket}]"


#: Kafka's known misbehaviours, first match wins (kafka-semantics §2.6, measured against Kafka's classes). Each input
#: class is what Kafka's own arithmetic does on the step, so it is narrow: a system's own bug that only shows in such a
#: step, and fails the way Kafka does there, is taken for Kafka's; any other failure is still a failure.
FINDINGS = (
    Finding("deadline-wraps", "now + delay_ms past Long.MAX_VALUE wraps negative, so the task runs (the op expires) "
                              "at once, or, with the clock at the end of time, cannot be placed (the model rejects "
                              "it: delay_out_of_range)",
            lambda edge, command, expected: edge.wrapped_deadline, answers_or_fails_like_kafka),
    Finding("far-deadline-runs-early", "a far deadline that does not wrap now + delay_ms still runs at once, up to "
                                       "~10^18 ms early: an overflow level's interval wrapped, to a window that puts "
                                       "the deadline in the past (or a bucket that is already due)",
            lambda edge, command, expected: bool(edge.early), runs_early_like_kafka),
    Finding("interval-divides-by-zero", "an overflow level's interval wraps to 0 (even wheel sizes), so the next "
                                        "level divides by zero: ArithmeticException: / by zero",
            lambda edge, command, expected: edge.failure == "divide-by-zero", fails_like_kafka),
    Finding("negative-bucket-index", "a wrapped interval or tick gives a negative bucket index: "
                                     "ArrayIndexOutOfBoundsException",
            lambda edge, command, expected: edge.failure == "index-out-of-bounds", fails_like_kafka),
    Finding("odd-wheel-recursion", "the overflow intervals wrap without ever reaching 0 (odd wheel sizes), so the add "
                                   "climbs to new overflow wheels without end, or for more levels than a stack holds: "
                                   "StackOverflowError, or minutes and gigabytes of wheels (a hang)",
            lambda edge, command, expected: edge.failure == "recursion" or edge.deep_climb, overflows_like_kafka),
    Finding("reinsertion-livelock", "an advance releases a bucket whose entry is re-inserted into that same bucket "
                                    "(its level's window wrapped), so the flush never empties it: the reaper spins "
                                    "(a hang)",
            lambda edge, command, expected: edge.failure == "livelock", fails_like_kafka),
    Finding("wrapped-window-read-out", "the wheel or delay-queue read-out differs once a level's tick or window "
                                       "(current time + interval) wrapped",
            lambda edge, command, expected: edge.read_out_differs, anything),
)

#: the findings whose outcome costs a time limit and a fresh system each time it is met: once known, a step in their
#: input class is not sent (`conformance.check.machine`)
COSTLY = frozenset({"odd-wheel-recursion", "reinsertion-livelock"})


def recognise(edge: Edge | None, command: v.Command | None, expected: v.Observation | None,
              observed: v.Observation | None, error: Exception | None) -> Finding | None:
    """The known misbehaviour a failing step is, if any: ``edge`` is what Kafka's timer does on it (`KafkaShadow`;
    None: what the model does), ``command`` the step's command and ``expected`` the model's observation of it (None
    for init), ``observed`` the system's (None when it failed to answer), ``error`` how it failed."""
    if edge is None or command is None:
        return None
    return next((finding for finding in FINDINGS
                 if finding.inputs(edge, command, expected) and finding.outcome(edge).matches(observed, error)), None)


def foreseen(edge: Edge | None, command: v.Command, expected: v.Observation,
             known: dict[Signature, int]) -> Finding | None:
    """A known finding whose outcome is a hang (or worse) that this step is in the input class of: the step need not
    be sent to know how it ends."""
    if edge is None:
        return None
    edge = attrs.evolve(edge, deep_climb=False)  # a climb that ends, however deep, ends soon
    return next((finding for finding in FINDINGS if finding.name in COSTLY and finding.signature in known
                 and finding.inputs(edge, command, expected)), None)
