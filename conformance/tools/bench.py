"""``kpurgatory bench``: kpurgatory.impl against the model and against what Python offers out of the box.

Every workload runs on a virtual millisecond clock starting at 0, with tick 1 ms and wheel size 20. Within ms ``t``:
first the events scheduled for the start of ``t``, then the arrivals of ``t``, then an advance to ``t + 1`` that
drains every due bucket. The random plan of a workload (delays, cancel times, keys) is drawn from the seed before the
clock starts, so every implementation replays exactly the same plan and only the replay is timed.

* **T1 timer-churn** — for t in [0, 20 000): 10 tasks with delay uniform in [1, 30 000]; each, with probability 0.99,
  is cancelled at the start of ms ``t + c`` (c uniform in [1, 200]) if it has not fired yet (with tick 1 a task fires
  exactly at its expiration, so "not fired" is ``c < delay``); then 1 ms steps until nothing is pending.
  ops = adds + cancels of pending tasks + expirations.
* **T2 timer-expire** — 200 000 tasks at t = 0 with delay uniform in [1, 1000], then 1 ms steps to 1000.
  ops = adds + expirations; every task must fire exactly at its expiration (checked).
* **P1 produce-like purgatory** — purge interval 1000, keys k0..k999; for t in [0, 10 000): 10 operations, each
  watching 3 distinct random keys with delay 30 000 and not ready; each, with probability 0.99, becomes ready at the
  start of ms ``t + r`` (r uniform in [1, 50]) and check_and_complete is then called on one of its keys, chosen at
  random; the others expire. ops = completions (100 000). Reports purges and the largest ``watched()``.

Implementations: ``compiled`` and ``python`` (kpurgatory.impl's two implementations, virtual-clock mode: the same code
as the threaded mode, locks included),
``model`` (kpurgatory.model's classes), ``heapq`` (conformance.tools.baselines.HeapqTimer and SimplePurgatory over it)
and ``asyncio`` (loop.call_at timers, SimplePurgatory over them). ``vs heapq`` is ops/s over heapq's ops/s.

Memory is measured in a separate, untimed pass under tracemalloc: the bytes allocated since the start of the replay
at the moment the number of pending items (tasks or operations in the timer) peaks, divided by that number. It counts
everything the replay keeps alive for them, the caller's task objects included.

The advance-cost table answers "does an advance cost more when more is pending?": a T1 churn window of 2 000 ms runs
over a background of 10 000 or 100 000 long tasks (delays in [10^6, 2*10^6], never due in the window), and the mean
CPU time of one advance is reported.

With ``--kafka VERSION`` the same plans also run through that Kafka release's own classes (TimingWheel and
TimerTaskList under a virtual-clock timer built like SystemTimer; DelayedOperationPurgatory for P1) in a JVM beside
this process (conformance/kafka/bench): the plan is written once as a file both sides read, the JVM replays it
``--kafka-warmup`` times untimed (the JIT's warm-up), then once per round after the others. It times itself (CPU time
of its replaying thread plus the serial collector's pauses) and measures bytes per pending item from its heap after
full collections, at the same peak as the tracemalloc pass. The row is ``kafka VERSION (JVM)``.

Times are CPU seconds of the benchmark process (``time.process_time``), so the load of other processes on a shared
machine stays out of the comparison as far as possible; every implementation runs in the same process, one after the
other, with the same plan, and ``--rounds`` interleaves them (round 1 runs each once, then round 2, ...) and shows
each one's median. ``--scale`` shrinks the counts (not the delays) for smoke runs; ``--profile`` prints the cProfile
hot spots of kpurgatory.impl's implementations.
"""

from __future__ import annotations

import contextlib
import cProfile
import functools
import gc
import io
import itertools
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from array import array
from pathlib import Path
from typing import IO, Callable

import attrs
import click
from rich.console import Console
from rich.table import Table

from kpurgatory.conformance.adapters import kafka
from kpurgatory.conformance.tools.baselines import AsyncioTimer, BaselineTask, HeapqTimer, SimpleOperation, SimplePurgatory
from kpurgatory.impl import IMPLEMENTATIONS as IMPL_NAMES
from kpurgatory.impl import implementation
from kpurgatory.model import vocabulary as v
from kpurgatory.model.purgatory import DelayedOperation as ModelOperation
from kpurgatory.model.purgatory import DelayedOperationPurgatory as ModelPurgatory
from kpurgatory.model.purgatory import Journal
from kpurgatory.model.timer import SystemTimer as ModelTimer
from kpurgatory.model.timer import TimerTask as ModelTask
from kpurgatory.conformance.terminal import command_console, markup, safe

