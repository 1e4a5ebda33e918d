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
its maximum deadline. Whether a run ends
with ``shutdown`` is decided up front and done in teardown, since no command may follow it.

`Session` is what outlives one example: the system (initialised afresh per example), the coverage and counts of the
check. A system that breaks the channel (`AdapterError`: crashed, hung, garbage) raises `Abort`, which ends the check
at once: re-running a broken process for every shrink attempt would cost a timeout each and prove nothing.
"""

from __future__ import annotations

import time
from typing import Callable, ClassVar

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, multiple, precondition, rule

from kpurgatory.conformance.check import strategies
from kpurgatory.conformance.adapters.subprocess import AdapterError
from kpurgatory.conformance.check.coverage import Before, Coverage, entry_places
from kpurgatory.conformance.traces.replay import SYSTEM, StepChecker, StepOutcome, format_command
from kpurgatory.conformance.adapters.sut import Hello, SystemUnderTest
from kpurgatory.conformance.traces.codec import Header, Step, Trace
from kpurgatory.model import Model
from kpurgatory.model import vocabulary as v


class Stop(BaseException):
    """Base of the ways an example ends early. ``steps`` are the commands run with the model's observations (the
    last one is the command that failed), ``outcomes`` what the system did for each step it completed; ``error``
    is set when the system failed to answer rather than answered wrongly (as in a `ReplayReport`)."""

    def __init__(self, params: v.Params, steps: list[Step], outcomes: list[StepOutcome], summary: str,
                 error: str | None = None):
        super().__init__(summary)
        self.params, self.summary, self.error = params, summary, error
        self.steps, self.outcomes = list(steps), list(outcomes)


class Divergence(Stop, Exception):
    """The system disagreed with the model or broke the contract at the last step: a failure to shrink."""


class Abort(Stop):
    """The system could not be driven (an `AdapterError`). Not an Exception, so Hypothesis neither shrinks nor
    retries it: it ends the whole check with the partial run."""


@attrs.define(eq=False)
class Session:
    """One check of one profile: the system and what the examples so far reached. Counts stop at the first failure;
    what runs after it is shrinking (``shrink_runs``)."""

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
    #: the example that failed first is over: what runs now is Hypothesis shrinking it
    shrinking: bool = False
    #: the shortest divergence seen, for when the final replay of the shrunk one does not reproduce it (flaky)
    shortest: Divergence | None = None

    def __attrs_post_init__(self) -> None:
        self.coverage = Coverage(self.profile)

    @property
    def failing(self) -> bool:
        return self.first_failure_s is not None

    def failed(self, stop: Stop) -> None:
        if not self.failing:
            self.first_failure_s = time.monotonic() - self.started
        if isinstance(stop, Divergence) and (self.shortest is None or len(stop.steps) <= len(self.shortest.steps)):
            self.shortest = stop

    def example_done(self, steps: int) -> None:
        if self.shrinking:
            self.shrink_runs += 1
        else:
            self.examples += 1
            self.steps += steps
            self.shrinking = self.failing
        if self.on_example is not None:
            self.on_example(self)


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

    def begin(self, params: v.Params, ends_with_shutdown: bool) -> None:
        session = self.session
        self.params, self.ends_with_shutdown = params, ends_with_shutdown
        self.model = Model(self.profile, params)
        self.checker = StepChecker(SYSTEM, Trace(Header("check", self.profile, params), ()), session.level,
                                   session.hello.declarations)
        self.declarations = session.hello.declarations
        #: the clock never passes the latest deadline the system accepts
        self.clock_limit = self.declarations.max_deadline_ms
        self.gaps = strategies.gaps(params)
        self.reads = st.sampled_from([command for command in self.READS
                                      if v.supported(command, session.hello.features)])
        self.attempt(lambda: session.system.init(self.profile, params), "init")

    def execute(self, command: v.Command) -> None:
        session = self.session
        before = None if session.failing else Before.of(self.model, command)
        expected = self.model.step(command)
        self.steps.append(Step(len(self.steps) + 1, command, expected))
        observed = self.attempt(lambda: session.system.step(command), f"step {len(self.steps)}")
        failures = self.checker.check(command, expected, observed)
        self.outcomes.append(StepOutcome(len(self.steps), command, expected, None, observed, tuple(failures)))
        if before is not None:
            session.coverage.record(self.model, command, expected, before)
        if failures:
            self.stop(Divergence, f"step {len(self.steps)} ({format_command(command)}): "
                                  + "; ".join(map(str, failures)))

    def attempt(self, call: Callable[[], v.Observation | None], where: str) -> v.Observation | None:
        """Run one call into the system; what it raises ends the example (`Abort` for a broken adapter)."""
        try:
            return call()
        except AdapterError as error:
            self.stop(Abort, f"{where}: system failed: {error}", failed=True)
        except Exception as error:  # the system's own exception: a failure like any other, and shrinkable
            self.stop(Divergence, f"{where}: system failed: {type(error).__name__}: {error}", failed=True)

    def stop(self, kind: type[Stop], summary: str, failed: bool = False) -> None:
        self.stopped = True
        stop = kind(self.params, self.steps, self.outcomes, summary, summary if failed else None)
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
        if self.model is not None and self.ends_with_shutdown and not self.stopped:
            self.execute(v.Shutdown())
        self.session.example_done(len(self.steps))

    # --- rules of both profiles ------------------------------------------------------------------------------

    @rule(data=st.data())
    def advance(self, data: st.DataObject) -> None:
        self.execute(v.Advance(min(self.model.now_ms + data.draw(self.gaps, label="gap"), self.clock_limit)))

    @rule(data=st.data())
    def advance_to_boundary(self, data: st.DataObject) -> None:
        """To the next multiple of a power-of-two tick or of a level's interval, or a millisecond either side: where
        a tick counter carries, a mask wraps, a level's window ends."""
        to_ms = data.draw(strategies.at_boundaries(self.params, self.model.now_ms), label="to_ms")
        self.execute(v.Advance(min(to_ms, self.clock_limit)))

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

    @rule(target=tasks, data=st.data())
    def add_task(self, data: st.DataObject) -> str:
        task = f"t{len(self.task_delays)}"
        delay = self.draw_delay(data)
        if delay is None:
            return multiple()
        self.task_delays[task] = delay
        self.execute(v.TimerAdd(task, delay))
        return task

    @rule(task=tasks)
    def add_again(self, task: str) -> None:
        """Re-adding a task moves it: its pending entry is replaced and its deadline reset."""
        if self.declared(self.task_delays[task]):
            self.execute(v.TimerAdd(task, self.task_delays[task]))

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

    @rule(op=ops, keys=key_lists)
    def watch_again(self, op: str, keys: list[str]) -> None:
        """The same op object watched again: two more tries, more watch entries, its deadline reset."""
        if self.declared(self.op_delays[op]):
            self.execute(v.Watch(op, keys))

    @rule(op=ops)
    def watch_without_keys(self, op: str) -> None:
        self.execute(v.Watch(op, []))

    @rule(op=ops, ready=strategies.READY)
    def set_ready(self, op: str, ready: bool) -> None:
        self.execute(v.SetReady(op, ready))

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

    @precondition(lambda self: self.waiting())
    @rule(data=st.data())
    def wake(self, data: st.DataObject) -> None:
        """What a broker does: change what a waiting op waits for, then check a key it is watched on."""
        waiting = self.waiting()
        op = data.draw(st.sampled_from(sorted(waiting)), label="op")
        self.execute(v.SetReady(op))
        self.execute(v.Check(data.draw(st.sampled_from(waiting[op]), label="key")))

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

    @rule(key=keys)
    def cancel_key(self, key: str) -> None:
        self.execute(v.CancelKey(key))

    @rule(op=ops)
    def force(self, op: str) -> None:
        self.execute(v.Force(op))

    @rule(op=ops)
    def try_complete(self, op: str) -> None:
        self.execute(v.Try(op))

    @rule(op=ops)
    def cancel(self, op: str) -> None:
        self.execute(v.Cancel(op))


MACHINES: dict[str, type[ConformanceMachine]] = {"timer": TimerMachine, "purgatory": PurgatoryMachine}


def machine_class(session: Session) -> type[ConformanceMachine]:
    """The profile's machine bound to ``session`` (Hypothesis instantiates the class once per example)."""
    base = MACHINES[session.profile]
    return type(base.__name__, (base,), {"session": session})
