"""Kafka's documented races as deterministic schedules, replayed through gates against any concurrent system.

Random runs find a race only if the scheduler happens to interleave two calls at the right instruction. The races
Kafka's history and the interleaving model (specs/interleaving.py) name are too important to leave to luck, so each
is written down as a *schedule*: which thread sends which call, and where a call is held. A call is held inside an
op's tryComplete by a gate (protocol feature ``gates``, specs/protocol.md §3.2; `kpurgatory.conformance.adapters.
gates`): it stops there, still holding what its caller holds (in Kafka, the op's lock), until the schedule opens the
gate. A call that must meet that lock is given a settle time to get there. The history is then drained and checked
like any other (`kpurgatory.conformance.check.concurrent`): a schedule asserts nothing of its own, it only makes the
interleaving happen.

  expiry_between_walk_and_try     A check's walk holds op a's tryComplete while op b, later in the same list,
                                  expires: the walk must then skip b (or try it: tryComplete on an op completed by
                                  expiry is allowed under threads) and count nothing for it (KAFKA-17848's window).
  force_between_walk_and_try      The same with b completed by a force.
  locked_completion_during_walk   A check's walk found op a pending and waits for a's lock, held by a re-watch of
                                  a whose tryComplete then completes it: the check must not call tryComplete on a
                                  (safeTryComplete's completed test under the lock, KAFKA-17848).
  checks_race_for_an_op           Two checks of one key both find ready op a pending; the first holds a's lock on
                                  entering its tryComplete: the second must wait for that lock (the per-op lock) and
                                  then skip a.
  ready_between_watch_tries       a becomes ready, and its key is checked, between watch's first tryComplete and
                                  its watching the key: the watch's second try must complete it (no lost wakeup).
  ready_during_held_second_try    The watch's second tryComplete found a not ready and is held, holding a's lock; a
                                  becomes ready and its key is checked meanwhile. Under a blocking op lock (2.7 on)
                                  the check waits for the lock and completes a; under tryLock with the pending flag
                                  (1.1 to 2.6) the check skips a, and the watch, seeing the flag, tries again and
                                  completes it; under tryLock alone (0.11.0.2, 1.0.x) nobody does: a waits for its
                                  timeout (no lost wakeup, KAFKA-6653).
  cancel_key_during_check         cancelForKey takes the key's list while a check walks it, and a new op is watched
                                  on the key: the check, emptying the old list, must not remove the new one.

A schedule assumes where its calls wait: a call it only sends may meet a held lock, and the gate it then opens lets
it go on. A system (a Kafka release) whose locks differ may not wait there (a tryLock that skips the op instead:
nothing changes, the call returns early) or wait where the schedule expects no wait. A wait for a call (`Reach`,
`Join`) therefore gives up after `STALL_S`, opens every gate still held and waits again: the history is still a
history of the system, checked like any other, and the schedule reports that it did not go as written. Only a call
that does not return with every gate open (``timeout`` after the last progress) is a hang, which the history shows
and the check reports. A schedule that uses a command the system cannot execute (its hello's unsupported commands)
is not played.
"""

from __future__ import annotations

import contextlib
import threading
import time

import attrs

from kpurgatory.conformance.adapters.gates import GateSpec
from kpurgatory.conformance.adapters.sut import Hello, SystemUnderTest
from kpurgatory.conformance.check.concurrent import CLOCK, Driver, Plan, Recorder, SystemFailed, drain, settled
from kpurgatory.conformance.traces.codec import Trace
from kpurgatory.model import vocabulary as v

#: how long a call that must meet a held lock is given to get there
SETTLE_S = 0.05
#: how long a call the schedule waits for may take before the schedule stops holding its gates: far longer than a
#: call that waits for no gate takes
STALL_S = 2.0
PARAMS = v.Params(tick_ms=1, wheel_size=8, start_ms=0, purge_interval=1000)