IMPLEMENTATIONS = (*IMPL_NAMES, "model", "heapq", "asyncio")
WORKLOADS = ("T1", "T2", "P1")
TICK_MS, WHEEL_SIZE, PURGE_INTERVAL = 1, 20, 1000


def _noop(*args: object) -> None:
    pass


# ---------------------------------------------------------------------------------------------------------------
# Rigs: one uniform face per implementation
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class TimerRig:
    task: Callable[[int], object]  # delay_ms -> a new task whose run calls fire(delay_ms)
    add: Callable[[object], None]
    cancel: Callable[[object], None]
    advance_to: Callable[[int], object]
    size: Callable[[], int]
    close: Callable[[], object] = _noop


@attrs.frozen
class PurgatoryRig:
    op: Callable[[int], object]  # delay_ms -> a new op, not ready; completions call on_complete / on_expire
    watch: Callable[[object, tuple[str, ...]], bool]
    check: Callable[[str], int]
    advance_to: Callable[[int], int | None]  # -> entries purged, or None when no purge ran
    watched: Callable[[], int]
    size: Callable[[], int]
    close: Callable[[], object] = _noop


def impl_timer(name: str, fire: Callable[[int], None]) -> TimerRig:
    family = implementation(name)
    timer = family.SystemTimer.virtual(TICK_MS, WHEEL_SIZE, 0)

    class Task(family.TimerTask):
        __slots__ = ()

        def run(self) -> None:
            fire(self.delay_ms)

    return TimerRig(Task, timer.add, family.TimerTask.cancel, timer.advance_to, timer.size, timer.shutdown)


def model_timer(fire: Callable[[int], None]) -> TimerRig:
    timer = ModelTimer.create(TICK_MS, WHEEL_SIZE, 0)

    def on_run(task: ModelTask) -> None:
        fire(task.delay_ms)

    return TimerRig(lambda delay: ModelTask("", delay, on_run=on_run), timer.add, ModelTask.cancel,
                    timer.advance_clock, timer.size)


def baseline_timer(timer: HeapqTimer | AsyncioTimer, fire: Callable[[int], None]) -> TimerRig:
    class Task(BaselineTask):
        __slots__ = ()

        def run(self) -> None:
            fire(self.delay_ms)

    return TimerRig(Task, timer.add, timer.cancel, timer.advance_to, timer.size, getattr(timer, "close", _noop))


TIMER_RIGS: dict[str, Callable[[Callable[[int], None]], TimerRig]] = {
    **{name: functools.partial(impl_timer, name) for name in IMPL_NAMES},
    "model": model_timer,
    "heapq": lambda fire: baseline_timer(HeapqTimer(), fire),
    "asyncio": lambda fire: baseline_timer(AsyncioTimer(), fire),
}


def ready_flag_operation(base: type, on_complete: Callable[[], None], on_expire: Callable[[], None]) -> type:
    """The workloads' op on any purgatory's operation class: completable once its ``ready`` flag is set."""

    class Op(base):
        __slots__ = ("ready",)

        def __init__(self, delay_ms: int):
            super().__init__(delay_ms)
            self.ready = False

        def try_complete(self) -> bool:
            return self.ready and self.force_complete()

        def on_complete(self) -> None:
            on_complete()

        def on_expiration(self) -> None:
            on_expire()

    return Op


def impl_purgatory(name: str, on_complete: Callable[[], None], on_expire: Callable[[], None]) -> PurgatoryRig:
    family = implementation(name)
    purgatory = family.DelayedOperationPurgatory(purge_interval=PURGE_INTERVAL,
                                                 timer=family.SystemTimer.virtual(TICK_MS, WHEEL_SIZE, 0))

    Op = ready_flag_operation(family.DelayedOperation, on_complete, on_expire)
    return PurgatoryRig(Op, purgatory.try_complete_else_watch, purgatory.check_and_complete, purgatory.advance_to,
                        purgatory.watched, purgatory.num_delayed, purgatory.shutdown)


def model_purgatory(on_complete: Callable[[], None], on_expire: Callable[[], None]) -> PurgatoryRig:
    journal = Journal()
    purgatory = ModelPurgatory(ModelTimer.create(TICK_MS, WHEEL_SIZE, 0), journal, PURGE_INTERVAL)

    def drain_journal() -> int | None:
        purged = None
        for event in journal.events:
            if isinstance(event, v.Complete):
                on_complete()
            elif isinstance(event, v.Expire):
                on_expire()
            else:
                purged = event.count
        journal.events.clear()
        journal.group_keys.clear()
        return purged

    def advance_to(to_ms: int) -> int | None:
        purgatory.advance_clock(to_ms)
        return drain_journal()

    return PurgatoryRig(lambda delay: ModelOperation("", delay, journal=journal), purgatory.try_complete_else_watch,
                        purgatory.check_and_complete, advance_to, purgatory.watched, purgatory.num_delayed)


