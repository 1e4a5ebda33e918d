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
from kpurgatory.conformance.adapters.timed import TimeLimit, limited
from kpurgatory.conformance.cli import Interrupted
from kpurgatory.conformance.check.findings import Finding, Signature
from kpurgatory.conformance.check.coverage import Before, Coverage, clocks_of, entry_places
from kpurgatory.conformance.traces.replay import SYSTEM, StepChecker, StepOutcome, format_command
from kpurgatory.conformance.adapters.sut import Hello, SystemUnderTest
from kpurgatory.conformance.traces.codec import Header, Step, Trace
from kpurgatory.model import Model
from kpurgatory.model.machine import CommandError
from kpurgatory.model import vocabulary as v


#: a hang, found under the full time limit, is shrunk under the same limit (a shorter one derived from the answers'
#: speed would make the verdict depend on the machine's load), so each run that hangs costs the limit: after this many
#: while a failure is shrunk, shrinking stops and the shortest failing run so far is reported, marked as not fully
#: shrunk; after this many more with failures already reported, exploration stops
HANG_BUDGET = 8
#: runs Hypothesis may spend shrinking one failure (kpurgatory check --shrink-budget): a count, where Hypothesis's own
#: limit is five minutes of wall-clock time (`conformance.check.sequential.without_shrink_time_limit`), so that a loaded
#: machine shrinks exactly as far as a quiet one. Shrinking a failure typically takes a few hundred runs
SHRINK_BUDGET = 5000


#: what an in-process system may raise instead of answering: its own exceptions, and its ``sys.exit()`` or
#: ``raise KeyboardInterrupt`` (a real Ctrl-C is `Interrupted` while a check runs), a crash of the system like any other
SYSTEM_ERRORS = (Exception, SystemExit, KeyboardInterrupt)
#: the signature kind of a run the reference model itself failed on
REFERENCE_BROKE = "reference broke"


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
        #: why shrinking stopped before it was done (an interruption, the hang budget); None: it was done
        self.unfinished: str | None = None

    def mark_unfinished(self, reason: str) -> None:
        """Mark it as not fully shrunk, for ``reason``."""
        self.unfinished = reason
        self.summary += f" (not fully shrunk: {reason})"


class Divergence(Stop, Exception):
    """The system disagreed with the model, broke the contract or failed to answer at the last step: a failure to
    shrink."""


class Abort(Stop):
    """The system could not be made afresh (its factory or hello failed). Not an Exception, so Hypothesis neither
    shrinks nor retries it: it ends the whole check."""


class Cut(KeyboardInterrupt):
    """Shrinking (or, ``final``, the whole exploration) stops early: `HANG_BUDGET` runs hung, or shrinking spent its
    `SHRINK_BUDGET`. ``reason`` says why, for the report. A KeyboardInterrupt is what ends Hypothesis's run at once
    without recording the example as one that stopped drawing there: any other exception is recorded, and an example
    that once went on past the same choices (a run that hung with a known signature, before the budget was spent)
    then makes Hypothesis raise Flaky."""

    def __init__(self, reason: str, final: bool = False):
        super().__init__(reason)
        self.reason, self.final = reason, final


