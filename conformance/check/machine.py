"""The conformance state machine: Hypothesis drives the reference model and a system under test side by side.

Each rule is one command of the protocol. It runs on the model first (the oracle, and the judge of whether the
command is well formed: a `CommandError` there is a bug in these rules, and propagates as one), then on the system,
and the system's observation is checked exactly as `kpurgatory replay` checks it (`replay.StepChecker`: the
model's observation at level ``exact``, the contract properties as an invariant at both levels). The first failing
step raises `Divergence`, which Hypothesis shrinks; the steps it carries are the model's observations, so the shrunk
counterexample is a test vector in the trace format.

Bundles hold what commands refer to (timer tasks, ops, keys), so Hypothesis can shrink a run by deleting steps
without leaving dangling ids. Parameters are drawn in an initialize rule; delays and clock gaps are drawn against
them and the clock (`conformance.check.strategies`: small wheels, clock origins over the whole 64-bit range, delays
at level boundaries, deadlines and advances at power-of-two and interval boundaries and at Long.MAX_VALUE). A few
rules look at the model's state to reach what uniform draws rarely do: an advance to a pending deadline or a
millisecond either side of it (where early and late firing show), and ops that are still waiting (made ready and
checked, or watched again). Runs respect the system's declared delay domain: an input it leaves undefined is never
sent (a delay is moved to the domain's edge, a re-add that would leave it is skipped), and the clock stays within
its maximum deadline. A rule whose command the system's hello lists as unsupported (a Kafka release without the
call) is never chosen. Whether a run ends with ``shutdown`` is decided up front and done in teardown, since no
command may follow it.

`Session` is what outlives one example: the system (initialised afresh per example), the coverage and counts of the
check, and the signatures already reported (`conformance.check.findings`). A step whose system fails to answer —
raises, crashes, hangs past its time limit, breaks the protocol — fails like a divergence, with a signature of its
own, and Hypothesis shrinks it the same way; a dead system (crashed, hung) is replaced by a fresh one (`Session.renew`)
before the next example, so it never poisons the runs after it. A run that fails with a signature already reported
ends there and passes: exploration goes on to other bugs (`conformance.check.sequential.explore`); a step in the
input class of a known Kafka finding that Kafka hangs on (`findings.foreseen`, judged by Kafka's timer run beside the
model's, `findings.KafkaShadow`) is not even sent, so it costs neither a time limit nor a fresh system. Only a system
that cannot be made afresh raises `Abort`, which ends the check.
"""

from __future__ import annotations

import time
from typing import Callable, ClassVar

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, multiple, precondition, rule

from kpurgatory.conformance.check import findings, strategies
from kpurgatory.conformance.adapters.subprocess import AdapterError
from kpurgatory.conformance.check.findings import Finding, Signature
from kpurgatory.conformance.check.coverage import Before, Coverage, entry_places
from kpurgatory.conformance.traces.replay import SYSTEM, StepChecker, StepOutcome, format_command
from kpurgatory.conformance.adapters.sut import Hello, SystemUnderTest
from kpurgatory.conformance.traces.codec import Header, Step, Trace
from kpurgatory.model import Model
from kpurgatory.model.machine import CommandError
from kpurgatory.model import vocabulary as v


#: while a hang is shrunk, a call that takes HANG_FACTOR times the slowest answer seen so far (and at least
#: HANG_FLOOR_S) counts as hung; the shrunk run is then confirmed with the full limit
HANG_FACTOR = 20
HANG_FLOOR_S = 0.25


class Stop(BaseException):
    """Base of the ways an example ends early. ``steps`` are the commands run with the model's observations (the
    last one is the command that failed), ``outcomes`` what the system did for each step it completed; ``error``
    is set when the system failed to answer rather than answered wrongly (as in a `ReplayReport`). ``signature``
    groups it with the failures that are the same bug; ``finding`` is set when it is one of Kafka's known
    misbehaviours."""

    def __init__(self, params: v.Params | None, steps: list[Step], outcomes: list[StepOutcome], summary: str,
                 signature: Signature, error: str | None = None, finding: Finding | None = None):
        super().__init__(summary)
        self.params, self.summary, self.error = params, summary, error
        self.signature, self.finding = signature, finding
        self.steps, self.outcomes = list(steps), list(outcomes)


class Divergence(Stop, Exception):
    """The system disagreed with the model, broke the contract or failed to answer at the last step: a failure to
    shrink."""


class Abort(Stop):
    """The system could not be made afresh (its factory or hello failed). Not an Exception, so Hypothesis neither
    shrinks nor retries it: it ends the whole check."""