def baseline_purgatory(timer: HeapqTimer | AsyncioTimer, on_complete: Callable[[], None],
                       on_expire: Callable[[], None]) -> PurgatoryRig:
    purgatory = SimplePurgatory(timer, PURGE_INTERVAL)

    Op = ready_flag_operation(SimpleOperation, on_complete, on_expire)
    return PurgatoryRig(Op, purgatory.try_complete_else_watch, purgatory.check_and_complete, purgatory.advance_to,
                        purgatory.watched, purgatory.num_delayed, getattr(timer, "close", _noop))


PURGATORY_RIGS: dict[str, Callable[[Callable[[], None], Callable[[], None]], PurgatoryRig]] = {
    **{name: functools.partial(impl_purgatory, name) for name in IMPL_NAMES},
    "model": model_purgatory,
    "heapq": lambda done, expired: baseline_purgatory(HeapqTimer(), done, expired),
    "asyncio": lambda done, expired: baseline_purgatory(AsyncioTimer(), done, expired),
}


# ---------------------------------------------------------------------------------------------------------------
# Plans (drawn before the clock starts) and replays
# ---------------------------------------------------------------------------------------------------------------


@attrs.define
class Outcome:
    ops: int
    seconds: float = 0.0
    bytes_per_pending: float | None = None
    notes: str = ""
    failures: list[str] = attrs.field(factory=list)


class Probe:
    """Called once per ms by a replay: tracks the pending peak and, in the memory pass, the bytes at that peak."""

    def __init__(self, size: Callable[[], int], traced: bool):
        self.size, self.traced = size, traced
        self.base = tracemalloc.get_traced_memory()[0] if traced else 0
        self.max_pending = self.bytes_at_max = 0

    def __call__(self) -> None:
        pending = self.size()
        if pending > self.max_pending:
            self.max_pending = pending
            if self.traced:
                self.bytes_at_max = tracemalloc.get_traced_memory()[0] - self.base


@attrs.frozen
class TimerPlan:
    arrival_ms: int
    delays: list[int]  # per task, in arrival order (arrivals_per_ms per ms, or all at ms 0)
    arrivals_per_ms: int
    cancels: list[list[int]]  # per ms: indexes of tasks to cancel at its start
    end_ms: int  # advance until this ms (every task has fired or been cancelled by then)

    @property
    def cancel_count(self) -> int:
        return sum(map(len, self.cancels))