class ReferenceBroke(Stop):
    """The reference model itself raised or hung on the run's last step: a bug in kpurgatory, not in the system.
    Reported with the run that triggers it, unshrunk (not an Exception: it ends the check)."""


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
    #: runs that may hang while a failure is shrunk, and while exploring after it (`HANG_BUDGET`)
    hang_budget: int = HANG_BUDGET
    #: runs Hypothesis may spend shrinking one round's failure (`SHRINK_BUDGET`), and those it spent on this one
    shrink_budget: int = SHRINK_BUDGET
    round_shrink_runs: int = 0
    #: runs of the corpus's failing runs replayed before exploration (`conformance.check.corpus`)
    corpus_runs: int = 0
    #: runs that hung while this round's failure was shrunk, and while exploring with their failure already reported
    shrink_hangs: int = 0
    hangs_again: int = 0
    #: the reference model's time limit per step (None: none), as the system's calls have one
    model_timeout: float | None = None
    #: the signal that interrupted the check (SIGINT, SIGTERM): every later step raises `Interrupted` again, so an
    #: interruption that something on the way swallowed still ends the check at the next step
    interrupted: str | None = None
    #: Hypothesis runs examples (`conformance.check.sequential.explore`)
    exploring: bool = False
    #: the watcher shard the next run's keys start from (`move_key_home`)
    key_home: int | None = None
    #: why exploration ended before its budget (`Cut`)
    cut_short: str | None = None

    def __attrs_post_init__(self) -> None:
        self.coverage = Coverage(self.profile, self.hello.declarations.watcher_shards)

    def new_round(self) -> None:
        self.failing = self.shrinking = False
        self.move_key_home()
        self.shortest = self.first = None
        self.shrink_hangs = self.round_shrink_runs = 0

    def failed(self, stop: Divergence) -> None:
        """Record this round's failure ``stop``; raises `Cut` when it is one hang too many while shrinking."""
        if self.first_failure_s is None:
            self.first_failure_s = time.monotonic() - self.started
        if not self.failing:
            self.first = stop
        self.failing = True
        if stop.signature == self.first.signature and (self.shortest is None
                                                       or len(stop.steps) <= len(self.shortest.steps)):
            self.shortest = stop
        if stop is not self.first and stop.signature.kind == "hung":
            self.hung()

    def hung(self) -> None:
        """Count a run that hung (but for a round's first failure, the hang found); raises `Cut` when the budget is
        spent."""
        if self.failing:
            self.shrink_hangs += 1
            if self.shrink_hangs >= self.hang_budget:
                raise Cut(f"shrinking stopped after {self.shrink_hangs} runs that hung")
        else:
            self.hangs_again += 1
            if self.hangs_again >= self.hang_budget:
                raise Cut(f"exploration stopped after {self.hangs_again} runs that hung with a failure already "
                          f"reported", final=True)

    def go_on(self) -> None:
        """Raise `Interrupted` again if the check was interrupted (sticky: see ``interrupted``)."""
        if self.interrupted is not None:
            raise Interrupted(self.interrupted)

    def move_key_home(self) -> None:
        """Move the watcher shard the next run's keys start from (`strategies.run_keys`) on by a block of
        `strategies.KEYS_PER_RUN`, and on to the first shard no run has used yet, so that a check uses every shard
        of the system however many of its keys a run leaves unused. The first run starts at k0's shard."""
        shards = self.hello.declarations.watcher_shards
        if self.key_home is None:
            self.key_home = shards.shard("k0")
            return
        start = self.key_home + strategies.KEYS_PER_RUN
        unused = (shard % shards.count for shard in range(start, start + shards.count)
                  if shard % shards.count not in self.coverage.shards_hit)
        self.key_home = next(unused, start % shards.count)

    def best_so_far(self) -> Divergence | None:
        """This round's failure as far as it was shrunk (None: none was found): the shortest run that failed with its
        signature."""
        return self.shortest or self.first

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

    def example_done(self, steps: int) -> None:
        """Count the example just run; raises `Cut` when it spent the last run of the shrink budget."""
        if self.shrinking:
            self.shrink_runs += 1
            self.round_shrink_runs += 1
        else:
            self.examples += 1
            self.steps += steps
            self.shrinking = self.failing
            if not self.failing:  # a failing run keeps its keys while it is shrunk
                self.move_key_home()
        if self.on_example is not None:
            self.on_example(self)
        if self.shrinking and self.round_shrink_runs >= self.shrink_budget:
            raise Cut(f"the shrink budget of {self.shrink_budget} runs was spent")


def sends(*names: str):
    """The precondition of a rule that sends the commands ``names``: the system can execute them all."""
    return precondition(lambda self: self.session.hello.unsupported.isdisjoint(names))