@attrs.define(eq=False)
class Session:
    """One check of one profile: the system and what the examples so far reached. A check explores in rounds, each
    ending at a new failure that Hypothesis then shrinks; counts stop at a round's failure, and what runs after it
    is shrinking (``shrink_runs``)."""

    factory: Callable[[], SystemUnderTest]
    system: SystemUnderTest
    hello: Hello
    profile: str
    level: str
    on_example: Callable[[Session], None] | None = None
    coverage: Coverage = attrs.field(init=False)
    examples: int = 0
    steps: int = 0
    shrink_runs: int = 0
    started: float = attrs.field(factory=time.monotonic)
    first_failure_s: float | None = None
    #: this round's first failing example is over: what runs now is Hypothesis shrinking it
    shrinking: bool = False
    failing: bool = False
    #: the shortest divergence of this round, for when the final replay of the shrunk one does not reproduce it
    shortest: Divergence | None = None
    #: this round's first failure, as found (before shrinking)
    first: Divergence | None = None
    #: signatures reported so far -> how many later runs failed with them again (and passed, so as to go on)
    known: dict[Signature, int] = attrs.Factory(dict)
    #: the slowest answer to a command so far, in seconds
    slowest_s: float = 0.0
    #: while a hang is shrunk: the shorter time limit each call gets (`HANG_FACTOR`)
    shrink_limit: float | None = None
    #: the system's own time limit per call (None: it has none)
    own_limit: float | None = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.coverage = Coverage(self.profile)
        self.own_limit = getattr(self.system, "timeout", None)

    def new_round(self) -> None:
        self.failing = self.shrinking = False
        self.shortest = self.first = None
        self.limit_calls(None)

    def failed(self, stop: Stop) -> None:
        if self.first_failure_s is None:
            self.first_failure_s = time.monotonic() - self.started
        if not self.failing:
            self.first = stop
            if stop.signature.kind == "hung":
                self.limit_calls(max(HANG_FLOOR_S, HANG_FACTOR * self.slowest_s))
        self.failing = True
        if isinstance(stop, Divergence) and (self.shortest is None or len(stop.steps) <= len(self.shortest.steps)):
            self.shortest = stop

    def limit_calls(self, limit: float | None) -> None:
        """Shrinking a hang costs the time limit for every attempt that hangs, so meanwhile each call gets
        ``limit`` (when shorter than the system's own); None restores the system's own limit."""
        self.shrink_limit = limit
        if self.own_limit is not None:
            self.system.timeout = self.own_limit if limit is None else min(limit, self.own_limit)

    def renew(self, params: v.Params) -> None:
        """A fresh system in place of a dead one (``broken``: a crashed, hung or garbled adapter, a hung in-process
        system); one that raised or answered ``failure`` is only initialised afresh, as after any run."""
        if getattr(self.system, "broken", None) is None:
            return
        try:
            self.system.close()
        except Exception:  # noqa: S110 - it already failed; its replacement is what matters
            pass
        try:
            self.system = self.factory()
            self.system.hello()
        except Exception as error:
            summary = f"could not make a fresh system after a failure: {error}"
            raise Abort(params, [], [], summary, Signature("restart failed", "", ""), summary) from None
        self.limit_calls(self.shrink_limit)

    def example_done(self, steps: int) -> None:
        if self.shrinking:
            self.shrink_runs += 1
        else:
            self.examples += 1
            self.steps += steps
            self.shrinking = self.failing
        if self.on_example is not None:
            self.on_example(self)


def sends(*names: str):
    """The precondition of a rule that sends the commands ``names``: the system can execute them all."""
    return precondition(lambda self: self.session.hello.unsupported.isdisjoint(names))