def plan_t1(rng: random.Random, scale: float, arrival_ms: int = 20_000, per_ms: int = 10,
            max_delay: int = 30_000) -> TimerPlan:
    arrival_ms = max(1, int(arrival_ms * scale))
    delays = [rng.randint(1, max_delay) for _ in range(arrival_ms * per_ms)]
    end_ms = arrival_ms + max_delay + 1
    cancels: list[list[int]] = [[] for _ in range(end_ms)]
    for index, delay in enumerate(delays):
        if rng.random() < 0.99:
            after = rng.randint(1, 200)
            if after < delay:
                cancels[index // per_ms + after].append(index)
    return TimerPlan(arrival_ms, delays, per_ms, cancels, end_ms)


def plan_t2(rng: random.Random, scale: float, tasks: int = 200_000, max_delay: int = 1000) -> TimerPlan:
    delays = [rng.randint(1, max_delay) for _ in range(max(1, int(tasks * scale)))]
    return TimerPlan(1, delays, len(delays), [[] for _ in range(max_delay + 1)], max_delay)


def replay_timer(plan: TimerPlan, make_rig: Callable, probe_traced: bool | None = None) -> Outcome:
    """Replay ``plan``; time it, or (``probe_traced`` set) probe pending counts and memory once per ms."""
    now = [0]
    fired = [0, 0]  # fired, fired at the wrong time

    def fire(delay_ms: int) -> None:
        fired[0] += 1

    def fire_checked(delay_ms: int) -> None:  # T2: every task was added at 0, so it must fire at now == delay
        fired[0] += 1
        if delay_ms != now[0]:
            fired[1] += 1

    all_at_zero = plan.arrival_ms == 1
    rig = make_rig(fire_checked if all_at_zero else fire)
    task, add, cancel, advance_to = rig.task, rig.add, rig.cancel, rig.advance_to
    delays, cancels, per_ms, arrival_ms = plan.delays, plan.cancels, plan.arrivals_per_ms, plan.arrival_ms
    held: list = [None] * len(delays)  # tasks somebody will cancel; the others are the timer's alone
    kept = {index for slots in cancels for index in slots}
    probe = Probe(rig.size, probe_traced) if probe_traced is not None else None
    gc.collect()
    started = time.process_time()
    for t in range(plan.end_ms):
        for index in cancels[t]:
            cancel(held[index])
            held[index] = None
        if t < arrival_ms:
            for index in range(t * per_ms, (t + 1) * per_ms):
                item = task(delays[index])
                add(item)
                if index in kept:
                    held[index] = item
        now[0] = t + 1
        advance_to(t + 1)
        if probe is not None:
            probe()
    seconds = time.process_time() - started
    outcome = timer_outcome(plan, fired[0], fired[1], rig.size(), seconds)
    if probe is not None:
        outcome.bytes_per_pending = probe.bytes_at_max / max(1, probe.max_pending)
    rig.close()
    return outcome


def timer_outcome(plan: TimerPlan, fired: int, fired_at_wrong_time: int, pending: int, seconds: float) -> Outcome:
    """A timer replay's ops and what it got wrong, from its counts at the end."""
    outcome = Outcome(ops=len(plan.delays) + plan.cancel_count + fired, seconds=seconds)
    if pending != 0:
        outcome.failures.append(f"{pending} tasks still pending at the end")
    if fired != len(plan.delays) - plan.cancel_count:
        outcome.failures.append(f"{fired} fired, expected {len(plan.delays) - plan.cancel_count}")
    if fired_at_wrong_time:
        outcome.failures.append(f"{fired_at_wrong_time} tasks fired before or after their expiration")
    return outcome


@attrs.frozen
class PurgatoryPlan:
    arrival_ms: int
    keys: list[tuple[str, str, str]]  # per op, in arrival order (per_ms per ms)
    per_ms: int
    readies: list[list[tuple[int, str]]]  # per ms: (op index, key to check) for the ops that become ready
    end_ms: int


def plan_p1(rng: random.Random, scale: float, arrival_ms: int = 10_000, per_ms: int = 10, key_count: int = 1000,
            delay: int = 30_000) -> PurgatoryPlan:
    arrival_ms = max(1, int(arrival_ms * scale))
    names = [f"k{i}" for i in range(key_count)]
    keys = [tuple(names[i] for i in rng.sample(range(key_count), 3)) for _ in range(arrival_ms * per_ms)]
    end_ms = arrival_ms + delay + 1
    readies: list[list[tuple[int, str]]] = [[] for _ in range(end_ms)]
    for index, op_keys in enumerate(keys):
        if rng.random() < 0.99:
            readies[index // per_ms + rng.randint(1, 50)].append((index, rng.choice(op_keys)))
    return PurgatoryPlan(arrival_ms, keys, per_ms, readies, end_ms)


P1_DELAY_MS = 30_000


def replay_purgatory(plan: PurgatoryPlan, make_rig: Callable, probe_traced: bool | None = None) -> Outcome:
    counts = [0, 0]  # completions, expirations

    def on_complete() -> None:
        counts[0] += 1

    def on_expire() -> None:
        counts[1] += 1

    rig = make_rig(on_complete, on_expire)
    new_op, watch, check, advance_to = rig.op, rig.watch, rig.check, rig.advance_to
    keys, readies, per_ms, arrival_ms = plan.keys, plan.readies, plan.per_ms, plan.arrival_ms
    held: list = [None] * len(keys)
    purges = 0
    max_watched = 0
    probe = Probe(rig.size, probe_traced) if probe_traced is not None else None
    gc.collect()
    started = time.process_time()
    for t in range(plan.end_ms):
        for index, key in readies[t]:
            held[index].ready = True
            held[index] = None
            check(key)
        if t < arrival_ms:
            for index in range(t * per_ms, (t + 1) * per_ms):
                held[index] = op = new_op(P1_DELAY_MS)
                watch(op, keys[index])
        if advance_to(t + 1) is not None:
            purges += 1
        if probe is not None:
            probe()
            if t <= arrival_ms:  # watched() only grows with arrivals
                max_watched = max(max_watched, rig.watched())
    seconds = time.process_time() - started
    outcome = purgatory_outcome(plan, counts[0], counts[1], purges, rig.size(), seconds)
    if probe is not None:
        outcome.bytes_per_pending = probe.bytes_at_max / max(1, probe.max_pending)
        outcome.notes = f"max watched {max_watched}"
    rig.close()
    return outcome


def purgatory_outcome(plan: PurgatoryPlan, completed: int, expired: int, purges: int, pending: int,
                      seconds: float) -> Outcome:
    """A purgatory replay's ops and what it got wrong, from its counts at the end."""
    outcome = Outcome(ops=completed, seconds=seconds, notes=f"{purges} purges")
    expected_expired = len(plan.keys) - sum(map(len, plan.readies))
    if (completed, expired) != (len(plan.keys), expected_expired):
        outcome.failures.append(f"{completed} completions ({expired} by expiry), expected {len(plan.keys)} "
                                f"({expected_expired})")
    if pending != 0:
        outcome.failures.append(f"{pending} operations still delayed at the end")
    return outcome


def measure(replay: Callable, plan: object, make_rig: Callable, memory: bool) -> Outcome:
    outcome = replay(plan, make_rig)
    if memory:
        tracemalloc.start()
        try:
            traced = replay(plan, make_rig, probe_traced=True)
        finally:
            tracemalloc.stop()
        outcome.bytes_per_pending = traced.bytes_per_pending
        outcome.notes = ", ".join(filter(None, [outcome.notes, traced.notes]))
        outcome.failures += traced.failures
    return outcome


def measure_advance_cost(make_rig: Callable, background: int, window_ms: int, seed: int) -> tuple[float, int]:
    """Mean seconds per 1 ms advance of a T1 churn window over ``background`` long-pending tasks, and the pending
    count in the middle of the window."""
    rng = random.Random(seed)
    rig = make_rig(_noop)
    for _ in range(background):
        rig.add(rig.task(rng.randint(10**6, 2 * 10**6)))
    plan = plan_t1(rng, 1.0, arrival_ms=window_ms)
    held: dict[int, object] = {}
    spent, pending_mid = 0.0, 0
    gc.collect()
    for t in range(window_ms):
        for index in plan.cancels[t]:
            rig.cancel(held.pop(index))
        for index in range(t * plan.arrivals_per_ms, (t + 1) * plan.arrivals_per_ms):
            held[index] = item = rig.task(plan.delays[index])
            rig.add(item)
        started = time.process_time()
        rig.advance_to(t + 1)
        spent += time.process_time() - started
        if t == window_ms // 2:
            pending_mid = rig.size()
    rig.close()
    return spent / window_ms, pending_mid


# ---------------------------------------------------------------------------------------------------------------
# A Kafka release's own classes, in a JVM
# ---------------------------------------------------------------------------------------------------------------

KAFKA_DRIVER = kafka.ADAPTER_DIR / "bench" / "run.sh"
#: the API eras (conformance/adapters/kafka.py's names) the driver has sources for: those with the Java timer
KAFKA_ERAS = ("java-purgatory", "scala-purgatory-java-timer")
#: replays of the plan a Kafka driver runs, untimed, before its first timed round
KAFKA_WARMUP = 10


def kafka_release(version: str) -> kafka.KafkaRelease:
    """The release's era and classpath; a release the driver has no sources for is refused before Maven runs."""
    kafka.check_version(version)
    if kafka.era_of(version) not in KAFKA_ERAS:
        raise click.UsageError(f"bench --kafka drives the releases with Kafka's Java timer (3.6.0 on); {version}'s "
                               "timer is the Scala one")
    return kafka.resolve(version)


def per_ms_lists(lists: list[list], end_ms: int) -> tuple[array, list]:
    """A list per ms (of the ms a replay runs) as the driver reads it: ``end_ms + 1`` offsets, and the items."""
    lists = lists[:end_ms]
    return array("i", [0, *itertools.accumulate(map(len, lists))]), [item for items in lists for item in items]


def write_plan(plan: TimerPlan | PurgatoryPlan, path: Path) -> None:
    """``plan`` as little-endian 32-bit integers, in the layout conformance/kafka/bench's Plan.java reads."""
    if isinstance(plan, TimerPlan):
        ints = array("i", [1, TICK_MS, WHEEL_SIZE, plan.arrival_ms, plan.arrivals_per_ms, plan.end_ms,
                           len(plan.delays), *plan.delays])
        offsets, cancels = per_ms_lists(plan.cancels, plan.end_ms)
        ints += offsets
        ints.extend(cancels)
    else:
        key_ids = {key: i for i, key in enumerate(dict.fromkeys(key for keys in plan.keys for key in keys))}
        ints = array("i", [2, TICK_MS, WHEEL_SIZE, plan.arrival_ms, plan.per_ms, plan.end_ms, PURGE_INTERVAL,
                           P1_DELAY_MS, len(key_ids), len(plan.keys), len(plan.keys[0])])
        ints.extend(key_ids[key] for keys in plan.keys for key in keys)
        offsets, readies = per_ms_lists(plan.readies, plan.end_ms)
        ints += offsets
        ints.extend(value for index, key in readies for value in (index, key_ids[key]))
    if sys.byteorder != "little":
        ints.byteswap()
    path.write_bytes(ints.tobytes())


class KafkaDriverBroke(click.ClickException):
    """The JVM driver could not be built or started, or a call into Kafka threw: no figure, exit 3."""

    exit_code = 3


class KafkaDriver:
    """A Kafka release's classes replaying one plan in a JVM (conformance/kafka/bench, started through its
    run.sh): the plan is written once and loaded, then every `run` is one replay on a fresh timer or purgatory, timed
    by the JVM itself (CPU time of the replaying thread plus the serial collector's pauses). The memory pass runs in a
    JVM of its own: its probes take paths through the replay loop that a timed replay never takes, and taking them in
    the timed JVM would throw away the loop the JIT compiled for the timed replays."""

    def __init__(self, era: str, classpath: str, plan: TimerPlan | PurgatoryPlan, directory: Path):
        self.plan, self.era, self.classpath, self.directory = plan, era, classpath, directory
        write_plan(plan, directory / "plan.bin")
        self.memory: dict | None = None
        self.process, self.stderr, load = self.start()
        self.jvm = load["jvm"]

    def start(self) -> tuple[subprocess.Popen, IO[bytes], dict]:
        """A JVM with the plan loaded, its stderr (javac's errors, Kafka's stack traces: shown if it breaks), and what
        the load answered."""
        stderr = tempfile.TemporaryFile(dir=self.directory)
        # through bash, as the adapter's run.sh: an installer need not keep the script's exec bit
        process = subprocess.Popen(["bash", str(KAFKA_DRIVER), "--era", self.era, self.classpath],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            return process, stderr, self.request(f"load {self.directory / 'plan.bin'}", process, stderr)
        except BaseException:
            self.stop(process, stderr)
            raise

    def request(self, command: str, process: subprocess.Popen | None = None, stderr: IO[bytes] | None = None) -> dict:
        """``command``'s answer from the timed JVM (or ``process``)."""
        process, stderr = process or self.process, stderr or self.stderr
        try:
            process.stdin.write(command + "\n")
            process.stdin.flush()
        except BrokenPipeError:
            pass  # it exited: the read below says so, with its stderr
        line = process.stdout.readline()
        if not line:
            stderr.seek(0)
            tail = stderr.read().decode(errors="replace")[-2000:]
            raise KafkaDriverBroke(safe(f"the Kafka bench driver exited ({process.wait()}) on '{command}': "
                                        f"{tail.strip()}"))
        answer = json.loads(line)
        if "error" in answer:
            raise KafkaDriverBroke(safe(f"the Kafka bench driver failed on '{command}': {answer['error']}"))
        return answer

    def run(self) -> Outcome:
        answer = self.request("run")
        seconds = (answer["cpu_ns"] + answer["gc_ns"]) / 1e9
        if isinstance(self.plan, TimerPlan):
            outcome = timer_outcome(self.plan, answer["fired"], answer["fired_at_wrong_time"], answer["pending"],
                                    seconds)
        else:
            outcome = purgatory_outcome(self.plan, answer["completed"], answer["expired"], answer["purges"],
                                        answer["pending"], seconds)
        gc_note = f"gc {answer['gc_ns'] / 1e6:.0f} ms" if answer["gc_ns"] else "no gc"
        outcome.notes = ", ".join(filter(None, [outcome.notes, f"{answer['allocated_bytes'] / outcome.ops:,.0f} B "
                                                f"allocated/op, {gc_note}"]))
        return outcome

    def warm_up(self, replays: int, memory: bool) -> None:
        """``replays`` untimed replays, and the memory pass (in a JVM of its own) if asked for."""
        for _ in range(replays):
            self.run()
        if memory:
            process, stderr, _ = self.start()
            try:
                self.memory = self.request("memory", process, stderr)
            finally:
                self.stop(process, stderr)

    def measure(self, first: bool) -> Outcome:
        """One timed replay; the first also carries the memory pass's figures."""
        outcome = self.run()
        if first and self.memory:
            outcome.bytes_per_pending = self.memory["bytes"] / max(1, self.memory["max_pending"])
            if isinstance(self.plan, PurgatoryPlan):
                outcome.notes = f"{outcome.notes}, max watched {self.memory['max_watched']}"
        return outcome

    @staticmethod
    def stop(process: subprocess.Popen, stderr: IO[bytes]) -> None:
        with contextlib.suppress(BrokenPipeError):  # it may have exited already
            process.stdin.close()
        process.wait()
        stderr.close()

    def close(self) -> None:
        self.stop(self.process, self.stderr)


# ---------------------------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------------------------

#: the compiled implementation's targets: ops/s over heapq's, and bytes per pending timer
TARGETS = {"T1": 4.0, "T2": 3.0, "P1": 2.0}
BYTES_TARGET = 100
TARGETED = "compiled"
#: the targets are set for the full workloads: smaller ones time start-up and per-replay constants, not throughput
JUDGED_SCALE = 1.0


def profile_impl(name: str, workload: str, plan: object, console: Console) -> None:
    replay, rigs = (replay_purgatory, PURGATORY_RIGS) if workload == "P1" else (replay_timer, TIMER_RIGS)
    profiler = cProfile.Profile()
    profiler.runcall(replay, plan, rigs[name])
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    console.print(f"[bold]cProfile of {name} on {workload}[/bold] (tottime, top 12)")
    console.print(out.getvalue().split("\n", 4)[-1].rstrip())


@click.command("bench")
@click.option("--scale", type=click.FloatRange(min=0.0001, max=10), default=1.0, show_default=True,
              help="Multiply the workloads' task/op counts (not their delays); e.g. 0.01 for a smoke run. The "
                   f"targets are judged only at {JUDGED_SCALE:g} or more.")
@click.option("--seed", type=int, default=20241122, show_default=True, help="Seed of every workload's plan.")
@click.option("--workload", "workloads", type=click.Choice(WORKLOADS), multiple=True,
              help="Run only these workloads (repeatable; default: all).")
@click.option("--impl", "implementations", type=click.Choice(IMPLEMENTATIONS), multiple=True,
              help="Run only these implementations (repeatable; default: all).")
@click.option("--memory/--no-memory", default=True, show_default=True, help="Run the tracemalloc pass.")
@click.option("--advance-cost/--no-advance-cost", default=True, show_default=True,
              help="Measure T1's per-advance cost at ~10k and ~100k pending tasks.")
@click.option("--rounds", type=click.IntRange(1), default=3, show_default=True,
              help="Timed rounds; each round replays every implementation once (interleaved); the median is shown.")
@click.option("--profile", is_flag=True,
              help="Also print where kpurgatory.impl's implementations spend their time (cProfile) per workload.")
@click.option("--kafka", "kafka_version", metavar="VERSION",
              help="Also replay every plan through this Kafka release's own classes, in a JVM (needs mvn and a JDK).")
@click.option("--kafka-warmup", type=click.IntRange(0), default=KAFKA_WARMUP, show_default=True,
              help="Untimed replays of each plan in the JVM before its first timed round (the JIT's warm-up).")
def bench_command(scale: float, seed: int, workloads: tuple[str, ...], implementations: tuple[str, ...],
                  memory: bool, advance_cost: bool, rounds: int, profile: bool, kafka_version: str | None,
                  kafka_warmup: int) -> None:
    """Benchmark kpurgatory.impl (compiled and pure Python) against the model, a heapq timer and asyncio's timers
    (T1, T2, P1), and with --kafka against a Kafka release's own classes: ops/s, the ratio to heapq and the CPU time
    per op, median of interleaved rounds.

    At --scale 1 or more, each of the compiled implementation's targets is reported as met or MISSED; a missed
    target is a figure, not a failure. Exits 1 only when an implementation replays a workload wrongly."""
    console = command_console()
    if not console.is_terminal:  # logs and CI: wide enough that rows do not wrap
        console.width = 160
    workloads = workloads or WORKLOADS
    implementations = implementations or IMPLEMENTATIONS
    release = kafka_release(kafka_version) if kafka_version else None
    kafka_name = f"kafka {release.version} (JVM)" if release else ""
    jvm = ""
    plans = {"T1": plan_t1, "T2": plan_t2, "P1": plan_p1}
    results: dict[tuple[str, str], Outcome] = {}
    for workload in workloads:
        plan = plans[workload](random.Random(seed), scale)
        replay, rigs = (replay_purgatory, PURGATORY_RIGS) if workload == "P1" else (replay_timer, TIMER_RIGS)
        timings: dict[str, list[float]] = {name: [] for name in implementations}
        with contextlib.ExitStack() as stack:
            driver = None
            if release:
                directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kpurgatory-bench-")))
                driver = KafkaDriver(release.era, release.classpath, plan, directory)
                stack.callback(driver.close)
                jvm = driver.jvm
                driver.warm_up(kafka_warmup, memory)
                timings[kafka_name] = []
            for round_number in range(rounds):
                for name in implementations:
                    outcome = measure(replay, plan, rigs[name], memory and round_number == 0)
                    timings[name].append(outcome.seconds)
                    results.setdefault((workload, name), outcome)
                if driver:
                    outcome = driver.measure(round_number == 0)
                    timings[kafka_name].append(outcome.seconds)
                    results.setdefault((workload, kafka_name), outcome)
        for name, seconds in timings.items():
            results[workload, name].seconds = statistics.median(seconds)
        if profile:
            for name in IMPL_NAMES:
                if name in implementations:
                    profile_impl(name, workload, plan, console)

    table = Table(title=f"kpurgatory bench (scale {scale:g}, seed {seed}, tick 1 ms, wheel 20, median of {rounds} "
                        f"interleaved rounds, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    for column, justify in (("workload", "left"), ("implementation", "left"), ("ops", "right"),
                            ("cpu s", "right"), ("ops/s", "right"), ("ns/op", "right"), ("vs heapq", "right"),
                            ("vs compiled", "right"), ("bytes/pending", "right"), ("notes", "left")):
        table.add_column(column, justify=justify)

    def ratio(outcome: Outcome, workload: str, base: str) -> str:
        other = results.get((workload, base))
        return f"{(outcome.ops / outcome.seconds) / (other.ops / other.seconds):.2f}x" if other else "-"

    for (workload, name), outcome in results.items():
        per_item = f"{outcome.bytes_per_pending:,.0f}" if outcome.bytes_per_pending is not None else "-"
        notes = "; ".join([markup(outcome.notes)] + [f"[red]FAIL: {markup(failure)}[/red]"
                                                     for failure in outcome.failures])
        table.add_row(workload, name, f"{outcome.ops:,}", f"{outcome.seconds:.3f}",
                      f"{outcome.ops / outcome.seconds:,.0f}", f"{outcome.seconds / outcome.ops * 1e9:,.0f}",
                      ratio(outcome, workload, "heapq"),
                      ratio(outcome, workload, "compiled"), per_item, notes.strip("; "))
    console.print(table)
    if release:
        console.print(f"{kafka_name}: Kafka's own classes ({release.era} era) on {markup(jvm)}; each plan replayed "
                      f"{kafka_warmup} times untimed first (the JIT's warm-up), then once per round after the others; "
                      "ns/op is the replaying thread's CPU time plus the collector's pauses, bytes/pending the heap "
                      "after full collections at the pending peak less the heap before the replay. Not in the "
                      "per-advance table.")

    if advance_cost:
        cost_table = Table(title="T1 per-advance cost (mean of one 1 ms advance over a churn window)")
        for column in ("implementation", "pending", "µs/advance", "pending", "µs/advance", "growth"):
            cost_table.add_column(column, justify="right" if column != "implementation" else "left")
        window = max(20, int(2000 * min(scale, 1.0)))
        for name in implementations:
            small = measure_advance_cost(TIMER_RIGS[name], int(10_000 * scale), window, seed)
            large = measure_advance_cost(TIMER_RIGS[name], int(100_000 * scale), window, seed)
            cost_table.add_row(name, f"{small[1]:,}", f"{small[0] * 1e6:.2f}", f"{large[1]:,}",
                               f"{large[0] * 1e6:.2f}", f"{large[0] / small[0]:.2f}x")
        console.print(cost_table)

    verdicts = []
    if scale < JUDGED_SCALE:
        targets = ", ".join(f"{workload} {TARGETS[workload]:g}x" for workload in workloads)
        verdicts.append(f"targets not judged at scale {scale:g}: {TARGETED} vs heapq ({targets}) and <= "
                        f"{BYTES_TARGET} bytes per pending timer are for --scale {JUDGED_SCALE:g} or more")
    for workload in workloads if scale >= JUDGED_SCALE else ():
        impl, base = results.get((workload, TARGETED)), results.get((workload, "heapq"))
        if impl and base:
            ratio = (impl.ops / impl.seconds) / (base.ops / base.seconds)
            verdicts.append(f"{TARGETED} {workload} {ratio:.2f}x vs heapq (target {TARGETS[workload]}x): "
                            + ("met" if ratio >= TARGETS[workload] else "MISSED"))
        if impl and impl.bytes_per_pending is not None and workload != "P1":
            verdicts.append(f"{TARGETED} {workload} {impl.bytes_per_pending:.0f} bytes per pending timer (target "
                            f"<= {BYTES_TARGET}): " + ("met" if impl.bytes_per_pending <= BYTES_TARGET else "MISSED"))
    for verdict in verdicts:
        console.print(verdict)
    if any(outcome.failures for outcome in results.values()):
        raise SystemExit(1)
