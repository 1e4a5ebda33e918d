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
  cancel_key_during_check         cancelForKey takes the key's list while a check walks it, and a new op is watched
                                  on the key: the check, emptying the old list, must not remove the new one.
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
    Schedule("cancel_key_during_check", (
        *sent("w0", A_LATER), *sent("w0", v.SetReady("a")), *held("w0", CHECK), *sent("w1", v.CancelKey("k")),
        *sent("w1", v.Watch("c", ("k",), 100, None)), *release("w0", CHECK))),
)


def run_schedule(system: SystemUnderTest, hello: Hello, driver: Driver, schedule: Schedule, *, timeout: float,
                 settle_s: float = SETTLE_S) -> Trace:
    """Play ``schedule`` on a fresh run (init) of ``system`` through ``driver`` (which must support gates), drain
    it and return the history. A call that has not returned ``timeout`` seconds after the last one is a hang: the
    history keeps it with no return, undrained."""
    system.init("purgatory", schedule.params)
    recorder = Recorder(driver)
    calls: dict[str, threading.Event] = {}

    def call(action: Send, finished: threading.Event) -> None:
        try:
            with contextlib.suppress(SystemFailed):
                recorder.call(action.thread, action.command, gate=action.gate)
        finally:
            finished.set()

    for action in schedule.actions:
        if recorder.stopped.is_set():
            break
        if isinstance(action, Send):
            calls[action.thread] = threading.Event()
            threading.Thread(target=call, args=(action, calls[action.thread]), daemon=True).start()
        elif isinstance(action, Reach):
            driver.await_gate(action.gate)
        elif isinstance(action, Settle):
            time.sleep(settle_s)
        elif isinstance(action, Open):
            driver.open_gate(action.gate)
        elif not settled([calls[action.thread]], recorder, timeout):
            recorder.stopped.set()
    if not recorder.stopped.is_set():
        drain(recorder, schedule.as_plan(), hello, timeout)
    return recorder.history(f"schedule-{schedule.name}", schedule.params)