class ConformanceMachine(RuleBasedStateMachine):
    """Rules and checking shared by both profiles; `machine_class` binds a `Session`."""

    session: ClassVar[Session]
    profile: ClassVar[str]
    #: the commands that only read the state
    READS: ClassVar[tuple[v.Command, ...]]

    def __init__(self) -> None:
        super().__init__()
        self.model: Model | None = None
        self.steps: list[Step] = []
        self.outcomes: list[StepOutcome] = []
        self.ends_with_shutdown = False
        self.stopped = False
        #: Kafka's timer beside the model's, and what it does on the step under way (None: what the model does)
        self.kafka = findings.KafkaShadow()
        self.edge: findings.Edge | None = None

    def begin(self, params: v.Params, ends_with_shutdown: bool) -> None:
        session = self.session
        self.params, self.ends_with_shutdown = params, ends_with_shutdown
        self.model = Model(self.profile, params, session.hello.declarations.release)
        self.checker = StepChecker(SYSTEM, Trace(Header("check", self.profile, params), ()), session.level,
                                   session.hello.declarations)
        self.declarations = session.hello.declarations
        #: the clock never passes the latest deadline the system accepts
        self.clock_limit = self.declarations.max_deadline_ms
        self.gaps = strategies.gaps(params)
        readable = [command for command in self.READS if session.hello.drives(command)]
        self.reads = st.sampled_from(readable) if readable else None
        session.renew(params)
        try:
            session.system.init(self.profile, params)
        except Exception as error:
            self.failed_to_answer(None, None, error)

    def execute(self, command: v.Command) -> None:
        """Run ``command`` on the model and the system and check the system's observation. After a failure the run
        is over: the rest of its rules do nothing."""
        if self.stopped:
            return
        session = self.session
        before = None if session.failing else Before.of(self.model, command)
        self.kafka.before(self.model, command)
        expected = self.model.step(command)
        self.edge = self.kafka.after(self.model, command, expected)
        if (known := findings.foreseen(self.edge, command, expected, session.known)) is not None:
            self.stopped = True  # a known hang: sending the step would cost a time limit and a fresh system
            session.known[known.signature] += 1
            return
        self.steps.append(Step(len(self.steps) + 1, command, expected))
        called = time.monotonic()
        try:
            observed = session.system.step(command)
        except Exception as error:
            self.failed_to_answer(command, expected, error)
            return
        session.slowest_s = max(session.slowest_s, time.monotonic() - called)
        failures = self.checker.check(command, expected, observed)
        self.outcomes.append(StepOutcome(len(self.steps), command, expected, None, observed, tuple(failures)))
        if before is not None:
            session.coverage.record(self.model, command, expected, before)
        if failures:
            self.fail(f"step {len(self.steps)} ({format_command(command)}): " + "; ".join(map(str, failures)),
                      findings.failure_signature(command, failures[0].what), command, expected, observed, None)

    def failed_to_answer(self, command: v.Command | None, expected: v.Observation | None, error: Exception) -> None:
        """The system raised, or its adapter broke (`AdapterError`), in ``command`` (None: in init): a failure like
        any other, and shrinkable."""
        described = str(error) if isinstance(error, AdapterError) else f"{type(error).__name__}: {error}"
        at, where = ("init", "init") if command is None else (f"step {len(self.steps)}", command.name)
        self.fail(f"{at}: system failed: {described}", findings.error_signature(where, error), command, expected,
                  None, error)

    def fail(self, summary: str, signature: Signature, command: v.Command | None, expected: v.Observation | None,
             observed: v.Observation | None, error: Exception | None) -> None:
        """End the run at a failure: raise it for Hypothesis to shrink, unless its signature is already reported."""
        self.stopped = True
        finding = findings.recognise(self.edge, command, expected, observed, error)
        if finding is not None:
            signature, summary = finding.signature, f"{finding}. {summary}"
        if signature in self.session.known:
            self.session.known[signature] += 1
            return
        stop = Divergence(self.params, self.steps, self.outcomes, summary, signature,
                          summary if error is not None else None, finding)
        self.session.failed(stop)
        raise stop

    def draw_delay(self, data: st.DataObject) -> int | None:
        """A delay from now, inside what the system declares it promises anything for (None: nothing is)."""
        delay = data.draw(strategies.delays(self.params, self.model.now_ms), label="delay_ms")
        return strategies.declared_delay(delay, self.model.now_ms, self.declarations)

    def declared(self, delay_ms: int) -> bool:
        """The system promises something for a delay of ``delay_ms`` from now."""
        return self.declarations.within_domain(self.model.now_ms, delay_ms)

    def teardown(self) -> None:
        if (self.model is not None and self.ends_with_shutdown and not self.stopped
                and "shutdown" not in self.session.hello.unsupported):
            self.execute(v.Shutdown())
        self.session.example_done(len(self.steps))

    # --- rules of both profiles ------------------------------------------------------------------------------

    @sends("advance")
    @rule(data=st.data())
    def advance(self, data: st.DataObject) -> None:
        self.execute(v.Advance(min(self.model.now_ms + data.draw(self.gaps, label="gap"), self.clock_limit)))

    @sends("advance")
    @rule(data=st.data())
    def advance_to_boundary(self, data: st.DataObject) -> None:
        """To the next multiple of a power-of-two tick or of a level's interval, or a millisecond either side: where
        a tick counter carries, a mask wraps, a level's window ends."""
        to_ms = data.draw(strategies.at_boundaries(self.params, self.model.now_ms), label="to_ms")
        self.execute(v.Advance(min(to_ms, self.clock_limit)))

    @sends("advance")
    @precondition(lambda self: self.model.timer.size() > 0)
    @rule(data=st.data())
    def advance_to_deadline(self, data: st.DataObject) -> None:
        """To a pending entry's expiration, a millisecond either side or the start of its tick: where early or late
        firing shows."""
        deadlines = sorted({expiration for _, expiration in entry_places(self.model.timer).values()})
        deadline = data.draw(st.sampled_from(deadlines), label="deadline")
        tick_start = deadline - deadline % self.params.tick_ms
        to_ms = data.draw(st.sampled_from([deadline, deadline - 1, deadline + 1, tick_start]), label="to_ms")
        self.execute(v.Advance(min(max(to_ms, self.model.now_ms), self.clock_limit)))

    @precondition(lambda self: self.reads is not None)
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        """The counters and the wheel read-out, in one rule. Hypothesis's choice of rule leans towards those it
        sorts first, the ones with the fewest arguments: four argument-less reads would crowd out the commands that
        change the state."""
        self.execute(data.draw(self.reads, label="read"))