@attrs.frozen
class Send:
    """``thread`` calls ``command`` (carrying ``gate``) without waiting for it to return."""

    thread: str
    command: v.Command
    gate: GateSpec | None = None


@attrs.frozen
class Reach:
    """Wait until the call carrying gate ``gate`` stops at it (or finished without reaching it)."""

    gate: str


@attrs.frozen
class Settle:
    """Give the calls just sent the settle time to reach the lock a held call holds."""


@attrs.frozen
class Open:
    gate: str


@attrs.frozen
class Join:
    """Wait until ``thread``'s call returned."""

    thread: str


Action = Send | Reach | Settle | Open | Join


@attrs.frozen
class Schedule:
    name: str
    actions: tuple[Action, ...]
    params: v.Params = PARAMS

    @property
    def commands(self) -> tuple[v.Command, ...]:
        return tuple(action.command for action in self.actions if isinstance(action, Send))

    def as_plan(self) -> Plan:
        """The calls as a plan (one per round), for the drain."""
        return Plan(self.params, tuple(((action.thread, action.command),) for action in self.actions
                                       if isinstance(action, Send)))


def sent(thread: str, command: v.Command) -> tuple[Action, ...]:
    """``thread`` calls ``command`` and the schedule waits for it."""
    return Send(thread, command), Join(thread)


def held(thread: str, command: v.Command, tries: int = 1, at: str = "decision") -> tuple[Action, ...]:
    """``thread`` calls ``command``, whose ``tries``-th tryComplete stops at ``at``; the schedule waits until it
    does."""
    gate = f"{thread}.{command.name}"
    return Send(thread, command, GateSpec(gate, tries, at)), Reach(gate)


def release(thread: str, command: v.Command) -> tuple[Action, ...]:
    """Open the gate `held` made for ``thread``'s ``command`` and wait for the call to return."""
    return Open(f"{thread}.{command.name}"), Join(thread)


A_LATER, A_SOON = v.Watch("a", ("k",), 100, None), v.Watch("b", ("k",), 5, None)
CHECK = v.Check("k")


def between_walk_and_try(name: str, completion: tuple[Action, ...]) -> Schedule:
    return Schedule(name, (*sent("w0", A_LATER), *sent("w0", A_SOON), *held("w0", CHECK), *completion,
                           *release("w0", CHECK)))


SCHEDULES: tuple[Schedule, ...] = (
    between_walk_and_try("expiry_between_walk_and_try", sent(CLOCK, v.Advance(10))),
    between_walk_and_try("force_between_walk_and_try", sent("w1", v.Force("b"))),
    Schedule("locked_completion_during_walk", (
        *sent("w0", A_LATER), *sent("w0", v.SetReady("a")), *held("w0", v.Watch("a", ("k",))),
        Send("w1", CHECK), Settle(), *release("w0", v.Watch("a", ("k",))), Join("w1"))),
    Schedule("checks_race_for_an_op", (
        *sent("w0", A_LATER), *sent("w0", v.SetReady("a")), *held("w0", CHECK, at="entry"),
        Send("w1", CHECK), Settle(), *release("w0", CHECK), Join("w1"))),
    Schedule("ready_between_watch_tries", (
        *held("w0", A_LATER), *sent("w1", v.SetReady("a")), *sent("w1", CHECK), *release("w0", A_LATER))),
    Schedule("ready_during_held_second_try", (
        *held("w0", A_LATER, tries=2), *sent("w1", v.SetReady("a")), Send("w1", CHECK), Settle(),
        *release("w0", A_LATER), Join("w1"))),
    Schedule("cancel_key_during_check", (
        *sent("w0", A_LATER), *sent("w0", v.SetReady("a")), *held("w0", CHECK), *sent("w1", v.CancelKey("k")),
        *sent("w1", v.Watch("c", ("k",), 100, None)), *release("w0", CHECK))),
)


@attrs.frozen
class ScheduleRun:
    """A schedule's history and, if it did not go as written, what happened instead (``deviation``)."""

    history: Trace
    deviation: str | None = None


