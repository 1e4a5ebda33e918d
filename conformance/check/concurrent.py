"""Concurrent checking: several threads call one thread-safe system at once; properties are checked on the history.

No sequential model can say what each call of a concurrent run must return: two checks racing for one op may each
win, and an expiry may beat either. So ``kpurgatory check --threads N`` compares nothing step by step. It records a
*history*, as Jepsen and Knossos do: every call with its thread and the logical times of its invocation and return,
on one counter shared by all threads. It then checks properties that must hold under every interleaving. Each one is
stated once, in words here and in code below:

  exactly_once     No op completes twice. An op's expire event comes right after its completion via expire, in the
                   same call (onExpiration runs in the thread whose forceComplete won).
  no_lost_op       Every op watched completes, or is reported cancelled (a cancel of the op, or a cancel_key that
                   returned it) or dropped (in shutdown's result).
  justified        A completion comes from a route the call could take: ``try`` from a watch or try of that op,
                   ``check`` from a check of one of its keys, ``force`` from a force of it, ``expire`` from an advance
                   or the op's own watch, and not after a cancel of it (or a cancel_key that returned it) returned,
                   unless it was watched again since: cancelling an op cancels its timer entry. A completion via try
                   or check needs the op to be ready: it counts tries (``ready_on``) or a set_ready(true) of it was
                   invoked before the completing call returned. A check
                   calls tryComplete on a completed op (stale_try, KAFKA-17848) only if a completion that does not
                   take the op's lock won the race: one by expiry, force or a direct try. A completion under the
                   op's lock (by a check, or by a watch's tries) happened wholly before or after the check held it.
  no_lost_wakeup   An op made ready (set_ready returned) before a check of one of its keys was invoked is completed
                   by that check, or by a call invoked before the check returned or before its watch returned
                   (the watch's second try), unless a cancel_key took it off that key first, or a set_ready(false)
                   of it may have cleared the condition.
  results          Results agree with events: check returns how many ops it completed via check; force, try and
                   watch return true exactly when they completed the op themselves.
  on_time          An op never expires before the start of its deadline's tick, by any clock value the run could have
                   reached. An op whose deadline passed by an advance invoked after its watch returned has completed
                   (in a call invoked before that advance returned), unless it was cancelled by then. A history
                   of a system on a real clock (a live recording's) widens both bounds by the real-time allowances
                   its header declares (``real_time``, `kpurgatory.model.contract.RealTime`) and adds the live
                   properties of `kpurgatory.conformance.live.judge`.
  watcher_cleanup  Once every op has completed (every completing call returned), delayed and size read 0 and shutdown
                   drops nothing. Once, after that, every key ever watched was checked or cancelled, watched reads 0
                   and watcher_keys (if the system reads it out) reads []. Once, after that, an advance reported a
                   purge, watched reads 0 until a watch runs again: a purge sweeps every watcher shard.
  no_failure       Every call returns: the system neither raises nor hangs (a deadlock shows as calls that never
                   returned, listed with the history).

A run: ``threads`` workers execute seeded random scripts (watch new ops on a few shared keys, set_ready, check,
cancel_key, force, try, cancel, read the counters) while a clock thread advances the virtual clock; the scripts draw
the sequential check's patterns too (deadlines on the wheel's comparisons, advances to a deadline, a watch followed by
a cancel_key of its key), and the failing runs of a shared corpus are played as one-call-a-round plans
(`corpus_plan`). A worker that refers to another thread's op first waits until that op's watch returned. Every op of a
random run is watched once, so its deadline is known up to the clock's movement during the watch. The run ends with a
*drain* on one thread: advance past every deadline, force every op, leave a stale entry on every key and advance again
(the purge's turn), check every key, read the counters, shut down. The history is a trace
(`kpurgatory.conformance.traces.codec`, a header with ``threads`` and steps with timings); a failing one is written to
``--out`` and ``kpurgatory check-history`` checks any history file, whoever recorded it.

A violation is a fact about this history, never a guess: every rule uses only what the timings prove (a call that
returned before another was invoked happened before it). Runs are random interleavings, so the same seed does not
replay the same history; the seed fixes the scripts. Under a controlled scheduler
(`kpurgatory.conformance.check.scheduler`) the seed fixes the interleavings too, and a history's schedule replays it.

The check goes on past a failure, as the sequential one does (`conformance.check.findings`): a violation has a
signature (the property, its cause, the commands of the calls it names first), a history whose signatures were all
reported counts as passing, and each new one is shrunk and reported, up to ``--max-failures``. A system that declares
a Kafka release (``kafka_version``) is not blamed for the races that release shipped (`kafka_race`): those are
Kafka findings, reported apart. Commands the system's hello lists as unsupported are never planned.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import io
import itertools
import queue
import random
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterator

import attrs
import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kpurgatory.conformance.traces.replay import format_command, format_observation, read_for_command
from kpurgatory.conformance.adapters.gates import Gates, GateSpec
from kpurgatory.conformance.adapters.interleave import preempted
from kpurgatory.conformance.adapters.subprocess import (AdapterStopped, AdapterTimedOut, SubprocessSystem,
                                                         SystemTimedOut)
from kpurgatory.conformance.adapters.sut import Hello, SystemUnderTest
from kpurgatory.conformance.check import strategies
from kpurgatory.conformance.check.findings import Signature
from kpurgatory.conformance.check.scheduler import Deadlock, Hung, Scheduler, Scheduling, carried, replaying
from kpurgatory.conformance.terminal import command_console, counted, markup, safe
from kpurgatory.conformance.traces.codec import Header, Schedule, Step, Timing, Trace, write_traces
from kpurgatory.impl import sync
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import KAFKA, WatcherShards
from kpurgatory.model.releases import RULES, Release, Rule, points_shown

#: the interpreter's thread switch interval during a run: CPython's 5 ms default lets a thread run a whole script
#: before the next one starts; 10 µs makes calls interleave inside the system's critical sections
SWITCH_INTERVAL_S = 1e-5
DRAIN = "drain"
#: the op the drain watches on every key and forces, leaving a stale entry on each
STALE_OP = "drain.stale"
CLOCK = "clock"
#: how a call that failed by not answering is recorded (``Timing.failure`` starts with its class)
HUNG = tuple(f"{error.__name__}:" for error in (AdapterTimedOut, AdapterStopped, SystemTimedOut))


# ---------------------------------------------------------------------------------------------------------------
# Plans: what each thread will call, round by round
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Plan:
    """One run: parameters and its rounds. A round is the calls that start together behind one start barrier: one
    or two calls of each worker thread (two are both in flight at once) and an advance of the clock thread. A call
    refers only to ops watched in an earlier round, whose watch has returned."""

    params: v.Params
    rounds: tuple[tuple[tuple[str, v.Command], ...], ...]

    @property
    def calls(self) -> Iterator[tuple[str, v.Command]]:
        return (call for round_ in self.rounds for call in round_)

    @property
    def owners(self) -> dict[str, str]:
        """op -> the thread whose script watches it."""
        return {command.op: thread for thread, command in self.calls if isinstance(command, v.Watch)}

    @property
    def keys(self) -> tuple[str, ...]:
        keys = {key for _, command in self.calls for key in
                (command.keys if isinstance(command, v.Watch) else (getattr(command, "key", None),)) if key}
        return tuple(sorted(keys))

    @property
    def threads(self) -> tuple[str, ...]:
        return tuple(sorted({thread for thread, _ in self.calls}))

    def size(self) -> int:
        return sum(map(len, self.rounds))


#: how often a worker picks each kind of call
WEIGHTS = {"watch": 30, "set_ready": 18, "check": 25, "cancel_key": 4, "force": 5, "try": 5, "cancel": 4,
           "watched": 3, "delayed": 3, "size": 3}
#: how often a worker has a second call in flight in a round
PIPELINED = 0.25


#: how often a watch is followed, in its worker's next round, by a cancel_key of one of its keys: the sequential
#: pattern (watch, cancel_key, the op's deadline passes) that shows a cancel_key leaving the op's timer entry behind
CANCEL_AFTER_WATCH = 0.1


def plan_run(rng: random.Random, threads: int, steps: int, unsupported: frozenset[str] = frozenset(),
             shards: WatcherShards = KAFKA.watcher_shards) -> Plan:
    """Random rounds on small and Kafka-sized wheels (tasks overflow to three and more levels), keys shared by all
    threads on consecutive watcher shards of ``shards`` from a random one, ops referred to across threads: ``steps``
    rounds, each with one or two calls of every worker and one advance. The patterns the sequential check draws are
    drawn here too: deadlines on the wheel's comparisons (`strategies.draw_wheel_edge`), advances to a planned deadline
    or a millisecond before it, and a watch followed by a cancel_key of its key. No call is one of the
    ``unsupported`` commands (those the system's hello says it cannot execute)."""
    kinds = [kind for kind in WEIGHTS if kind not in unsupported]
    weights = [WEIGHTS[kind] for kind in kinds]
    tick = rng.choice((1, 1, 2, 5))
    wheel = rng.choice((2, 3, 4, 8, 20))
    params = v.Params(tick_ms=tick, wheel_size=wheel, start_ms=rng.choice((0, rng.randrange(1, 1000))),
                      purge_interval=rng.choice((0, 1, 2, 5, 1000)))
    span = tick * wheel
    names_by_shard, first = strategies.key_names(shards), rng.randrange(shards.count)
    keys = tuple(dict.fromkeys(names_by_shard[(first + i) % shards.count][i // shards.count]
                               for i in range(threads + 1)))
    names = [f"w{i}" for i in range(threads)]
    counters = dict.fromkeys(names, 0)
    visible: list[str] = []
    deadlines: list[int] = []  # of the ops planned so far, from the clock when they were planned
    follow: dict[str, v.Command] = {}  # a worker's next call, when a pattern chose it

    def delay() -> int:
        roll = rng.random()
        if roll < 0.08:
            return rng.randrange(-span, 1)
        if roll < 0.5:
            return rng.randrange(1, span + 1)
        if roll < 0.65:
            levels = strategies.level_clocks(params, clock)
            return rng.choice(strategies.edge_times(params, levels, rng.choice((0, 0, 1, 1, 2)))) - clock
        return rng.randrange(span, span * wheel * (wheel if roll > 0.9 else 1) + 1)

    def command(name: str) -> v.Command:
        if name in follow:
            return follow.pop(name)
        kind = rng.choices(kinds, weights)[0]
        counters[name] += 1
        if kind == "watch":
            watch = v.Watch(f"{name}.{counters[name] - 1}", tuple(rng.choices(keys, k=rng.choice((1, 1, 2, 3)))),
                            delay(), rng.choice((None, None, None, 1, 2)))
            deadlines.append(clock + watch.delay_ms)
            if "cancel_key" in kinds and rng.random() < CANCEL_AFTER_WATCH:
                follow[name] = v.CancelKey(rng.choice(watch.keys))
            return watch
        if kind in ("check", "cancel_key"):
            return v.COMMANDS[kind](rng.choice(keys))
        if kind in ("watched", "delayed", "size"):
            return v.COMMANDS[kind]()
        return v.COMMANDS[kind](rng.choice(visible)) if visible else v.Check(rng.choice(keys))

    clock, rounds = params.start_ms, []
    for _ in range(steps):
        calls = [(name, command(name)) for name in names for _ in range(1 + (rng.random() < PIPELINED))]
        if "advance" not in unsupported:
            ahead = [deadline for deadline in deadlines if deadline > clock]
            if ahead and rng.random() < 0.2:
                clock = max(clock, rng.choice(ahead) - rng.choice((0, 1)))
            else:
                clock += rng.choice((0, rng.randrange(1, tick + 1), rng.randrange(1, span + 1),
                                     rng.randrange(span, span * wheel + 1)))
            calls.append((CLOCK, v.Advance(clock)))
        rounds.append(tuple(calls))
        visible.extend(command.op for _, command in calls if isinstance(command, v.Watch))
    return Plan(params, tuple(rounds))


def corpus_plan(params: v.Params, commands: list[v.Command], hello: Hello) -> Plan:
    """A sequential run of the shared corpus (`conformance.check.corpus`) as a plan: one call a round, in the run's
    order, advances on the clock thread and the rest on one worker, so the history holds the run as it was found
    and the concurrent properties judge it. Read-outs the system lacks and a final shutdown (the drain shuts down)
    are left out."""
    calls = [(CLOCK if isinstance(command, v.Advance) else "w0", command) for command in commands
             if hello.drives(command) and not isinstance(command, v.Shutdown)]
    return Plan(params, tuple((call,) for call in calls))


# ---------------------------------------------------------------------------------------------------------------
# Reaching the system: in process or through the protocol
# ---------------------------------------------------------------------------------------------------------------


class Driver:
    """Calls an in-process system: a start barrier is a `threading.Barrier` here, gates are the system's own
    (`kpurgatory.conformance.adapters.gates`), and the execution interval is read around the call."""

    def __init__(self, system: SystemUnderTest, hello: Hello):
        self.system, self.hello = system, hello
        self.barriers: dict[str, threading.Barrier] = {}
        self.making = threading.Lock()

    @property
    def gates(self) -> Gates | None:
        """The system's gates (a run may replace them)."""
        gates = getattr(self.system, "gates", None)
        return gates if isinstance(gates, Gates) else None

    @property
    def gated(self) -> bool:
        """The system supports gates, so the race schedules can drive it."""
        return self.gates is not None

    def call(self, command: v.Command, barrier: tuple[str, int] | None,
             gate: GateSpec | None) -> tuple[v.Observation, tuple[int, int] | None]:
        if barrier is not None:
            with self.making:
                start = self.barriers.setdefault(barrier[0], threading.Barrier(barrier[1]))
            start.wait()
        with self.gates.armed(gate) if gate is not None else contextlib.nullcontext():
            with preempted() if barrier is not None else contextlib.nullcontext():
                started = time.monotonic_ns()
                observation = self.system.step(command)
                ended = time.monotonic_ns()
            return observation, (started, ended)

    def await_gate(self, gate_id: str) -> bool:
        return self.gates.reached(gate_id)

    def open_gate(self, gate_id: str) -> None:
        self.gates.open(gate_id)


class ProtocolDriver(Driver):
    """Calls an adapter through the protocol: barriers and gates travel with the requests (features ``barrier`` and
    ``gates``, specs/protocol.md §3.1-3.2), and the adapter reports the execution interval."""

    def __init__(self, system: SubprocessSystem, hello: Hello):
        super().__init__(system, hello)
        self.with_barriers = "barrier" in hello.features

    @property
    def gated(self) -> bool:
        return "gates" in self.hello.features

    def call(self, command: v.Command, barrier: tuple[str, int] | None,
             gate: GateSpec | None) -> tuple[v.Observation, tuple[int, int] | None]:
        return self.system.call(command, barrier if self.with_barriers else None, gate)

    def await_gate(self, gate_id: str) -> bool:
        return self.system.await_gate(gate_id)

    def open_gate(self, gate_id: str) -> None:
        self.system.open_gate(gate_id)


class ScheduledDriver(ProtocolDriver):
    """Calls an adapter that runs requests under the harness's scheduler (feature ``scheduler``, specs/protocol.md
    §3.4). The harness's thread of a call stands in for the adapter's thread of its request: it takes the request's
    points, waits and releases to ``scheduler``, and lets the adapter's thread go on when the scheduler gives the
    stand-in the turn; so the adapter's threads run one at a time, in the order the scheduler chose."""

    def __init__(self, system: SubprocessSystem, hello: Hello, scheduler: Scheduler):
        super().__init__(system, hello)
        self.scheduler = scheduler
        self.locks: dict[int, RemoteLock] = {}

    def call(self, command: v.Command, barrier: tuple[str, int] | None,
             gate: GateSpec | None) -> tuple[v.Observation, tuple[int, int] | None]:
        return self.system.call_scheduled(command, self.stand_in)

    def stand_in(self, line: dict) -> bool | None:
        """Take one scheduler line of the adapter's; whether its thread must now go on deadlocked (None: it goes on
        by itself)."""
        lock = self.locks.setdefault(line["lock"], RemoteLock(line.get("role", "lock"))) if "lock" in line else None
        if line["sched"] == "released":
            self.scheduler.released(lock)
            return None
        if line["sched"] == "wait":
            try:
                self.scheduler.wait_for(lock)
            except Deadlock:
                return True
            return False
        self.scheduler.point(line["kind"], line["where"])
        return False


@attrs.define(eq=False)
class RemoteLock:
    """A lock of the adapter's process, as the harness's scheduler knows it: who waits for it."""

    role: str


def driver_for(system: SystemUnderTest, hello: Hello) -> Driver:
    return (ProtocolDriver if isinstance(system, SubprocessSystem) else Driver)(system, hello)


# ---------------------------------------------------------------------------------------------------------------
# Running a plan: the recorder, the rounds and the drain
# ---------------------------------------------------------------------------------------------------------------


@attrs.define
class Call:
    """A call being recorded."""

    thread: str
    command: v.Command
    invoked: int
    returned: int | None = None
    observation: v.Observation | None = None
    failure: str | None = None
    exec_ns: tuple[int, int] | None = None


class SystemFailed(Exception):
    """The system raised: the thread stops, the run is not drained."""


class Recorder:
    """Calls the system and records each call on one logical clock (``next`` of an itertools.count is atomic)."""

    def __init__(self, driver: Driver):
        self.driver = driver
        self.ticks = itertools.count()
        self.calls: list[Call] = []
        self.progressed = time.monotonic()
        #: set when the system raised or hung: every thread stops at its next call
        self.stopped = threading.Event()

    def call(self, thread: str, command: v.Command, barrier: tuple[str, int] | None = None,
             gate: GateSpec | None = None, record: Call | None = None) -> v.Observation:
        """Record the call in ``record`` (by default a new one)."""
        if record is None:
            record = Call(thread, command, 0)
        record.invoked = next(self.ticks)
        self.calls.append(record)  # list.append is atomic
        try:
            record.observation, record.exec_ns = self.driver.call(command, barrier, gate)
        except Exception as error:  # noqa: BLE001 - the system's failure is the finding
            record.failure = f"{type(error).__name__}: {error}"
            self.stopped.set()
            raise SystemFailed(record.failure) from None
        finally:
            record.returned = next(self.ticks)
            self.progressed = time.monotonic()
        return record.observation

    def calls_in_turn(self, thread: str, commands: list[v.Command]) -> None:
        """Call ``commands`` one after another on ``thread``, up to the first the system fails."""
        with contextlib.suppress(SystemFailed):
            for command in commands:
                self.call(thread, command)

    def history(self, trace_id: str, params: v.Params) -> Trace:
        ordered = sorted(self.calls, key=lambda call: call.invoked)
        threads = max(2, len({call.thread for call in ordered}))
        header = Header(trace_id, "purgatory", params, self.driver.hello.implementation, threads=threads,
                        declarations=self.driver.hello.declarations)
        return Trace(header, [Step(seq, call.command, call.observation or v.Observation(),
                                   Timing(call.thread, call.invoked, call.returned, call.failure, call.exec_ns))
                              for seq, call in enumerate(ordered, start=1)])


class Lanes:
    """Daemon threads that run the calls of a round, one call per thread (a hung system keeps its threads; they
    never keep the interpreter from exiting)."""

    def __init__(self) -> None:
        self.queues: list[queue.SimpleQueue] = []

    def run(self, tasks: list[Callable[[], None]]) -> list[threading.Event]:
        while len(self.queues) < len(tasks):
            lane: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(lane,), daemon=True, name=f"lane{len(self.queues)}").start()
            self.queues.append(lane)
        done = [threading.Event() for _ in tasks]
        for lane, task, finished in zip(self.queues, tasks, done):
            lane.put((task, finished))
        return done

    @staticmethod
    def _serve(lane: queue.SimpleQueue) -> None:
        while (item := lane.get()) is not None:
            task, finished = item
            try:
                task()
            finally:
                finished.set()

    def close(self) -> None:
        for lane in self.queues:
            lane.put(None)


def execute(system: SystemUnderTest, hello: Hello, plan: Plan, *, timeout: float, trace_id: str,
            driver: Driver | None = None, scheduler: Scheduler | None = None) -> Trace:
    """Run ``plan`` on a fresh run (init) of ``system`` and return the history: round by round, the calls of a
    round released together by a start barrier, or, with a ``scheduler``, run by it one at a time, switching at the
    system's synchronisation points (the history's header then carries the schedule that replays it). A call that
    has not returned ``timeout`` seconds after the last call returned is a hang: the history keeps it with no
    return, and the run ends undrained."""
    if scheduler is not None:
        with sync.using(scheduler.primitives):
            return execute_controlled(system, hello, plan, scheduler, timeout=timeout, trace_id=trace_id,
                                      driver=driver)
    system.init("purgatory", plan.params)
    driver = driver or driver_for(system, hello)
    driver.barriers.clear()  # a shrunk plan reuses the ids with other numbers of parties
    recorder = Recorder(driver)
    lanes = Lanes()

    def task(thread: str, command: v.Command, barrier: tuple[str, int]) -> Callable[[], None]:
        def run() -> None:
            with contextlib.suppress(SystemFailed):
                recorder.call(thread, command, barrier)
        return run

    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        for number, calls in enumerate(plan.rounds):
            if recorder.stopped.is_set():
                break
            barrier = (f"{trace_id}.{number}", len(calls))
            if not settled(lanes.run([task(thread, command, barrier) for thread, command in calls]), recorder,
                           timeout):
                recorder.stopped.set()
    finally:
        sys.setswitchinterval(switch_interval)
        lanes.close()
    if not recorder.stopped.is_set():
        drain(recorder, plan, hello, timeout)
    return recorder.history(trace_id, plan.params)


def execute_controlled(system: SystemUnderTest, hello: Hello, plan: Plan, scheduler: Scheduler, *, timeout: float,
                       trace_id: str, driver: Driver | None = None) -> Trace:
    """`execute` under ``scheduler``, whose locks the system is built with: each round's calls on threads of their
    own that the scheduler runs one at a time, then the drain on one more."""
    system.init("purgatory", plan.params)
    if isinstance(system, SubprocessSystem):
        if scheduler.calls:
            raise ValueError("an adapter's scheduler stops at its synchronisation points only: use granularity sync")
        driver = ScheduledDriver(system, hello, scheduler)
    elif scheduler.calls:
        scheduler.code(system.code_files)
    recorder = Recorder(driver or driver_for(system, hello))
    records = [[Call(thread, command, 0) for thread, command in calls] for calls in plan.rounds]

    def task(record: Call) -> Callable[[], None]:
        def run() -> None:
            with contextlib.suppress(SystemFailed):
                recorder.call(record.thread, record.command, record=record)
        return run

    drained = [(DRAIN, lambda: recorder.calls_in_turn(DRAIN, drain_commands(plan, hello)))]
    for tasks in (*([(record.thread, task(record)) for record in calls] for calls in records), drained):
        if recorder.stopped.is_set():
            break
        try:
            scheduler.run(tasks, timeout)
        except Hung:
            recorder.stopped.set()
    history = recorder.history(trace_id, plan.params)
    seq_of = {id(call): step.seq for call, step in zip(sorted(recorder.calls, key=lambda call: call.invoked),
                                                       history.steps)}
    # the rounds that ran, each with the calls that were invoked (a hung round may have left some never started)
    rounds = tuple(seqs for calls in records if (seqs := tuple(seq_of[id(record)] for record in calls
                                                               if id(record) in seq_of)))
    schedule = attrs.evolve(scheduler.schedule, rounds=rounds)
    return attrs.evolve(history, header=attrs.evolve(history.header, schedule=schedule))


def scheduled_plan(history: Trace) -> Plan:
    """The plan a history run under a controlled scheduler ran: its rounds, as its schedule lists them."""
    by_seq = {step.seq: step for step in history.steps}
    try:
        return Plan(history.header.params, tuple(tuple((by_seq[seq].timing.thread, by_seq[seq].command)
                                                       for seq in seqs) for seqs in history.header.schedule.rounds))
    except KeyError as error:
        raise ValueError(f"{history.trace_id}: its schedule's rounds name step {error.args[0]}, which it does not "
                         f"have") from None


def replay_history(system: SystemUnderTest, hello: Hello, history: Trace, *, timeout: float,
                   driver: Driver | None = None) -> tuple[Trace, Step | None]:
    """Run the plan of ``history`` again under its schedule; the new history, and the first recorded step it differs
    from (command, answer, thread, logical times or failure; execution times may differ), if any."""
    again = execute(system, hello, scheduled_plan(history), timeout=timeout, trace_id=history.trace_id,
                    driver=driver, scheduler=replaying(history.header.schedule))

    def essence(step: Step) -> tuple:
        return step.command, step.observation, attrs.evolve(step.timing, exec_ns=None)

    for step, recorded in itertools.zip_longest(again.steps, history.steps):
        if step is None or recorded is None or essence(step) != essence(recorded):
            return again, recorded or step
    return again, None


def settled(done: list[threading.Event], recorder: Recorder, timeout: float) -> bool:
    """Wait for every call of a round while calls keep returning; False once nothing returned for ``timeout``."""
    for finished in done:
        while not finished.wait(0.05):
            if time.monotonic() - recorder.progressed > timeout:
                return False
    return True


def drain_commands(plan: Plan, hello: Hello) -> list[v.Command]:
    """The drain, run on one thread after every other call returned: make every op ready and check every key (an op
    a list lost is a lost wakeup now), pass every deadline, force every op; watch one more op on every key and on a
    key of every watcher shard and force it, then advance (a purge now must sweep every shard), read watched; check
    every key again and cancel the other shards' keys, read the counters, shut down."""
    ops, keys = sorted(plan.owners), plan.keys
    horizon = max([plan.params.start_ms, *(c.to_ms for _, c in plan.calls if isinstance(c, v.Advance))]) + max(
        [0, *(c.delay_ms or 0 for _, c in plan.calls if isinstance(c, v.Watch))])
    # one more op on every key and on a key of every watcher shard, forced: its entries are stale on every list of
    # every shard, for the purge of the next advance
    elsewhere = [key for key in strategies.shard_keys(hello.declarations.watcher_shards) if key not in keys]
    stale = v.Watch(STALE_OP, (*keys, *elsewhere), plan.params.tick_ms * plan.params.wheel_size, None)
    swept = (stale, v.Force(STALE_OP), v.Advance(horizon), v.Watched()) if hello.declarations.within_domain(
        horizon, stale.delay_ms) else ()
    # the keys of the other shards leave the map by cancelForKey (which removes a key's list whatever else the
    # system does), so that what watcher_keys reads after the drain is about the run's own keys
    dropped = [v.CancelKey(key) for key in elsewhere]
    if not all(map(hello.drives, dropped)):
        dropped = [v.Check(key) for key in elsewhere]
    return [command for command in (*map(v.SetReady, ops), *map(v.Check, keys), v.Advance(horizon),
                                        *map(v.Force, ops), *swept, *map(v.Check, keys), *dropped, v.Watched(),
                                        v.Delayed(), v.Size(), v.WatcherKeys(), v.Shutdown())
                if hello.drives(command)]


def drain(recorder: Recorder, plan: Plan, hello: Hello, timeout: float) -> None:
    """`drain_commands` on one thread; a call that hangs (``timeout`` as in `execute`) ends the drain."""
    lanes = Lanes()
    try:
        if not settled(lanes.run([lambda: recorder.calls_in_turn(DRAIN, drain_commands(plan, hello))]), recorder,
                       timeout):
            recorder.stopped.set()
    finally:
        lanes.close()


# ---------------------------------------------------------------------------------------------------------------
# Overlap: how much the calls of a history really ran at once
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Overlap:
    """Over the calls with an execution interval: how many there are, how many intersect another call's interval,
    and the most that executed at once."""

    calls: int = 0
    overlapping: int = 0
    most: int = 0

    def __add__(self, other: Overlap) -> Overlap:
        return Overlap(self.calls + other.calls, self.overlapping + other.overlapping, max(self.most, other.most))

    @property
    def fraction(self) -> float:
        return self.overlapping / self.calls if self.calls else 0.0

    def __str__(self) -> str:
        if not self.calls:
            return "overlap: unknown (no execution intervals)"
        return (f"overlap: {self.fraction:.0%} of {self.calls:,} calls ran while another did; at most {self.most} "
                f"at once")


def overlap(trace: Trace) -> Overlap:
    """The overlap figures of a history, from its steps' ``exec_ns`` (closed intervals)."""
    intervals = sorted(step.timing.exec_ns for step in trace.steps if step.timing.exec_ns is not None)
    overlapping = [False] * len(intervals)
    for i, (_, end) in enumerate(intervals):
        for j in range(i + 1, len(intervals)):
            if intervals[j][0] > end:
                break
            overlapping[i] = overlapping[j] = True
    most = running = 0
    for _, change in sorted([(start, -1) for start, _ in intervals] + [(end, 1) for _, end in intervals]):
        running -= change  # at equal times starts (-1) sort first: touching intervals count as overlapping
        most = max(most, running)
    return Overlap(len(intervals), sum(overlapping), most)


# ---------------------------------------------------------------------------------------------------------------
# Checking a history
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Violation:
    """A property the history breaks, why, and the steps (seq) that show it, those that break it first; ``cause``
    names the event that broke it where the property has several ways to break that are different bugs
    (``stale_try``)."""

    property: str
    message: str
    seqs: tuple[int, ...]
    cause: str = ""


@attrs.frozen
class Completion:
    step: Step
    via: str


class History:
    """Indexes over a concurrent history for the property checks."""

    def __init__(self, trace: Trace):
        self.trace = trace
        self.params = trace.header.params
        self.steps = [step for step in trace.steps if step.timing.failure is None and step.timing.returned is not None]
        self.watches: dict[str, list[Step]] = defaultdict(list)
        self.completions: dict[str, list[Completion]] = defaultdict(list)
        for step in self.steps:
            command = step.command
            if isinstance(command, v.Watch) and step.observation.error is None:
                self.watches[command.op].append(step)
            for event in step.observation.events:
                if isinstance(event, v.Complete):
                    self.completions[event.op].append(Completion(step, event.via))
        self.advances = [step for step in self.steps if isinstance(step.command, v.Advance)]
        self.by_return = self.running_clock([step.timing.returned for step in self.advances])
        self.by_invocation = self.running_clock([step.timing.invoked for step in self.advances])
        #: the real-time allowances of a system on a real clock (a live recording's), None on the virtual clock
        self.live = trace.header.declarations.real_time
        self.early_ms, self.late_ms = (0, 0) if self.live is None else (self.live.early_ms, self.live.late_ms)

    def of(self, kind: type[v.Command]) -> Iterator[Step]:
        return (step for step in self.steps if isinstance(step.command, kind))

    def clock_before(self, time: int) -> int:
        """The least the clock can read at logical time ``time``: the last advance that returned before it."""
        return self.furthest(self.by_return, time)

    def clock_by(self, time: int) -> int:
        """The most the clock can read at ``time``: the furthest advance invoked before it."""
        return self.furthest(self.by_invocation, time)

    def furthest(self, clocks: tuple[list[int], list[int]], time: int) -> int:
        """The furthest ``to_ms`` of the advances before ``time`` in ``clocks`` (`running_clock`)."""
        before = bisect.bisect_left(clocks[0], time)
        return clocks[1][before - 1] if before else self.params.start_ms

    def running_clock(self, times: list[int | None]) -> tuple[list[int], list[int]]:
        """The advances' logical ``times`` in order, and the furthest ``to_ms`` up to each: a history with many
        advances (a live recording's) asks for the clock at every op. An advance without a time (one that never
        returned, for the times it returned at) is left out."""
        ordered = sorted((time, step.command.to_ms) for time, step in zip(times, self.advances) if time is not None)
        return [time for time, _ in ordered], list(itertools.accumulate(
            (to_ms for _, to_ms in ordered), max, initial=self.params.start_ms))[1:]

    def first(self, op: str) -> Step:
        return self.watches[op][0]

    def delay(self, op: str) -> int:
        return self.first(op).command.delay_ms

    def ready_on(self, op: str) -> int | None:
        return self.first(op).command.ready_on

    def cancel_before(self, op: str, time: float) -> Step | None:
        """A cancel of ``op``, or a cancel_key that returned it, that returned before ``time`` and was invoked after
        every watch of the op invoked before ``time`` had returned: a watch schedules the op after it watched its
        keys, so a cancel_key during the watch may come before the op is in the timer."""
        watches = [watch for watch in self.watches.get(op, ()) if watch.timing.invoked < time]
        return next((step for step in self.steps if step.timing.returned < time and (
            isinstance(step.command, v.Cancel) and step.command.op == op or
            isinstance(step.command, v.CancelKey) and op in (step.observation.result or ())) and all(
            watch.timing.returned < step.timing.invoked for watch in watches)), None)

    def cancelled_by(self, op: str, time: float) -> bool:
        """A cancel of ``op``, or a cancel_key that returned it, was invoked before ``time``."""
        return any(step.timing.invoked < time and
                   (isinstance(step.command, v.Cancel) and step.command.op == op or
                    isinstance(step.command, v.CancelKey) and op in (step.observation.result or ()))
                   for step in self.steps)


def check_history(trace: Trace) -> list[Violation]:
    """Every violation of the properties in the module docstring that ``trace`` (a concurrent history) shows."""
    if trace.header.threads is None:
        raise ValueError(f"trace {trace.trace_id!r} is not a concurrent history (its header has no threads)")
    history = History(trace)
    if history.live is not None:  # a live recording adds what only a real broker's counters show
        from kpurgatory.conformance.live.judge import LIVE_CHECKS

        return [violation for check in CHECKS + LIVE_CHECKS for violation in check(history)]
    return [violation for check in CHECKS for violation in check(history)]


def no_failure(history: History) -> Iterator[Violation]:
    for step in history.trace.steps:
        if step.timing.failure is not None:
            yield Violation("no_failure", f"{format_command(step.command)} on {step.timing.thread} raised "
                                          f"{step.timing.failure}", (step.seq,))
        elif step.timing.returned is None:
            yield Violation("no_failure", f"{format_command(step.command)} on {step.timing.thread} never returned "
                                          f"(deadlock or hang)", (step.seq,))


def exactly_once(history: History) -> Iterator[Violation]:
    for op, completions in history.completions.items():
        if len(completions) > 1:
            routes = ", ".join(f"via {c.via} in step {c.step.seq}" for c in completions)
            yield Violation("exactly_once", f"op {op} completed {len(completions)} times: {routes}",
                            tuple(c.step.seq for c in completions))
    for step in history.steps:
        events = step.observation.events
        for position, event in enumerate(events):
            completes_by_expiry = isinstance(event, v.Complete) and event.via == "expire"
            after = events[position + 1] if position + 1 < len(events) else None
            before = events[position - 1] if position else None
            if completes_by_expiry and after != v.Expire(event.op):
                yield Violation("exactly_once", f"op {event.op} completed via expire without its expire event "
                                                f"right after", (step.seq,))
            if isinstance(event, v.Expire) and before != v.Complete(event.op, "expire"):
                yield Violation("exactly_once", f"expire of op {event.op} does not follow its completion via expire",
                                (step.seq,))


def no_lost_op(history: History) -> Iterator[Violation]:
    dropped = {op for step in history.of(v.Shutdown) for op in step.observation.result or ()}
    ended = history.trace.steps[-1].timing.returned is not None and any(history.of(v.Shutdown))
    if not ended:  # a run cut short by a failure: ops may still be pending legitimately
        return
    for op, watches in history.watches.items():
        if not history.completions[op] and op not in dropped and not history.cancelled_by(op, float("inf")):
            yield Violation("no_lost_op", f"op {op} was watched but never completed, reported cancelled or dropped",
                            (watches[0].seq,))


def justified(history: History) -> Iterator[Violation]:
    for step in history.steps:
        for event in step.observation.events:
            if not isinstance(event, v.StaleTry):
                continue
            locked = [c for c in history.completions[event.op] if c.via == "check" or
                      c.via == "try" and isinstance(c.step.command, v.Watch)]
            if locked or not history.completions[event.op]:
                yield Violation("justified", f"{format_command(step.command)} called tryComplete on op {event.op}, "
                                             f"which " + (f"had completed under its lock in step {locked[0].step.seq}"
                                                          if locked else "never completed") + " (KAFKA-17848)",
                                (step.seq, *(c.step.seq for c in locked[:1])), "stale_try")
    for op, completions in history.completions.items():
        if op not in history.watches:
            yield Violation("justified", f"op {op} completed but was never watched", (completions[0].step.seq,))
            continue
        for completion in completions:
            step, command = completion.step, completion.step.command
            if not v.may_complete_via(command, v.Complete(op, completion.via)):
                yield Violation("justified", f"op {op} completed via {completion.via} in "
                                             f"{format_command(command)}", (step.seq,))
            elif isinstance(command, v.Check) and not any(
                    command.key in watch.command.keys and watch.timing.invoked < step.timing.returned
                    for watch in history.watches[op]):
                yield Violation("justified", f"op {op} completed by a check of {command.key}, a key it was never "
                                             f"watched on", (step.seq,))
            elif completion.via == "expire" and (cancel := history.cancel_before(op, step.timing.invoked)):
                yield Violation("justified", f"op {op} expired in {format_command(command)} after "
                                             f"{format_command(cancel.command)} had cancelled it (its timer entry was "
                                             f"left behind)", (cancel.seq, step.seq))
            elif completion.via in ("try", "check") and history.ready_on(op) is None and not any(
                    ready.command.op == op and ready.command.ready and ready.timing.invoked < step.timing.returned
                    for ready in history.of(v.SetReady)):
                yield Violation("justified", f"op {op} completed via {completion.via} but was never made ready",
                                (step.seq,))


def no_lost_wakeup(history: History) -> Iterator[Violation]:
    for ready in history.of(v.SetReady):
        op = ready.command.op
        if not ready.command.ready or any(not clear.command.ready and clear.command.op == op
                                          for clear in history.of(v.SetReady)):
            continue  # a condition that may have been cleared again owes no wakeup
        completions = history.completions[op]
        first = min((c.step for c in completions), key=lambda step: step.timing.invoked, default=None)
        for check in history.of(v.Check):
            key = check.command.key
            watches = [watch for watch in history.watches.get(op, ()) if key in watch.command.keys]
            if not ready.timing.precedes(check.timing) or not any(
                    watch.timing.invoked < check.timing.returned for watch in watches):
                continue
            if first is not None and not (check.timing.precedes(first.timing) and
                                          all(watch.timing.precedes(first.timing) for watch in watches)):
                continue
            if any(isinstance(step.command, v.CancelKey) and step.command.key == key and op in (
                    step.observation.result or ()) and step.timing.invoked < check.timing.returned
                   for step in history.steps):
                continue
            yield Violation("no_lost_wakeup", f"op {op} was ready and watched on {key}, but check({key}) left it "
                                              f"uncompleted", (ready.seq, check.seq) + ((first.seq,) if first else ()))
            break


def results(history: History) -> Iterator[Violation]:
    for step in history.steps:
        command, observation = step.command, step.observation
        routes = [(event.op, event.via) for event in observation.events if isinstance(event, v.Complete)]
        if isinstance(command, v.Check):
            expected = sum(via == "check" for _, via in routes)
        elif isinstance(command, (v.Force, v.Try, v.Watch)):
            if observation.error is not None:
                continue
            expected = (command.op, "force" if isinstance(command, v.Force) else "try") in routes
        else:
            continue
        if observation.result != expected:
            yield Violation("results", f"{format_command(command)} returned {observation.result!r} but its events "
                                       f"say {expected!r}", (step.seq,))


def on_time(history: History) -> Iterator[Violation]:
    tick = history.params.tick_ms
    for op, completions in history.completions.items():
        for completion in completions:
            if completion.via != "expire" or op not in history.watches:
                continue
            deadline = history.clock_before(history.first(op).timing.invoked) + history.delay(op)
            tick_start = deadline - deadline % tick
            clock = history.clock_by(completion.step.timing.returned)
            if clock < tick_start - history.early_ms:
                yield Violation("on_time", f"op {op} expired while the clock read at most {clock}, before the start "
                                           f"{tick_start} of its deadline's tick", (history.first(op).seq,
                                                                                    completion.step.seq))
    for advance in history.advances:
        for op, watches in history.watches.items():
            last = watches[-1]
            if not last.timing.precedes(advance.timing):
                continue
            deadline = history.clock_by(last.timing.returned) + history.delay(op)
            if deadline + history.late_ms > advance.command.to_ms or history.cancelled_by(op, advance.timing.returned):
                continue
            if not any(c.step.timing.invoked < advance.timing.returned for c in history.completions[op]):
                yield Violation("on_time", f"op {op} (deadline at most {deadline}) was still pending when "
                                           f"advance to {advance.command.to_ms} returned", (last.seq, advance.seq))
                break


def watcher_cleanup(history: History) -> Iterator[Violation]:
    ops = list(history.watches)
    if not ops or any(not history.completions[op] for op in ops):
        return
    all_done = max(c.step.timing.returned for op in ops for c in history.completions[op])
    keys = {key for watches in history.watches.values() for watch in watches for key in watch.command.keys}
    first_clear: dict[str, Step] = {}
    for step in history.of((v.Check, v.CancelKey)):
        if step.timing.invoked > all_done and step.command.key in keys:
            first_clear.setdefault(step.command.key, step)
    all_clear = max((step.timing.returned for step in first_clear.values()), default=all_done)
    expected: dict[type[v.Command], tuple[object, float]] = {
        v.Delayed: (0, all_done), v.Size: (0, all_done), v.Shutdown: ([], all_done)}
    if len(first_clear) == len(keys):
        expected |= {v.Watched: (0, all_clear), v.WatcherKeys: ([], all_clear)}
    purged = [step for step in history.of((v.Advance,)) if step.timing.invoked > all_done
              and any(event.kind == "purge" for event in step.observation.events)]
    swept = min((step.timing.returned for step in purged), default=None)
    for step in history.steps:
        value, after = expected.get(type(step.command), (None, None))
        if isinstance(step.command, v.Watched) and swept is not None and not rewatched(history, all_done, step):
            value, after = 0, min(swept, after if after is not None else swept)
        if after is not None and step.timing.invoked > after and step.observation.result != value:
            yield Violation("watcher_cleanup", f"{format_command(step.command)} read {step.observation.result!r} "
                                               f"after every op completed, expected {value!r}", (step.seq,))


def rewatched(history: History, since: float, read: Step) -> bool:
    """A watch call ran between ``since`` and the return of ``read``: it may have put entries back on the lists."""
    return any(step.timing.returned is None or (step.timing.returned > since
                                                 and step.timing.invoked < read.timing.returned)
               for step in history.of((v.Watch,)))


CHECKS: tuple[Callable[[History], Iterator[Violation]], ...] = (
    no_failure, exactly_once, no_lost_op, justified, no_lost_wakeup, results, on_time, watcher_cleanup)


# ---------------------------------------------------------------------------------------------------------------
# Shrinking a failing run
# ---------------------------------------------------------------------------------------------------------------

#: a smaller plan still fails if one of this many runs of it breaks a property (a race need not recur every time)
SHRINK_ATTEMPTS = 8
#: shrinking stops after this long, keeping the smallest failing run found
SHRINK_BUDGET_S = 150.0
#: a small plan is cheap to run, and a race in it has few chances to happen: it gets up to MAX_ATTEMPTS runs,
#: CHEAP_CALLS calls' worth
CHEAP_CALLS, MAX_ATTEMPTS = 2000, 200
def uncontrollable(system: SystemUnderTest) -> str:
    """Why ``system`` cannot run under a controlled scheduler."""
    if isinstance(system, SubprocessSystem):
        return ("its adapter does not list the 'scheduler' feature in its hello (specs/protocol.md, §3.4; Kafka's "
                "adapter lists it for the releases whose op lock it can make a point of: 0.11.0.2 on)")
    return ("its locks do not come from kpurgatory.impl.sync, as those of the built-in pure-Python implementation do "
            "(--impl kpurgatory.conformance.adapters.builtin:python; a system built on kpurgatory.impl's selected "
            "classes, with KPURGATORY_IMPL=python)")
#: under a controlled scheduler a candidate's runs are the failing schedule carried over, then a few fresh ones
CONTROLLED_ATTEMPTS = 4
#: under a controlled scheduler shrinking one failure stops after this many runs (scaled with the shrink budget)
CONTROLLED_SHRINK_RUNS = 600


def viable(plan: Plan) -> Plan:
    """``plan`` without the calls that refer to an op not watched in an earlier round, and without empty rounds."""
    watched: set[str] = set()
    rounds = []
    for calls in plan.rounds:
        kept = tuple((thread, command) for thread, command in calls
                     if isinstance(command, v.Watch) or getattr(command, "op", None) in (None, *watched))
        watched.update(command.op for _, command in kept if isinstance(command, v.Watch))
        if kept:
            rounds.append(kept)
    return Plan(plan.params, tuple(rounds))


def involved(history: Trace, violations: tuple[Violation, ...]) -> set[str]:
    """The ops the violations' steps name, and the keys those ops were watched on."""
    named = {seq for violation in violations for seq in violation.seqs}
    ops = {op for step in history.steps if step.seq in named
           for op in (getattr(step.command, "op", None), *(getattr(e, "op", None) for e in step.observation.events))
           if op is not None}
    return ops | {key for step in history.steps if isinstance(step.command, v.Watch) and step.command.op in ops
                  for key in step.command.keys}


def touches(command: v.Command, focus: set[str]) -> bool:
    return bool({getattr(command, "op", None), getattr(command, "key", None), *getattr(command, "keys", ())} & focus)


def smaller(plan: Plan, focus: set[str]) -> Iterator[Plan]:
    """Candidate reductions of ``plan``, boldest first: only the rounds that watch a ``focus`` op (rounds never
    overlap, so a race that loses an op is in its watch's round), those with the few rounds before them, only the
    rounds with a call on a ``focus`` op or key, without one thread, without a block of rounds (halves, quarters,
    … single rounds), without one call."""
    watching = [number for number, calls in enumerate(plan.rounds)
                if any(isinstance(command, v.Watch) and command.op in focus for _, command in calls)]
    for before in (0, 1, 2, 4, 8):
        kept = {number - back for number in watching for back in range(before + 1)}
        yield Plan(plan.params, tuple(calls for number, calls in enumerate(plan.rounds) if number in kept))
    yield Plan(plan.params, tuple(calls for calls in plan.rounds
                                  if any(touches(command, focus) for _, command in calls)))
    for thread in plan.threads:
        yield Plan(plan.params, tuple(tuple(call for call in calls if call[0] != thread) for calls in plan.rounds))
    size = len(plan.rounds) // 2
    while size >= 1:
        for start in range(0, len(plan.rounds), size):
            yield Plan(plan.params, plan.rounds[:start] + plan.rounds[start + size:])
        size //= 2
    for number, calls in enumerate(plan.rounds):
        for position in range(len(calls)):
            yield Plan(plan.params, plan.rounds[:number] + (calls[:position] + calls[position + 1:],)
                       + plan.rounds[number + 1:])


def broken(history: Trace) -> bool:
    """A call raised or never returned: the system cannot be driven further."""
    return any(step.timing.failure is not None or step.timing.returned is None for step in history.steps)


def deadline_after(seconds: float) -> Callable[[], bool]:
    """A budget of ``seconds`` from now."""
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() > deadline


def shrink(run: Callable[[Plan], Trace], plan: Plan, history: Trace, violations: tuple[Violation, ...], *,
           attempts: int = SHRINK_ATTEMPTS, budget_s: float = SHRINK_BUDGET_S,
           keeps: Callable[[Trace, tuple[Violation, ...]], bool] = lambda history, violations: bool(violations),
           max_attempts: int = MAX_ATTEMPTS, spent: Callable[[], bool] | None = None
           ) -> tuple[Plan, Trace, tuple[Violation, ...]]:
    """The smallest run found that still fails: greedily take the first smaller plan (fewer threads, fewer calls
    per thread) one of whose ``attempts`` runs (more for small plans) still fails — its history and violations
    ``keeps`` the failure (by default: it breaks some property) — until none does or ``budget_s`` is spent (or, if
    given, until ``spent()``: a budget that does not depend on the machine's speed). A run
    whose system raised or hung is not shrunk (the system is no longer usable)."""
    spent = spent or deadline_after(budget_s)
    if broken(history):
        return plan, history, violations
    #: the most runs a candidate needed to fail so far: a bug that shows every time needs few tries per candidate
    needed: int | None = None
    improved = True
    while improved and not spent():
        improved = False
        tried: set[Plan] = set()
        for candidate in map(viable, smaller(plan, involved(history, violations))):
            if candidate in tried or candidate.size() >= plan.size() or not candidate.rounds:
                continue
            tried.add(candidate)
            tries = min(max(attempts, CHEAP_CALLS // candidate.size()), max_attempts)
            for number in range(1, (tries if needed is None else min(tries, max(attempts, 4 * needed))) + 1):
                if spent():
                    return plan, history, violations
                attempt = run(candidate)
                if broken(attempt):
                    return plan, history, violations
                if keeps(attempt, found := tuple(check_history(attempt))):
                    plan, history, violations, improved = candidate, attempt, found, True
                    needed = max(needed or 0, number)
                    break
            if improved:
                break
    return plan, history, violations


def shrink_schedule(replay: Callable[[Schedule], Trace], history: Trace,
                    keeps: Callable[[Trace, tuple[Violation, ...]], bool], *, spent: Callable[[], bool]) -> Trace:
    """The failing ``history`` of a controlled run with as few switches as its failure needs: drop blocks of its
    schedule's switches (halves, quarters, … single ones) while the replay of what is left still ``keeps`` the
    failure, until ``spent()``; the switches a replay applied are the next schedule (a dropped switch can make a
    later one moot)."""
    switches = list(history.header.schedule.switches)
    size = max(1, len(switches) // 2)
    while switches and not spent():
        start = 0
        while start < len(switches) and not spent():
            candidate = attrs.evolve(history.header.schedule, switches=switches[:start] + switches[start + size:])
            attempt = replay(candidate)
            if not broken(attempt) and keeps(attempt, tuple(check_history(attempt))):
                history, switches = attempt, list(attempt.header.schedule.switches)
            else:
                start += size
        if size == 1:
            break
        size = max(1, size // 2)
    return history


@attrs.frozen
class Interleavings:
    """What the controlled runs of a check explored: how they were scheduled, how many distinct interleavings they
    ran, their points (where several threads were ready) and switches, and the distinct points reached (``kind role
    in function``)."""

    scheduling: Scheduling
    distinct: int = 0
    points: int = 0
    switches: int = 0
    reached: frozenset[str] = frozenset()
    #: an identity of every run's interleaving, in order: equal for checks that ran the same interleavings
    digest: str = ""

    def __str__(self) -> str:
        return (f"interleavings: {self.distinct:,} distinct under {self.scheduling} (digest {self.digest}); "
                f"{self.points:,} points, {self.switches:,} switches; {len(self.reached)} distinct switch points "
                f"reached")


# ---------------------------------------------------------------------------------------------------------------
# Telling failures apart: signatures, and Kafka's known races
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class KafkaRace:
    """A race Kafka shipped until ``ticket`` fixed it. A system that declares a release without the fix
    (``declarations.kafka_version``) and breaks a property this way has Kafka's bug: a finding, not a failure."""

    name: str
    ticket: str
    description: str

    @property
    def signature(self) -> Signature:
        return Signature("finding", "", self.name)

    def __str__(self) -> str:
        return f"Kafka finding ({self.name}, fixed by {self.ticket}): {self.description}"


STALE_TRY = KafkaRace("stale-try", "KAFKA-17848", "a check called tryComplete on an op that another call had "
                      "completed under the op's lock: before 4.0.0 safeTryComplete did not skip a completed op")
TRYLOCK_LOST_WAKEUP = KafkaRace(
    "trylock-lost-wakeup", "KAFKA-6653", "a check skipped a ready op whose lock another call held, and nobody tried "
    "it again: in 0.11.0.2 and 1.0.x a check took the op lock with tryLock and left no pending flag for the lock's "
    "holder to retry, so the op waited for its timeout")


def kafka_race(violation: Violation, history: Trace, release: Release) -> KafkaRace | None:
    """The race of ``release`` that ``violation`` shows, if it is one Kafka shipped in that release."""
    if violation.cause == "stale_try" and not release.has(STALE_TRY.ticket):
        return STALE_TRY
    if (violation.property == "no_lost_wakeup" and release.has("KAFKA-5970")
            and not release.has(TRYLOCK_LOST_WAKEUP.ticket) and skipped_while_held(violation, history)):
        return TRYLOCK_LOST_WAKEUP
    return None


def skipped_while_held(violation: Violation, history: Trace) -> bool:
    """The check that left the ready op behind (a no_lost_wakeup violation's second step) overlapped a call that
    may have held the op's lock inside its tryComplete: a watch or try of the op, or a check of a key it is watched
    on. Only then could a tryLock have failed."""
    steps = {step.seq: step for step in history.steps}
    op, check = steps[violation.seqs[0]].command.op, steps[violation.seqs[1]]
    keys = {key for step in history.steps if isinstance(step.command, v.Watch) and step.command.op == op
            for key in step.command.keys}

    def may_hold(command: v.Command) -> bool:
        return (isinstance(command, (v.Watch, v.Try)) and command.op == op or
                isinstance(command, v.Check) and command.key in keys)

    return any(step is not check and may_hold(step.command) and not step.timing.precedes(check.timing)
               and not check.timing.precedes(step.timing) for step in history.steps)


def signature(violation: Violation, history: Trace) -> Signature:
    """What tells ``violation``'s bug from others: the property it breaks and the commands of the (at most two) calls
    it names first, or, when it has a cause, the cause and the command of the call where it showed (whoever
    completed the op meanwhile is circumstance), and for a double completion the property alone (which calls raced
    to complete the op is circumstance too); for a call that failed, how (hung, or the class it raised) and in
    which command."""
    if violation.property == "exactly_once" and len(violation.seqs) > 1:
        return Signature("breaks", "", violation.property)
    steps = {step.seq: step for step in history.steps}
    named = [steps[seq] for seq in violation.seqs[:1 if violation.cause else 2]]
    if violation.property == "no_failure":
        failure = named[0].timing.failure
        if failure is None or failure.startswith(HUNG):
            return Signature("hung", named[0].command.name, "")
        return Signature("raised", named[0].command.name, failure.partition(":")[0])
    detail = violation.property + (f" ({violation.cause})" if violation.cause else "")
    return Signature("breaks", "+".join(sorted({step.command.name for step in named})), detail)


def label(signature: Signature) -> str:
    """A concurrent failure's signature in words."""
    if signature.kind == "breaks" and signature.command:
        return f"breaks {signature.detail} in {signature.command}"
    return str(signature)


def classify(history: Trace, violations: tuple[Violation, ...], release: Release
             ) -> dict[Signature, tuple[KafkaRace | None, tuple[Violation, ...]]]:
    """``violations`` by signature, in order (a Kafka race of ``release`` under its finding's): each signature's
    race, if it is one, and its violations."""
    groups: dict[Signature, tuple[KafkaRace | None, tuple[Violation, ...]]] = {}
    for violation in violations:
        race = kafka_race(violation, history, release)
        key = race.signature if race is not None else signature(violation, history)
        groups[key] = (race, groups.get(key, (race, ()))[1] + (violation,))
    return groups


# ---------------------------------------------------------------------------------------------------------------
# The concurrent check and its report
# ---------------------------------------------------------------------------------------------------------------

#: how many distinct failures `run_concurrent_check` reports before it stops (kpurgatory check passes --max-failures)
MAX_FAILURES = 1


@attrs.frozen
class RaceReport:
    """One distinct failure (or Kafka finding) of a concurrent check: its signature, the history that showed it
    first (shrunk, if it was a random run) with the history's violations, where it was written, how many calls it
    had before shrinking, and how many later histories failed with the same signature (``repeats``)."""

    signature: Signature
    history: Trace
    violations: tuple[Violation, ...]
    finding: KafkaRace | None = None
    path: Path | None = None
    shrunk_from: int | None = None
    repeats: int = 0


@attrs.frozen
class ConcurrentResult:
    """The verdict of a concurrent check: the race schedules and random runs done, the overlap their calls reached,
    every distinct failure and Kafka finding (`RaceReport`), and, for callers that want one, the first that fails
    the check: its history, violations, path and size before shrinking."""

    passed: bool
    seed: int
    implementation: str
    threads: int
    runs: int
    calls: int
    elapsed_s: float
    history: Trace | None = None
    violations: tuple[Violation, ...] = ()
    history_path: Path | None = None
    overlap: Overlap = Overlap()
    #: race schedules played (None: the system has no gates, so none could run)
    schedules: int | None = None
    #: calls in the failing history before it was shrunk
    shrunk_from: int | None = None
    failures: tuple[RaceReport, ...] = ()
    findings: tuple[RaceReport, ...] = ()
    #: (schedule, what happened) for each race schedule skipped or not played as written
    schedule_notes: tuple[tuple[str, str], ...] = ()
    #: why the check stopped before its budget: the system could not be made afresh after it failed
    aborted: str | None = None
    #: what the runs explored, when a controlled scheduler ran them
    interleavings: Interleavings | None = None
    #: the lock changes of the declared Kafka release the points reached tell apart
    lock_sides: tuple[LockSide, ...] = ()


class Target:
    """The system under test of a concurrent check, made afresh (`renew`) after it hung or failed."""

    def __init__(self, factory: Callable[[], SystemUnderTest]):
        self.factory = factory
        self.system, self.hung = factory(), False
        try:
            self.hello = self.system.hello()
        except BaseException:
            self.system.close()
            raise
        self.driver = driver_for(self.system, self.hello)

    def seen(self, history: Trace) -> None:
        """Note whether ``history`` left a call of the system running."""
        self.hung = self.hung or any(step.timing.returned is None for step in history.steps)

    def renew(self) -> None:
        """A fresh system in place of one that failed: an adapter is closed (its process group killed); an
        in-process system that hung is abandoned (its threads may hold its locks), any other closed. Raises what
        the factory or hello raises."""
        if isinstance(self.system, SubprocessSystem) or not self.hung:
            with contextlib.suppress(Exception):
                self.system.close()
        self.system, self.hung = self.factory(), False
        self.driver = driver_for(self.system, self.system.hello())

    def close(self) -> None:
        if isinstance(self.system, SubprocessSystem) or not self.hung:
            self.system.close()


def run_concurrent_check(system_factory: Callable[[], SystemUnderTest], *, threads: int, runs: int, steps: int,
                         seed: int | None = None, timeout: float = 10.0, out_dir: str | Path | None = None,
                         on_run: Callable[[int, int], None] | None = None,
                         shrink_budget_s: float = SHRINK_BUDGET_S, max_failures: int = MAX_FAILURES,
                         fail_on_findings: bool = False, corpus: str | Path | None = None,
                         scheduling: Scheduling | None = None) -> ConcurrentResult:
    """First the race schedules (`kpurgatory.conformance.check.schedules`, if the system has gates; those using a
    command the system's hello lists as unsupported are skipped), then the purgatory runs of the shared ``corpus``
    folder the system can be sent (`conformance.check.corpus`; each as `corpus_plan`, unshrunk: they were shrunk
    when found), then ``runs`` random plans of ``threads`` workers and ``steps`` rounds each (from ``seed``), each a
    fresh run (init) of one system.

    A history that breaks a property is judged by signature (`signature`): one whose every signature was reported
    already counts as passing, so the check goes on to other bugs; a new one is shrunk (a random run, for up to
    ``shrink_budget_s``, keeping that signature) and reported, until ``max_failures`` distinct failures are found.
    A race Kafka shipped in the release the system declares (`kafka_race`) is a finding, reported apart; findings
    fail the check only with ``fail_on_findings``. Each reported history is written to ``out_dir`` as
    ``TRACE-ID.jsonl`` with its table as ``.txt`` and its page (`traces.view`) as ``.html``. A system that hung or
    failed is made afresh for what follows; one that cannot be ends the check (``aborted``). ``on_run(runs so far,
    calls so far)`` reports progress.

    With ``scheduling``, a controlled scheduler runs every run (`kpurgatory.conformance.check.scheduler`; the system
    must be ``controllable``), each from a seed drawn from ``seed``: the same seed gives the same histories. The
    race schedules are not played (the scheduler explores the interleavings itself); a failing run's plan is shrunk,
    then its schedule (`shrink_schedule`), for a count of runs (``CONTROLLED_SHRINK_RUNS``, scaled as
    ``shrink_budget_s`` is to its default), so that the same seed shrinks alike on any machine."""
    from kpurgatory.conformance.check import corpus as shared
    from kpurgatory.conformance.check.schedules import SCHEDULES, run_schedule

    seed = random.randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    started, calls, measured, run = time.monotonic(), 0, Overlap(), 0
    target = Target(system_factory)
    hello = target.hello
    release = hello.declarations.release
    known: dict[Signature, int] = {}
    reports: list[RaceReport] = []
    notes: list[tuple[str, str]] = []
    aborted = played = None
    explored = Interleavings(scheduling) if scheduling is not None else None
    interleavings: set[str] = set()
    def scheduler(*origin: object) -> Scheduler | None:
        """The scheduler of a run, its seed drawn from the check's seed and where the run comes from (a run's
        number, a shrinking attempt's), so that no run's seed depends on how long another took to shrink."""
        if scheduling is None:
            return None
        return scheduling.scheduler(random.Random(" ".join(map(str, (seed, *origin)))).randrange(2**32))

    def explore(history: Trace, used: Scheduler | None) -> None:
        nonlocal explored
        if used is not None:
            interleavings.add(used.interleaving)
            explored = attrs.evolve(explored, distinct=len(interleavings), points=explored.points + used.points,
                                    switches=explored.switches + len(used.switches),
                                    reached=explored.reached | used.reached,
                                    digest=hashlib.blake2b(f"{explored.digest}{used.interleaving}".encode(),
                                                           digest_size=8).hexdigest())
    try:
        if "purgatory" not in hello.profiles:
            raise ValueError(f"{hello.implementation} does not implement the purgatory profile the concurrent check "
                             f"drives")
        if scheduling is not None and not getattr(target.system, "controllable", False):
            raise ValueError(f"{hello.implementation} cannot run under the controlled scheduler: "
                             f"{uncontrollable(target.system)}")

        def new_failure(history: Trace) -> tuple[Signature, KafkaRace | None, tuple[Violation, ...]] | None:
            """The first signature of ``history``'s violations not reported yet, its race and violations; the
            known ones count as met again."""
            groups = classify(history, tuple(check_history(history)), release)
            for key in groups.keys() & known.keys():
                known[key] += 1
            fresh = next((key for key in groups if key not in known), None)
            return None if fresh is None else (fresh, *groups[fresh])

        def record(history: Trace, key: Signature, race: KafkaRace | None, shrunk_from: int | None = None) -> None:
            violations, path = tuple(check_history(history)), None
            if out_dir is not None:
                path = write_traces(Path(out_dir) / f"{history.trace_id}.jsonl", history)
                path.with_suffix(".txt").write_text(render(history, violations))
                from kpurgatory.conformance.traces.view import write_view  # the view imports this module

                write_view(path.with_suffix(".html"), history, violations={history.trace_id: violations})
            reports.append(RaceReport(key, history, violations, race, path, shrunk_from))
            known[key] = 0

        def enough() -> bool:
            return aborted is not None or sum(report.finding is None for report in reports) >= max_failures

        def after(histories: list[Trace]) -> str | None:
            """Make the system afresh if one of ``histories`` left it failed; why it could not be, if so."""
            for history in histories:
                target.seen(history)
            if any(map(broken, histories)):
                try:
                    target.renew()
                except Exception as error:  # noqa: BLE001 - the system's failure ends the check, reported
                    return f"the system could not be made afresh after it failed: {type(error).__name__}: {error}"
            return None

        if scheduling is not None:
            notes.append(("all", "not played: the controlled scheduler explores the interleavings itself"))
        elif target.driver.gated:
            played = 0
            for schedule in SCHEDULES:
                if enough():
                    break
                if lacking := hello.unable(schedule.commands):
                    notes.append((schedule.name, f"skipped: uses {', '.join(lacking)}, unsupported by the adapter"))
                    continue
                outcome = run_schedule(target.system, hello, target.driver, schedule, timeout=timeout)
                played += 1
                calls += len(outcome.history.steps)
                if outcome.deviation is not None:
                    notes.append((schedule.name, outcome.deviation))
                if found := new_failure(outcome.history):
                    record(outcome.history, *found[:2])
                aborted = after([outcome.history])
        for number, (params, commands) in enumerate(shared.load(corpus, "purgatory", hello) if corpus else (), 1):
            if enough():
                break
            history = execute(target.system, hello, corpus_plan(params, commands, hello), timeout=timeout,
                              trace_id=f"corpus-{number}", driver=target.driver,
                              scheduler=(used := scheduler("corpus", number)))
            explore(history, used)
            calls += len(history.steps)
            if found := new_failure(history):
                record(history, *found[:2])
            aborted = after([history])
        while run < runs and not enough():
            run += 1
            plan = plan_run(rng, threads, steps, hello.unsupported, hello.declarations.watcher_shards)
            history = execute(target.system, hello, plan, timeout=timeout, trace_id=f"concurrent-{seed}-{run}",
                              driver=target.driver, scheduler=(used := scheduler("run", run)))
            explore(history, used)
            measured += overlap(history)
            calls += len(history.steps)
            if on_run is not None:
                on_run(run, calls)
            attempts = [history]
            if found := new_failure(history):
                key, race, violations = found
                size = len(history.steps)

                #: the smallest failing run so far, and the candidate plan last run (with its tries so far)
                best, trying = [plan, history], [None, 0]

                def rerun(candidate: Plan) -> Trace:
                    trying[:] = [candidate, trying[1] + 1 if candidate == trying[0] else 1]
                    used = scheduler("run", run, "shrink", len(attempts))
                    if used is not None and trying[1] == 1:  # first, the failing schedule carried over
                        used = replaying(carried(best[1].header.schedule, list(best[0].rounds),
                                                 list(candidate.rounds)))
                    attempts.append(execute(target.system, hello, candidate, timeout=timeout, driver=target.driver,
                                            trace_id=history.trace_id, scheduler=used))
                    return attempts[-1]

                def keeps(attempt: Trace, found: tuple[Violation, ...]) -> bool:
                    if kept := key in classify(attempt, found, release):
                        best[:] = [trying[0], attempt]
                    return kept

                #: under the scheduler shrinking is bounded by a count of runs, so it ends alike on any machine
                counted = (None if scheduling is None else
                           lambda: len(attempts) > CONTROLLED_SHRINK_RUNS * shrink_budget_s / SHRINK_BUDGET_S)
                _, shrunk, _ = shrink(rerun, plan, history, violations, budget_s=shrink_budget_s, keeps=keeps,
                                      spent=counted,
                                      **({} if scheduling is None else {"max_attempts": CONTROLLED_ATTEMPTS}))
                if scheduling is not None:
                    def replay(schedule: Schedule) -> Trace:
                        attempts.append(execute(target.system, hello, scheduled_plan(shrunk), timeout=timeout,
                                                driver=target.driver, trace_id=shrunk.trace_id,
                                                scheduler=replaying(schedule)))
                        return attempts[-1]

                    shrunk = shrink_schedule(replay, shrunk, keeps, spent=counted)
                record(shrunk, key, race, size if size > len(shrunk.steps) else None)
            aborted = after(attempts)
    finally:
        target.close()
    reports = [attrs.evolve(report, repeats=known[report.signature]) for report in reports]
    failures = tuple(report for report in reports if report.finding is None)
    findings = tuple(report for report in reports if report.finding is not None)
    failing = failures + (findings if fail_on_findings else ())
    first = failing[0] if failing else None
    return ConcurrentResult(
        not failing and aborted is None, seed, hello.implementation, threads, run, calls, time.monotonic() - started,
        first and first.history, first.violations if first else (), first and first.path, measured, played,
        first and first.shrunk_from, failures, findings, tuple(notes), aborted, explored,
        lock_sides(hello.declarations.kafka_version, explored.reached) if explored is not None else ())


def history_table(history: Trace, violations: tuple[Violation, ...], context: int | None = 3) -> Table:
    """The steps the violations name, with ``context`` steps either side (None: every step); ✗ marks the named."""
    named = {seq for violation in violations for seq in violation.seqs}
    shown = [step for step in history.steps if context is None or
             any(abs(step.seq - seq) <= context for seq in named)]
    table = Table(title=f"history {markup(history.trace_id)} ({history.header.threads} threads; logical times)")
    for column in ("seq", "thread", "invoked", "returned", "command", "observation", ""):
        table.add_column(column, overflow="fold")
    previous = 0
    for step in shown:
        if step.seq > previous + 1:
            table.add_row("…", "", "", "", "", "", "")
        timing = step.timing
        observation = (f"raised {timing.failure}" if timing.failure else
                       "never returned" if timing.returned is None else format_observation(step.observation))
        table.add_row(str(step.seq), timing.thread, str(timing.invoked), str(timing.returned),
                      format_command(step.command), observation, "✗" if step.seq in named else "")
        previous = step.seq
    return table


def violations_table(violations: tuple[Violation, ...]) -> Table:
    table = Table(title="violations")
    for column in ("property", "what happened", "steps"):
        table.add_column(column, overflow="fold")
    for violation in violations:
        table.add_row(violation.property, violation.message, ", ".join(map(str, violation.seqs)))
    return table


def render(history: Trace, violations: tuple[Violation, ...]) -> str:
    """The violations and the whole history as plain text."""
    console = Console(file=io.StringIO(), width=180, color_system=None)
    console.print(violations_table(violations))
    console.print(history_table(history, violations, context=None))
    return console.file.getvalue()


@attrs.frozen
class LockSide:
    """A lock change of Kafka's (`model.releases`, a rule with points) as a controlled check saw it: which of its
    points the check reached, and which the declared release reaches."""

    rule: Rule
    reached: frozenset[str]
    shipped: frozenset[str]

    @property
    def as_declared(self) -> bool:
        return self.reached == self.shipped

    @property
    def side(self) -> str | None:
        """The side the points show: the side of the one reached; with none reached, the side without a point;
        None when both sides have a point and the check reached both or neither."""
        after, before = self.rule.point in self.reached, self.rule.point_before in self.reached
        if after != before:
            return "after" if after else "before"
        if after:
            return None
        return "before" if self.rule.point_before is None else "after" if self.rule.point is None else None

    def __str__(self) -> str:
        seen = "; ".join(f"{'reached' if point in self.reached else 'never reached'} '{point}'"
                         for point in (self.rule.point, self.rule.point_before) if point is not None)
        told = f"{self.side}, as declared" if self.as_declared else "not the declared release's side"
        return f"{self.rule.ticket} ({self.rule.title}): {told} ({seen})"


def lock_sides(kafka_version: str | None, reached: frozenset[str]) -> tuple[LockSide, ...]:
    """The lock changes a controlled check of a system declaring ``kafka_version`` tells apart (none for a system
    that declares no release: its locks are its own)."""
    if kafka_version is None:
        return ()
    return tuple(LockSide(rule, rule.points & reached, points_shown(rule, kafka_version))
                 for rule in RULES if rule.points)


#: how many of the switch points reached a report lists
SHOWN_POINTS = 24


def print_result(console: Console, result: ConcurrentResult, rerun: str, fail_on_findings: bool = False) -> None:
    def plain(text: str) -> None:
        """Paths, commands and the system's own words: never styled or wrapped."""
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    table = Table(title=f"concurrent check of {markup(result.implementation)}")
    for column in ("threads", "race schedules", "runs", "calls", "overlapping", "most at once", "failures",
                   "findings", "time", "verdict"):
        table.add_column(column)
    measured = result.overlap
    played = ("scheduler" if result.interleavings is not None else "no gates" if result.schedules is None
              else str(result.schedules))
    table.add_row(str(result.threads), played,
                  str(result.runs), f"{result.calls:,}", f"{measured.fraction:.0%}" if measured.calls else "-",
                  str(measured.most) if measured.calls else "-", str(len(result.failures)),
                  str(len(result.findings)), f"{result.elapsed_s:.1f} s",
                  "[green]pass[/]" if result.passed else "[bold red]FAIL[/]")
    console.print(table)
    plain(f"random runs' {measured}")
    if result.interleavings is not None:
        plain(str(result.interleavings))
        reached = sorted(result.interleavings.reached)
        plain("switch points reached: " + ", ".join(reached[:SHOWN_POINTS])
              + (f", … ({len(reached) - SHOWN_POINTS} more)" if len(reached) > SHOWN_POINTS else ""))
        for side in result.lock_sides:
            plain(f"lock rule {side}")
    for name, note in result.schedule_notes:
        plain(f"race schedules: {note}" if name == "all" else f"race schedule {name}: {note}")
    for report in result.findings + result.failures:
        failing = report.finding is None or fail_on_findings
        console.rule(f"[bold {'red' if failing else 'yellow'}]purgatory (concurrent): "
                     + markup(report.finding.name if report.finding else label(report.signature)))
        if report.finding is not None:
            plain(str(report.finding))
        if report.shrunk_from is not None:
            plain(f"shrunk from {report.shrunk_from} to {len(report.history.steps)} calls")
        if (schedule := report.history.header.schedule) is not None:
            switches = len(schedule.switches)
            plain(f"schedule: {schedule.strategy} seed {schedule.seed}, "
                  f"{switches} switch{'' if switches == 1 else 'es'} from the default order; replay it: kpurgatory replay {report.path or 'HISTORY.jsonl'}")
        console.print(violations_table(report.violations))
        console.print(history_table(report.history, report.violations))
        plain(f"met again in {report.repeats} later {'history' if report.repeats == 1 else 'histories'}")
        if report.path is not None:
            plain(f"history:        {report.path}\nwhole table:    {report.path.with_suffix('.txt')}\n"
                  f"view:           {report.path.with_suffix('.html')}\n"
                  f"check it:       kpurgatory check-history {report.path}")
    if result.failures or result.findings:
        plain(f"{counted(len(result.failures), 'distinct failure')}, {counted(len(result.findings), 'Kafka finding')}")
    if result.aborted is not None:
        plain(f"stopped early: {result.aborted}")
    if not result.passed:
        plain(f"re-run:         {rerun}")


def check_concurrently(factory: Callable[[], SystemUnderTest], *, threads: int, runs: int, steps: int, seed: int,
                       timeout: float, out: Path, rerun: str, max_failures: int = MAX_FAILURES,
                       fail_on_findings: bool = False, corpus: Path | None = None,
                       scheduling: Scheduling | None = None) -> ConcurrentResult:
    """`kpurgatory check --threads N`: the concurrent check with a progress bar and the report."""
    console = command_console()
    if scheduling is None:
        how = (f"the race schedules, then {runs} runs of {steps} rounds, each round {threads} worker threads (one or "
               f"two calls in flight each) and a clock thread started together")
    else:
        how = (f"{runs} runs of {steps} rounds, each round {threads} worker threads (one or two calls each) and a "
               f"clock thread, one at a time under {scheduling}")
    console.print(f"checking concurrently: {how}; seed {seed}", markup=False, highlight=False)
    with Progress(TextColumn("purgatory (concurrent)"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[calls]:,} calls"), TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("runs", total=runs, calls=0)
        result = run_concurrent_check(factory, threads=threads, runs=runs, steps=steps, seed=seed, timeout=timeout,
                                      out_dir=out, max_failures=max_failures, fail_on_findings=fail_on_findings,
                                      corpus=corpus, scheduling=scheduling,
                                      on_run=lambda done, calls: progress.update(task, completed=done, calls=calls))
    print_result(console, result, rerun, fail_on_findings)
    return result


def exit_code(result: ConcurrentResult) -> int:
    """0 passed, 1 the system failed, 3 the system could not be made afresh after it failed, and nothing else
    failed."""
    return 0 if result.passed else 1 if result.history is not None else 3


def failure_text(result: ConcurrentResult) -> str:
    """What failed a concurrent check as plain text (for a JUnit report): each failure's violations and history."""
    reports = result.failures or result.findings
    text = "\n".join([f"{label(report.signature)}: {report.violations[0].message}" for report in reports]
                     + [f"--- {label(report.signature)}" + (f" ({report.path})" if report.path else "") + "\n"
                        + render(report.history, report.violations) for report in reports])
    return text or result.aborted or "failed"


def replay_schedules(files: dict[Path, list[Trace]], impl: str | None, adapter: str | None, timeout: float,
                     fail_on_findings: bool = False) -> int:
    """`kpurgatory replay` of histories a controlled scheduler ran: each run again under its schedule on a fresh
    system (--impl or --adapter; by default the built-in implementation that recorded it), compared with the
    recording call by call and checked. Returns the exit code: 0 every replay passes (Kafka findings aside, unless
    ``fail_on_findings``), 1 one breaks a property, 2 the system cannot be scheduled, or none was given for a history
    another system recorded."""
    from kpurgatory.conformance.adapters import BUILTIN, BUILTIN_PYTHON, system_factory
    from kpurgatory.conformance.adapters.builtin import PythonAdapter, factory

    built_ins = {factory().hello().implementation: BUILTIN, PythonAdapter().hello().implementation: BUILTIN_PYTHON}
    console = command_console()
    failed = 0
    for trace in (trace for traces in files.values() for trace in traces):
        if not (impl or adapter or trace.header.implementation in built_ins):
            click.echo(f"Error: {safe(trace.trace_id)} was recorded by {safe(trace.header.implementation)}, not by a "
                       "built-in implementation: give the system to replay it on (--adapter COMMAND, --kafka VERSION "
                       "or --impl MODULE:FACTORY)", err=True)
            return 2
        system = system_factory(None if adapter else impl or built_ins[trace.header.implementation], adapter, timeout)()
        try:
            hello = system.hello()
            if not getattr(system, "controllable", False):
                click.echo(f"Error: {safe(hello.implementation)} cannot run under a controlled scheduler: "
                           f"{uncontrollable(system)}", err=True)
                return 2
            again, differs = replay_history(system, hello, trace, timeout=timeout)
        finally:
            system.close()
        schedule = trace.header.schedule
        switches = len(schedule.switches)
        console.print(f"{markup(trace.trace_id)}: replayed under its schedule ({markup(schedule.strategy)} seed "
                      f"{schedule.seed}, {switches} switch{'' if switches == 1 else 'es'}): "
                      + ("the same history, call for call" if differs is None else
                         f"[yellow]differs from the recording from step {differs.seq}[/] "
                         f"({markup(format_command(differs.command))})"))
        violations = tuple(check_history(again))
        races = [kafka_race(violation, again, again.header.declarations.release) for violation in violations]
        failing = sum(race is None for race in races)
        console.print(f"  {len(again.steps)} calls: " + ("[green]pass[/]" if not violations else
                      f"[bold red]FAIL[/] ({failing} violations)" if failing else "[yellow]Kafka findings[/]"))
        if violations:
            console.print(violations_table(violations))
            console.print(history_table(again, violations))
        failed += bool(failing or violations and fail_on_findings)
    return 1 if failed else 0


@click.command("check-history")
@click.argument("histories", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--all-steps", is_flag=True, help="Show every step of a failing history.")
def check_history_command(histories, all_steps):
    """Check concurrent histories (traces whose header has threads) against the concurrency properties.

    Any harness may record them, in any language: see specs/protocol.md, "Concurrent histories". A violation that is
    a race Kafka shipped in the release the history's header declares (its ``kafka_version``) is a Kafka finding,
    shown but not failing. Exits 0 when every history satisfies every property but for such findings, 1 when one
    does not, 2 on malformed input."""
    files = read_for_command(histories, concurrent=True)
    loaded = [trace for traces in files.values() for trace in traces]
    console = command_console()
    found, failed = {}, 0
    for trace in loaded:
        violations = found[trace.trace_id] = tuple(check_history(trace))
        races = {violation: kafka_race(violation, trace, trace.header.declarations.release)
                 for violation in violations}
        failing = sum(race is None for race in races.values())
        names = sorted({race.name for race in races.values() if race is not None})
        verdict = ("[green]pass[/]" if not violations else f"[bold red]FAIL[/] ({failing} violations)" if failing
                   else f"[yellow]Kafka findings[/] ({markup(', '.join(names))})")
        console.print(f"{markup(trace.trace_id)}: {len(trace.steps)} calls on {trace.header.threads} threads, "
                      f"{overlap(trace)}: {verdict}")
        if violations:
            console.print(violations_table(violations))
            console.print(history_table(trace, violations, context=None if all_steps else 3))
        failed += bool(failing)
    console.print(f"{len(loaded) - failed} passed, {failed} failed")
    from kpurgatory.conformance.traces.view import view_failures  # the view imports this module

    view_failures(files, violations=found)
    sys.exit(1 if failed else 0)