class TimerMachine(ConformanceMachine):
    profile = "timer"
    READS = (v.Size(), v.Wheel(), v.DelayQueue())
    tasks = Bundle("tasks")

    @initialize(data=st.data(), ends_with_shutdown=st.booleans())
    def start(self, data: st.DataObject, ends_with_shutdown: bool) -> None:
        self.task_delays: dict[str, int] = {}
        self.begin(data.draw(strategies.params("timer", self.session.hello.declarations), label="params"),
                   ends_with_shutdown)

    @sends("timer_add")
    @rule(target=tasks, data=st.data())
    def add_task(self, data: st.DataObject) -> str:
        task = f"t{len(self.task_delays)}"
        delay = self.draw_delay(data)
        if delay is None:
            return multiple()
        self.task_delays[task] = delay
        self.execute(v.TimerAdd(task, delay))
        return task

    @sends("timer_add")
    @rule(task=tasks)
    def add_again(self, task: str) -> None:
        """Re-adding a task moves it: its pending entry is replaced and its deadline reset."""
        if self.declared(self.task_delays[task]):
            self.execute(v.TimerAdd(task, self.task_delays[task]))

    @sends("timer_cancel")
    @rule(task=tasks)
    def cancel_task(self, task: str) -> None:
        self.execute(v.TimerCancel(task))