def run_schedule(system: SystemUnderTest, hello: Hello, driver: Driver, schedule: Schedule, *, timeout: float,
                 settle_s: float = SETTLE_S, stall_s: float = STALL_S) -> ScheduleRun:
    """Play ``schedule`` on a fresh run (init) of ``system`` through ``driver`` (which must support gates), drain
    it and return the history. A call the schedule waits for that takes longer than ``stall_s`` makes it open every
    gate still held (a deviation, see the module docstring); one that has not returned ``timeout`` seconds after the
    last call did is a hang: the history keeps it with no return, undrained."""
    system.init("purgatory", schedule.params)
    recorder = Recorder(driver)
    calls: dict[str, threading.Event] = {}
    held: list[str] = []  # gates sent and not opened yet, in order
    gated: dict[str, threading.Event] = {}  # gate -> set when the call carrying it returned
    deviations: list[str] = []

    def call(action: Send, finished: threading.Event) -> None:
        try:
            with contextlib.suppress(SystemFailed):
                recorder.call(action.thread, action.command, gate=action.gate)
        finally:
            finished.set()

    def reach(gate: str) -> threading.Event:
        """Set once the call carrying ``gate`` waits at it or finished (asked on a thread of its own, so the
        schedule can give up waiting)."""
        reached = threading.Event()

        def ask() -> None:
            with contextlib.suppress(Exception):  # a failed system shows in its calls
                driver.await_gate(gate)
            reached.set()

        threading.Thread(target=ask, daemon=True).start()
        return reached

    def open_gate(gate: str) -> None:
        held.remove(gate)
        with contextlib.suppress(Exception):  # a failed system shows in its calls
            driver.open_gate(gate)

    def wait(done: threading.Event, what: str, keep: str | None = None) -> bool:
        """Wait for ``done``; past ``stall_s``, open the gates held but ``keep`` and wait on, while calls return."""
        if any(gate != keep for gate in held) and not done.wait(stall_s):
            released = [gate for gate in held if gate != keep]
            deviations.append(f"{what} took over {stall_s:g} s while gate{'s' * (len(released) > 1)} "
                              f"{', '.join(released)} held {'their calls' if len(released) > 1 else 'its call'}: "
                              f"opened early")
            for gate in released:
                open_gate(gate)
            recorder.progressed = time.monotonic()  # the wait for it starts again, with the gates open
        return settled([done], recorder, timeout)

    try:
        for action in schedule.actions:
            if recorder.stopped.is_set():
                break
            if isinstance(action, Send):
                calls[action.thread] = threading.Event()
                if action.gate is not None:
                    held.append(action.gate.id)
                    gated[action.gate.id] = calls[action.thread]
                threading.Thread(target=call, args=(action, calls[action.thread]), daemon=True).start()
            elif isinstance(action, Reach):
                if not wait(reach(action.gate), f"reaching gate {action.gate}", keep=action.gate):
                    recorder.stopped.set()
            elif isinstance(action, Settle):
                time.sleep(settle_s)
            elif isinstance(action, Open):
                if action.gate in held:
                    open_gate(action.gate)
            elif not wait(calls[action.thread], f"the call of {action.thread}"):
                recorder.stopped.set()
    finally:
        let_go = [gated[gate] for gate in held]
        for gate in list(held):  # a schedule cut short lets its held calls go, and they return
            open_gate(gate)
        settled(let_go, recorder, timeout)
    if not recorder.stopped.is_set():
        drain(recorder, schedule.as_plan(), hello, timeout)
    deviation = "; ".join(deviations) or None
    history = recorder.history(f"schedule-{schedule.name}", schedule.params)
    description = f"race schedule {schedule.name}" + (f", not as written: {deviation}" if deviation else "")
    return ScheduleRun(attrs.evolve(history, header=attrs.evolve(history.header, description=description)),
                       deviation)