class ConformanceMachine(RuleBasedStateMachine):
    """Rules and checking shared by both profiles; `machine_class` binds a `Session`."""

    session: ClassVar[Session]
    profile: ClassVar[str]
    #: the commands that only read the state
    READS: ClassVar[tuple[v.Command, ...]]
    #: the command that puts a new entry on the timer (`add_entry`)
    ADD: ClassVar[str]

    def __init__(self) -> None:
        super().__init__()
        self.model: Model | None = None
        self.steps: list[Step] = []
        self.outcomes: list[StepOutcome] = []
        self.ends_with_shutdown = False
        #: the system is sent nothing more: the run failed, or reached a known failure
        self.stopped = False
        #: this run's failure, raised when the run has drawn all its steps (`fail`)
        self.failure: Divergence | None = None
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
        session.go_on()
        session.renew(params)
        try:
            session.system.init(self.profile, params)
        except SYSTEM_ERRORS as error:
            self.failed_to_answer(None, None, error)

    def execute(self, command: v.Command) -> None:
        """Run ``command`` on the model and the system and check the system's observation. After a failure the
        system is sent nothing more, but the model still runs the rest of the run's rules, so what a run draws
        depends on its choices and the model alone, never on where the system failed (`fail`)."""
        if self.stopped:
            self.expect(command)
            return
        session = self.session
        session.go_on()
        before = None if session.failing else Before.of(self.model, command)
        self.kafka.before(self.model, command)
        expected = self.expect(command)
        self.edge = self.kafka.after(self.model, command, expected)
        if (known := findings.foreseen(self.edge, command, expected, session.known)) is not None:
            self.stopped = True  # a known hang: sending the step would cost a time limit and a fresh system
            session.known[known.signature] += 1
            return
        self.steps.append(Step(len(self.steps) + 1, command, expected))
        try:
            observed = session.system.step(command)
        except SYSTEM_ERRORS as error:
            self.failed_to_answer(command, expected, error)
            return
        failures = self.checker.check(command, expected, observed)
        self.outcomes.append(StepOutcome(len(self.steps), command, expected, None, observed, tuple(failures)))
        if before is not None:
            session.coverage.record(self.model, command, expected, before)
        if failures:
            self.fail(f"step {len(self.steps)} ({format_command(command)}): " + "; ".join(map(str, failures)),
                      findings.failure_signature(command, failures[0].what), command, expected, observed, None)

    def expect(self, command: v.Command) -> v.Observation:
        """The model's observation of ``command``, within the reference's time limit. A model that hangs or raises
        (but for `CommandError`: these rules sent a malformed command, which `rerun` relies on) ends the check with
        `ReferenceBroke`: no verdict about the system can rest on it."""
        try:
            with limited(self.session.model_timeout):
                return self.model.step(command)
        except CommandError:
            raise
        except (Exception, TimeLimit) as error:
            failure = (f"hung: no answer within {self.session.model_timeout:g} s" if isinstance(error, TimeLimit)
                       else f"raised {type(error).__name__}: {error}")
            summary = (f"step {len(self.steps) + 1} ({format_command(command)}): the reference model {failure}; this "
                       f"is a bug in kpurgatory, not in the implementation")
            step = Step(len(self.steps) + 1, command, v.Observation())  # the model has no observation of it
            raise ReferenceBroke(self.params, [*self.steps, step], self.outcomes, summary,
                                 Signature(REFERENCE_BROKE, command.name, type(error).__name__), summary) from None

    def failed_to_answer(self, command: v.Command | None, expected: v.Observation | None,
                         error: BaseException) -> None:
        """The system raised, or its adapter broke (`AdapterError`), in ``command`` (None: in init): a failure like
        any other, and shrinkable."""
        described = str(error) if isinstance(error, AdapterError) else f"{type(error).__name__}: {error}"
        at, where = ("init", "init") if command is None else (f"step {len(self.steps)}", command.name)
        self.fail(f"{at}: system failed: {described}", findings.error_signature(where, error), command, expected,
                  None, error)

    def fail(self, summary: str, signature: Signature, command: v.Command | None, expected: v.Observation | None,
             observed: v.Observation | None, error: BaseException | None) -> None:
        """End the run at a failure: raised for Hypothesis to shrink once the run has drawn all its steps (`teardown`),
        unless its signature is already reported. Were it raised here, the run would stop drawing where the system
        failed, and a run that went on past the same choices before (its keys then on another watcher shard,
        `strategies.run_keys`) would make Hypothesis's data generation inconsistent (FlakyStrategyDefinition)."""
        self.stopped = True
        failed = summary  # the report's error: a finding is named beside it (`ReplayReport.finding`)
        finding = findings.recognise(self.edge, command, expected, observed, error)
        if finding is not None:
            signature, summary = finding.signature, f"{finding}. {summary}"
        if signature in self.session.known:
            self.session.known[signature] += 1
            if signature.kind == "hung":
                self.session.hung()
            return
        stop = Divergence(self.params, self.steps, self.outcomes, summary, signature,
                          failed if error is not None else None, finding)
        self.session.failed(stop)
        self.failure = stop

    def draw_delay(self, data: st.DataObject) -> int | None:
        """A delay from now, inside what the system declares it promises anything for (None: nothing is)."""
        delay = data.draw(strategies.delays(self.params, self.model.now_ms, clocks_of(self.model.timer)),
                          label="delay_ms")
        return strategies.declared_delay(delay, self.model.now_ms, self.declarations)

    def declared(self, delay_ms: int) -> bool:
        """The system promises something for a delay of ``delay_ms`` from now."""
        return self.declarations.within_domain(self.model.now_ms, delay_ms)

    def teardown(self) -> None:
        if (self.model is not None and self.ends_with_shutdown and not self.stopped
                and "shutdown" not in self.session.hello.unsupported):
            self.execute(v.Shutdown())
        self.session.example_done(len(self.steps))
        if self.failure is not None:
            raise self.failure

    # --- rules of both profiles ------------------------------------------------------------------------------

    @sends("advance")
    @rule(data=st.data())
    def advance(self, data: st.DataObject) -> None:
        self.execute(v.Advance(min(self.model.now_ms + data.draw(self.gaps, label="gap"), self.clock_limit)))

    @sends("advance")
    @rule(data=st.data())
    def advance_to_boundary(self, data: st.DataObject) -> None:
        """To the next multiple of a power-of-two tick or of a level's interval, or a millisecond either side: where
        a tick counter carries, a mask wraps, a level's window ends; or where a comparison of the wheel's add changes
        its answer (`strategies.wheel_edges`)."""
        to_ms = data.draw(strategies.at_boundaries(self.params, self.model.now_ms, clocks_of(self.model.timer)),
                          label="to_ms")
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

    @precondition(lambda self: self.session.hello.unsupported.isdisjoint(("advance", self.ADD))
                  and self.model.timer.timing_wheel.overflow_wheel is not None)
    @rule(data=st.data())
    def meet_at_interval(self, data: st.DataObject) -> None:
        """Two entries into the first wheel's slot of one time ``due``, through the edge of its interval
        (`strategies.interval_meetings`): one with a deadline an interval after ``due``, filed now in a bucket of the
        third wheel or above that falls due at ``due``; one more that fires an interval before ``due``, so the
        clocks move there; then one with its deadline at ``due``, a whole interval away; then the clock to ``due``.
        A wheel that files at its interval instead of passing it on has both in one bucket. Once an overflow wheel
        exists: the first entry beyond the first wheel's interval is for the other rules to place (at the interval
        itself, now and then)."""
        dues = strategies.interval_meetings(self.params, self.model.now_ms, clocks_of(self.model.timer))
        if not dues or self.clock_limit < dues[-1]:
            return
        due = data.draw(st.sampled_from(dues), label="due")
        interval = self.params.tick_ms * self.params.wheel_size
        for deadline in (due + interval, due - interval):
            self.add_entry(deadline - self.model.now_ms)
        self.execute(v.Advance(due - interval))
        self.add_entry(interval)
        self.execute(v.Advance(due))

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
    ADD = "timer_add"
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

    def add_entry(self, delay_ms: int) -> None:
        """A new task with ``delay_ms``, if the system promises anything for it."""
        if self.declared(delay_ms):
            task = f"t{len(self.task_delays)}"
            self.task_delays[task] = delay_ms
            self.execute(v.TimerAdd(task, delay_ms))

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
    ADD = "watch"
    ops = Bundle("ops")
    keys = Bundle("keys")
    key_lists = st.lists(keys, min_size=1, max_size=4)  # small key pools: shared and duplicate keys are common

    @initialize(data=st.data(), ends_with_shutdown=st.booleans())
    def start(self, data: st.DataObject, ends_with_shutdown: bool) -> None:
        self.op_count = 0
        self.op_delays: dict[str, int] = {}
        self.begin(data.draw(strategies.params("purgatory", self.session.hello.declarations), label="params"),
                   ends_with_shutdown)

    @initialize(target=keys, data=st.data())
    def some_keys(self, data: st.DataObject):
        """A few keys, so ops share keys and repeat them, on watcher shards that move on from run to run
        (`strategies.run_keys`, `Session.move_key_home`). (A rule minting keys would now and then be the only rule
        Hypothesis's swarm testing enables, and spend whole runs doing nothing.)"""
        session = self.session
        keys = strategies.run_keys(session.hello.declarations.watcher_shards, session.key_home)
        self.run_keys = data.draw(keys, label="keys")
        return multiple(*self.run_keys)

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

    def add_entry(self, delay_ms: int) -> None:
        """A new op that waits for its deadline, watched on the run's first key, if the system promises anything for
        ``delay_ms``."""
        if self.declared(delay_ms):
            op = f"o{self.op_count}"
            self.op_count += 1
            self.op_delays[op] = delay_ms
            self.execute(v.Watch(op, [self.run_keys[0]], delay_ms, None))

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
            if machine.stopped:
                break
            machine.execute(command)
    except CommandError:
        return None
    return machine.failure


def minimise(session: Session, stop: Divergence) -> Divergence:
    """``stop`` with every block of steps deleted whose deletion keeps its signature: blocks of half the run first,
    then of a quarter and so on down to single steps (each step is tried alone once, last first), so that a failure
    whose every rerun hangs is minimised with few hanging runs. Hypothesis's shrinker works on the choices that made
    the run and now and then leaves a step it could not delete without changing another; the run's own commands can
    always be tried without it. The last step, the one that failed, is kept."""
    size = max(1, (len(stop.steps) - 1) // 2)
    while True:
        end = len(stop.steps) - 1
        while end > 0:
            start = max(0, end - size)
            commands = [step.command for step in stop.steps]
            again = rerun(session, stop.params, commands[:start] + commands[end:])
            session.shrink_runs += 1
            if again is not None and again.signature == stop.signature and len(again.steps) < len(stop.steps):
                stop = again
                end = min(start, len(stop.steps) - 1)
            else:
                end = start
        if size == 1:
            return stop
        size //= 2