class PurgatoryMachine(ConformanceMachine):
    profile = "purgatory"
    READS = (v.Watched(), v.Delayed(), v.Size(), v.Wheel(), v.WatcherKeys(), v.DelayQueue())
    ops = Bundle("ops")
    keys = Bundle("keys")
    key_lists = st.lists(keys, min_size=1, max_size=4)  # small key pools: shared and duplicate keys are common

    @initialize(data=st.data(), ends_with_shutdown=st.booleans())
    def start(self, data: st.DataObject, ends_with_shutdown: bool) -> None:
        self.op_count = 0
        self.op_delays: dict[str, int] = {}
        self.begin(data.draw(strategies.params("purgatory", self.session.hello.declarations), label="params"),
                   ends_with_shutdown)

    @initialize(target=keys)
    def some_keys(self):
        """A few keys, so ops share keys and repeat them. (A rule minting keys would now and then be the only rule
        Hypothesis's swarm testing enables, and spend whole runs doing nothing.)"""
        return multiple("k0", "k1", "k2", "k3")

    @sends("watch")
    @rule(target=ops, keys=key_lists, ready_on=strategies.READY_ON, data=st.data())
    def watch_new(self, keys: list[str], ready_on: int | None, data: st.DataObject) -> str:
        delay = self.draw_delay(data)
        if delay is None:
            return multiple()
        op = f"o{self.op_count}"
        self.op_count += 1
        self.op_delays[op] = delay
        self.execute(v.Watch(op, keys, delay, ready_on))
        return op

    @sends("watch")
    @rule(op=ops, keys=key_lists)
    def watch_again(self, op: str, keys: list[str]) -> None:
        """The same op object watched again: two more tries, more watch entries, its deadline reset."""
        if self.declared(self.op_delays[op]):
            self.execute(v.Watch(op, keys))

    @sends("watch")
    @rule(op=ops)
    def watch_without_keys(self, op: str) -> None:
        self.execute(v.Watch(op, []))

    @sends("set_ready")
    @rule(op=ops, ready=strategies.READY)
    def set_ready(self, op: str, ready: bool) -> None:
        self.execute(v.SetReady(op, ready))

    @sends("check")
    @rule(key=keys)
    def check(self, key: str) -> None:
        self.execute(v.Check(key))

    def waiting(self) -> dict[str, list[str]]:
        """Ops watched and not completed -> the keys they are watched on."""
        keys: dict[str, list[str]] = {}
        for key, ops in self.model.purgatory.watchers.items():
            for op in ops:
                if not op.completed and key not in keys.setdefault(op.op_id, []):
                    keys[op.op_id].append(key)
        return keys

    # Ops drawn from the bundle are mostly long done; the two rules below pick ops that are still waiting.

    @sends("set_ready", "check")
    @precondition(lambda self: self.waiting())
    @rule(data=st.data())
    def wake(self, data: st.DataObject) -> None:
        """What a broker does: change what a waiting op waits for, then check a key it is watched on."""
        waiting = self.waiting()
        op = data.draw(st.sampled_from(sorted(waiting)), label="op")
        self.execute(v.SetReady(op))
        self.execute(v.Check(data.draw(st.sampled_from(waiting[op]), label="key")))

    @sends("advance", "watch")
    @precondition(lambda self: self.waiting())
    @rule(keys=key_lists, data=st.data())
    def watch_waiting_again(self, keys: list[str], data: st.DataObject) -> None:
        """A waiting op watched again, mostly after part of its delay has passed: more entries, another estimate
        increment, and its deadline reset to now + delay (a kept deadline fires early, or sits in another bucket)."""
        op = data.draw(st.sampled_from(sorted(self.waiting())), label="op")
        entry = self.model.ops[op].entry
        if entry is not None and entry.expiration_ms > self.model.now_ms + 1:
            to_ms = data.draw(st.integers(self.model.now_ms, entry.expiration_ms - 1), label="to_ms")
            self.execute(v.Advance(min(to_ms, self.clock_limit)))
        if self.declared(self.op_delays[op]):
            self.execute(v.Watch(op, keys))

    @sends("cancel_key")
    @rule(key=keys)
    def cancel_key(self, key: str) -> None:
        self.execute(v.CancelKey(key))

    @sends("force")
    @rule(op=ops)
    def force(self, op: str) -> None:
        self.execute(v.Force(op))

    @sends("try")
    @rule(op=ops)
    def try_complete(self, op: str) -> None:
        self.execute(v.Try(op))

    @sends("cancel")
    @rule(op=ops)
    def cancel(self, op: str) -> None:
        self.execute(v.Cancel(op))


MACHINES: dict[str, type[ConformanceMachine]] = {"timer": TimerMachine, "purgatory": PurgatoryMachine}


def machine_class(session: Session) -> type[ConformanceMachine]:
    """The profile's machine bound to ``session`` (Hypothesis instantiates the class once per example)."""
    base = MACHINES[session.profile]
    return type(base.__name__, (base,), {"session": session})


def rerun(session: Session, params: v.Params, commands: list[v.Command]) -> Divergence | None:
    """Run ``commands`` from ``params`` as one example, outside Hypothesis; the new failure it ends in, if any (None
    also when a command is malformed for the model, or the run fails with a signature already reported)."""
    machine = machine_class(session)()
    try:
        machine.begin(params, ends_with_shutdown=False)
        for command in commands:
            machine.execute(command)
    except Divergence as stop:
        return stop
    except CommandError:
        return None
    return None


def minimise(session: Session, stop: Divergence) -> Divergence:
    """``stop`` with every step deleted whose deletion keeps its signature (each step tried once, last first):
    Hypothesis's shrinker works on the choices that made the run and now and then leaves a step it could not
    delete without changing another; the run's own commands can always be tried without it."""
    position = len(stop.steps) - 2
    while position >= 0:
        commands = [step.command for step in stop.steps]
        again = rerun(session, stop.params, commands[:position] + commands[position + 1:])
        session.shrink_runs += 1
        if again is not None and again.signature == stop.signature and len(again.steps) < len(stop.steps):
            stop = again
            position = min(position, len(stop.steps) - 1)
        position -= 1
    return stop


def confirm(session: Session, stop: Divergence) -> Divergence:
    """A hang shrunk under the shorter limit, re-run with the system's own: it if it still hangs, else the round's
    first failure (which hung under the full limit)."""
    if session.shrink_limit is None or stop.signature.kind != "hung":
        return stop
    session.limit_calls(None)
    again = rerun(session, stop.params, [step.command for step in stop.steps])
    if again is not None and again.signature == stop.signature:
        return again
    first = session.first
    first.summary += " (not shrunk: the shrunk run did not hang under the full time limit)"
    return first
