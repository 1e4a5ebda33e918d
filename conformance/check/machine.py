"""Runs drawn from the model, then judged: the heart of `kpurgatory check`.

A run is drawn against the reference model alone (`RunBuilder`): each rule is one kind of step, it draws its
arguments from the model's state (`conformance.check.strategies`: small wheels, clock origins over the whole 64-bit
range, delays at level boundaries, deadlines and advances on every comparison of the wheel's add and at
Long.MAX_VALUE; advances to a pending deadline or a millisecond either side of it; ops that are still waiting), runs
the command on the model and records the model's observation, what Kafka's own timer does there
(`findings.KafkaShadow`) and the coverage reached. Runs respect the system's declared delay domain: an input it
leaves undefined is never sent (a delay is moved to the domain's edge, a re-add that would leave it is skipped), and
the clock stays within its maximum deadline. A rule whose command the system's hello lists as unsupported (a Kafka
release without the call) is never chosen.

Since nothing the system answers steers a run, the whole run is known before it is sent: `judge` sends it in one
batch to a system that takes batches (an adapter with the protocol's ``batch`` feature, an in-process system in its
own process) and compares each answer exactly as `kpurgatory replay` does (`replay.StepChecker`: the model's
observation at level ``exact``, the contract properties as an invariant at both levels). The first failing step ends
the run with a `Divergence`; the steps it carries are the model's observations, so a counterexample is a test vector
in the trace format. A step whose system fails to answer (raises, crashes, hangs past its time limit or says itself
that the call would not end, breaks the protocol) fails like a divergence, with a signature of its own; a dead system
is replaced by a fresh one (`Session.renew`) before the next run. A step in the input class of a known Kafka finding
that Kafka hangs on (`findings.foreseen`) is not even sent.

`Session` is what outlives one run: the system, the coverage and counts of the check, and the signatures already
reported (`conformance.check.findings`). Only a system that cannot be made afresh raises `Abort`, which ends the
check.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, ClassVar, Iterator

import attrs

from kpurgatory.conformance.adapters.subprocess import AdapterError, AdapterTimedOut
from kpurgatory.conformance.adapters.sut import Hello, SystemUnderTest, play
from kpurgatory.conformance.adapters.timed import TimeLimit, failure_text, limited
from kpurgatory.conformance.check import findings, strategies
from kpurgatory.conformance.check.choices import Choices, SeededChoices, pick, roll
from kpurgatory.conformance.check.coverage import Before, Coverage, clocks_of, entry_places
from kpurgatory.conformance.check.findings import Finding, Signature
from kpurgatory.conformance.cli import Interrupted
from kpurgatory.conformance.traces.codec import Header, Step, Trace
from kpurgatory.conformance.traces.replay import SYSTEM, StepChecker, StepOutcome, format_command
from kpurgatory.model import Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.machine import CommandError


#: runs that may hang, each at the cost of the full time limit: after this many more with failures already reported,
#: exploration stops; a failure is shrunk with this much time to spend on runs that hang (`HANG_PROBE_FRACTION`),
#: after which shrinking stops and the shortest failing run so far is reported, marked as not fully shrunk
HANG_BUDGET = 8
#: a hang is shrunk under a twentieth of the time limit (at least `HANG_PROBE_MIN_S`), so that it shrinks as far as any
#: failure for the time other failures take; the run it shrinks to is then run again under the full limit and
#: reported only if it hangs there too (else it is shrunk again under the full limit): no verdict rests on the
#: shorter limit
HANG_PROBE_FRACTION, HANG_PROBE_MIN_S = 0.05, 0.25


def probe_limit(limit: float) -> float:
    """The time limit of a call while a hang found under ``limit`` is shrunk."""
    return min(limit, max(limit * HANG_PROBE_FRACTION, HANG_PROBE_MIN_S))


def shrink_hang_budget(hang_budget: int, limit: float) -> int:
    """How many runs may hang while a hang found under ``limit`` is shrunk: ``hang_budget`` runs' worth of time."""
    return int(hang_budget * limit / probe_limit(limit))
#: runs Hypothesis's shrinker may spend on one failure (kpurgatory check --shrink-budget): a count, where Hypothesis's
#: own limit is five minutes of wall-clock time (which `conformance.check.sequential.shrink` does not go through), so
#: that a loaded machine shrinks exactly as far as a quiet one. Shrinking a failure typically takes a few hundred runs
SHRINK_BUDGET = 5000
#: a Kafka finding is named and known before it is shrunk, and cut where the model's side reached it
#: (`sequential.shrink`): one the system does not confirm there gets this much of the budget at most
FINDING_SHRINK_BUDGET = 100


#: the signature kind of a run the reference model itself failed on
REFERENCE_BROKE = "reference broke"
#: the signature kinds of a system that broke: a batch it breaks on is sent again one request at a time to a fresh
#: system, to find where; shrinking such a failure sends one request at a time from the start
BREAKS = ("adapter crashed", "system crashed", "adapter wrote garbage", "protocol violation", "hung")


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
    """One check of one profile: the system and what the runs so far reached. Exploration counts ``examples`` and
    ``steps``; what runs after a failure to make it smaller is shrinking (``shrink_runs``)."""

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
    #: a failure is being shrunk
    shrinking: bool = False
    #: a run of this check failed with a new signature, and the first such run
    failing: bool = False
    shortest: Divergence | None = None
    #: signatures reported so far -> how many later runs failed with them again (and passed, so as to go on)
    known: dict[Signature, int] = attrs.Factory(dict)
    #: runs that may hang while a failure is shrunk, and while exploring after it (`HANG_BUDGET`)
    hang_budget: int = HANG_BUDGET
    #: while a hang is shrunk: the shorter time limit each call of a fresh system gets (`HANG_PROBE_FRACTION`)
    probe_limit: float | None = None
    #: runs Hypothesis may spend shrinking one failure (`SHRINK_BUDGET`)
    shrink_budget: int = SHRINK_BUDGET
    #: runs of the corpus's failing runs replayed before exploration (`conformance.check.corpus`)
    corpus_runs: int = 0
    #: runs that hung with their failure already reported, while exploring
    hangs_again: int = 0
    #: the reference model's time limit per run (None: none), as the system's calls have one
    model_timeout: float | None = None
    #: the signal that interrupted the check (SIGINT, SIGTERM): every later run raises `Interrupted` again, so an
    #: interruption that something on the way swallowed still ends the check at the next run
    interrupted: str | None = None
    #: runs are being explored (`conformance.check.sequential.explore`)
    exploring: bool = False
    #: why exploration ended before its budget (`Cut`)
    cut_short: str | None = None
    #: runs go to the system in one batch where it takes batches (`judge`); not once a batch hung, since where it hung
    #: is found only by sending the run again one request at a time, which hangs again
    batching: bool = True
    batch_hung: bool = False

    def __attrs_post_init__(self) -> None:
        self.coverage = Coverage(self.profile, self.hello.declarations.watcher_shards)

    def key_home(self, run: int) -> int:
        """The watcher shard run number ``run``'s keys start from (`strategies.draw_run_keys`): a block of
        `strategies.KEYS_PER_RUN` further on per run, from k0's, so that a check uses every shard of the system
        however many of its keys a run leaves unused, and a run's keys depend on its number alone."""
        shards = self.hello.declarations.watcher_shards
        return (shards.shard("k0") + run * strategies.KEYS_PER_RUN) % shards.count

    def hung_again(self) -> None:
        """Count an explored run that hung with its failure already reported; raises `Cut` when the budget is
        spent."""
        self.hangs_again += 1
        if self.hangs_again >= self.hang_budget:
            raise Cut(f"exploration stopped after {self.hangs_again} runs that hung with a failure already reported",
                      final=True)

    def go_on(self) -> None:
        """Raise `Interrupted` again if the check was interrupted (sticky: see ``interrupted``)."""
        if self.interrupted is not None:
            raise Interrupted(self.interrupted)

    def renew(self, params: v.Params | None) -> None:
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
            if self.probe_limit is not None:
                self.system.timeout = self.probe_limit
            self.system.hello()
        except Exception as error:
            summary = f"could not make a fresh system after a failure: {error}"
            raise Abort(params, [], [], summary, Signature("restart failed", "", ""), summary) from None

    @contextlib.contextmanager
    def probing(self, signature: Signature, probe: bool = True) -> Iterator[int]:
        """While the failure of ``signature`` is shrunk: if it is a hang of a system with a time limit (and
        ``probe``), every call gets the shorter `HANG_PROBE_FRACTION` of it and more runs may hang, for the same time
        in all; yields how many runs may hang."""
        limit = getattr(self.system, "timeout", None)
        if signature.kind != "hung" or not limit or not probe:
            yield self.hang_budget
            return
        self.probe_limit = self.system.timeout = probe_limit(limit)
        try:
            yield shrink_hang_budget(self.hang_budget, limit)
        finally:
            self.probe_limit = None
            self.system.timeout = limit

    def broke(self) -> bool:
        """The system broke on the run just judged (hung past its time limit, crashed): it cost a time limit or a
        fresh system. An adapter that stops a call that would not end and says so costs neither."""
        return getattr(self.system, "broken", None) is not None

    def example_done(self, steps: int) -> None:
        """Count an explored run of ``steps`` steps."""
        self.examples += 1
        self.steps += steps
        if self.on_example is not None:
            self.on_example(self)

    def shrink_run_done(self) -> None:
        """Count a run spent shrinking."""
        self.shrink_runs += 1
        if self.on_example is not None:
            self.on_example(self)


@attrs.define(eq=False)
class Drawn:
    """A run drawn against the model: its parameters, its steps (each command with the model's observation), what
    Kafka's timer does at each step (`findings.KafkaShadow`; None: what the model does) and the choices that drew it
    (empty for a run given as commands). ``sendable`` steps are sent to the system: the rest follow a step in the
    input class of a known finding that hangs (``foreseen``), which need not be sent to know how it ends."""

    profile: str
    params: v.Params
    steps: list[Step] = attrs.Factory(list)
    edges: list[findings.Edge | None] = attrs.Factory(list)
    choices: tuple[int, ...] = ()
    sendable: int | None = None
    foreseen: Finding | None = None

    @property
    def sent(self) -> list[Step]:
        return self.steps if self.sendable is None else self.steps[:self.sendable]


class RunBuilder:
    """Draws one run against the model, rule by rule: each rule is one kind of step (one command, or a few that
    reach a situation together), enabled when its precondition holds on the model's state and the system can be sent
    its commands. Each run first enables a random subset of the rules (swarm testing: a run that never cancels
    reaches deep wheels that cancels would empty), then draws its length in rules, mostly the longest, and each rule
    among those enabled. Nothing the system answers steers a run: runs can be drawn before they are sent, in
    batches and on any number of cores."""

    profile: ClassVar[str]
    #: the commands that only read the state
    READS: ClassVar[tuple[v.Command, ...]]
    #: the command that puts a new entry on the timer (`add_entry`)
    ADD: ClassVar[str]

    def __init__(self, session: Session, choices: Choices, coverage: Coverage | None = None):
        self.session, self.choices, self.coverage = session, choices, coverage
        self.hello = session.hello
        self.declarations = self.hello.declarations
        #: the clock never passes the latest deadline the system accepts
        self.clock_limit = self.declarations.max_deadline_ms
        self.reads = [command for command in self.READS if self.hello.drives(command)]
        self.kafka = findings.KafkaShadow()

    def draw(self, max_steps: int, key_home: int | None, cut_at: int | None = None) -> Drawn:
        """A run of at most ``max_steps`` commands; a purgatory run's keys start at watcher shard ``key_home``.
        ``cut_at``: drawing stops once the run has that many commands (a shrinking run that could only fail within
        them), with the choices made so far the same as the whole run's."""
        choices = self.choices
        params = strategies.draw_params(choices, self.profile, self.declarations)
        ends_with_shutdown = bool(roll(choices, 2)) and "shutdown" not in self.hello.unsupported
        self.begin(params)
        self.start(key_home)
        rules = [rule for rule, names in self.rules() if self.hello.unsupported.isdisjoint(names)]
        enabled = [rule for rule in rules if choices.integer(0, 4) < 4]  # 0-3: on, so a shrunk run has them all
        length = choices.integer(1, max_steps, usual=max_steps)
        for _ in range(length):
            if len(self.run.steps) >= max_steps - ends_with_shutdown:
                break
            if cut_at is not None and len(self.run.steps) >= cut_at:
                return self.run
            with choices.step():
                # a rule is first picked among all that are enabled, whatever the state, so that deleting a step
                # while shrinking leaves the later steps' rules as they were; if it does not apply here, among those
                # that do
                rule = pick(choices, enabled) if enabled else None
                if rule is None or not rule.applies(self):
                    rule = pick(choices, [rule for rule in enabled if rule.applies(self)]
                                or [rule for rule in rules if rule.applies(self)])
                rule.draw(self)
        if ends_with_shutdown:
            self.execute(v.Shutdown())
        return self.run

    def begin(self, params: v.Params) -> None:
        self.params = params
        self.model = Model(self.profile, params, self.declarations.release)
        self.run = Drawn(self.profile, params)
        #: the model's pending entries as coverage last saw them: the next step's before (None: not seen yet)
        self.entries: dict[str, tuple[int, int]] | None = None

    def start(self, key_home: int | None) -> None:
        """What a profile draws before its steps."""

    def rules(self) -> list[tuple[Rule, tuple[str, ...]]]:
        """The profile's rules, each with the commands it sends."""
        return [(rule, rule.sends) for rule in RULES[self.profile]]

    def execute(self, command: v.Command) -> None:
        """Run ``command`` on the model and record it as the run's next step, with what Kafka's timer does there;
        a step after a foreseen known hang is recorded but not sent."""
        coverage = self.coverage
        before = Before.of(self.model, command, self.entries) if coverage is not None else None
        self.kafka.before(self.model, command)
        self.current = command
        expected = self.model.step(command)
        edge = self.kafka.after(self.model, command, expected)
        run = self.run
        run.steps.append(Step(len(run.steps) + 1, command, expected))
        run.edges.append(edge)
        if run.sendable is None and (known := findings.foreseen(edge, command, expected,
                                                                 self.session.known)) is not None:
            run.sendable, run.foreseen = len(run.steps) - 1, known
        if coverage is not None:
            self.entries = coverage.record(self.model, command, expected, before)

    def draw_delay(self) -> int | None:
        """A delay from now, inside what the system declares it promises anything for (None: nothing is)."""
        delay = strategies.draw_delay(self.choices, self.params, self.model.now_ms, clocks_of(self.model.timer))
        return strategies.declared_delay(delay, self.model.now_ms, self.declarations)

    def declared(self, delay_ms: int) -> bool:
        """The system promises something for a delay of ``delay_ms`` from now."""
        return self.declarations.within_domain(self.model.now_ms, delay_ms)

    # --- rules of both profiles ------------------------------------------------------------------------------

    def advance(self) -> None:
        gap = strategies.draw_gap(self.choices, self.params)
        self.execute(v.Advance(min(self.model.now_ms + gap, self.clock_limit)))

    def advance_to_boundary(self) -> None:
        """To the next multiple of a power-of-two tick or of a level's interval, or a millisecond either side: where
        a tick counter carries, a mask wraps, a level's window ends; or where a comparison of the wheel's add changes
        its answer (`strategies.draw_wheel_edge`)."""
        to_ms = strategies.draw_boundary(self.choices, self.params, self.model.now_ms, clocks_of(self.model.timer))
        self.execute(v.Advance(min(to_ms, self.clock_limit)))

    def advance_to_deadline(self) -> None:
        """To a pending entry's expiration, a millisecond either side or the start of its tick: where early or late
        firing shows."""
        deadlines = sorted({expiration for _, expiration in entry_places(self.model.timer).values()})
        deadline = pick(self.choices, deadlines)
        tick_start = deadline - deadline % self.params.tick_ms
        to_ms = pick(self.choices, (deadline, deadline - 1, deadline + 1, tick_start))
        self.execute(v.Advance(min(max(to_ms, self.model.now_ms), self.clock_limit)))

    def meet_at_interval(self) -> None:
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
        due = pick(self.choices, dues)
        interval = self.params.tick_ms * self.params.wheel_size
        for deadline in (due + interval, due - interval):
            self.add_entry(deadline - self.model.now_ms)
        self.execute(v.Advance(due - interval))
        self.add_entry(interval)
        self.execute(v.Advance(due))

    def read(self) -> None:
        """The counters and the wheel read-out, in one rule, so that reads do not crowd out the commands that
        change the state."""
        self.execute(pick(self.choices, self.reads))

    def add_entry(self, delay_ms: int) -> None:
        raise NotImplementedError


class TimerRuns(RunBuilder):
    profile = "timer"
    READS = (v.Size(), v.Wheel(), v.DelayQueue())
    ADD = "timer_add"

    def start(self, key_home: int | None) -> None:
        self.task_delays: dict[str, int] = {}

    def tasks(self) -> list[str]:
        return list(self.task_delays)

    def add_task(self) -> None:
        delay = self.draw_delay()
        if delay is not None:
            self.add_entry(delay)

    def add_entry(self, delay_ms: int) -> None:
        """A new task with ``delay_ms``, if the system promises anything for it."""
        if self.declared(delay_ms):
            task = f"t{len(self.task_delays)}"
            self.task_delays[task] = delay_ms
            self.execute(v.TimerAdd(task, delay_ms))

    def add_again(self) -> None:
        """Re-adding a task moves it: its pending entry is replaced and its deadline reset."""
        task = pick(self.choices, self.tasks())
        if self.declared(self.task_delays[task]):
            self.execute(v.TimerAdd(task, self.task_delays[task]))

    def cancel_task(self) -> None:
        self.execute(v.TimerCancel(pick(self.choices, self.tasks())))


class PurgatoryRuns(RunBuilder):
    profile = "purgatory"
    READS = (v.Watched(), v.Delayed(), v.Size(), v.Wheel(), v.WatcherKeys(), v.DelayQueue())
    ADD = "watch"

    def start(self, key_home: int | None) -> None:
        """A few keys, so ops share keys and repeat them, on watcher shards that move on from run to run
        (`strategies.draw_run_keys`, `Session.key_home`)."""
        self.op_delays: dict[str, int] = {}
        self.run_keys = strategies.draw_run_keys(self.choices, self.declarations.watcher_shards, key_home)

    def ops(self) -> list[str]:
        return list(self.op_delays)

    def keys(self) -> list[str]:
        """Mostly one key, up to four, with repeats: small key pools make shared and duplicate keys common."""
        return [pick(self.choices, self.run_keys) for _ in range(self.choices.integer(1, 4))]

    def new_op(self, delay_ms: int) -> str:
        op = f"o{len(self.op_delays)}"
        self.op_delays[op] = delay_ms
        return op

    def watch_new(self) -> None:
        keys, ready_on = self.keys(), pick(self.choices, strategies.READY_ON_CHOICES)
        delay = self.draw_delay()
        if delay is not None:
            self.execute(v.Watch(self.new_op(delay), keys, delay, ready_on))

    def add_entry(self, delay_ms: int) -> None:
        """A new op that waits for its deadline, watched on the run's first key, if the system promises anything for
        ``delay_ms``."""
        if self.declared(delay_ms):
            self.execute(v.Watch(self.new_op(delay_ms), [self.run_keys[0]], delay_ms, None))

    def watch_again(self) -> None:
        """The same op object watched again: two more tries, more watch entries, its deadline reset."""
        op, keys = pick(self.choices, self.ops()), self.keys()
        if self.declared(self.op_delays[op]):
            self.execute(v.Watch(op, keys))

    def watch_on_every_shard(self) -> None:
        """A request on many partitions: one op watched on a key of each of a span of consecutive watcher shards
        (mostly every shard the system declares), and half the time completed at once, so that every shard of the
        span holds a stale entry for the next purge to sweep. The span is drawn by its last shard and its width, so
        that shrinking narrows it to the one shard a failure needs."""
        shards = self.declarations.watcher_shards
        last = self.choices.integer(0, shards.count - 1, usual=shards.count - 1)
        widest = min(last + 1, strategies.WIDEST_WATCH)
        width = self.choices.integer(1, widest, usual=widest)
        first = last + 1 - width
        delay = self.draw_delay()
        if delay is None:
            return
        op = self.new_op(delay)
        self.execute(v.Watch(op, strategies.shard_keys(shards, first, width), delay, None))
        if roll(self.choices, 2) == 0 and "force" not in self.hello.unsupported:
            self.execute(v.Force(op))

    def watch_without_keys(self) -> None:
        self.execute(v.Watch(pick(self.choices, self.ops()), []))

    def set_ready(self) -> None:
        op = pick(self.choices, self.ops())
        self.execute(v.SetReady(op, pick(self.choices, strategies.READY_CHOICES)))

    def check(self) -> None:
        self.execute(v.Check(pick(self.choices, self.run_keys)))

    def waiting(self) -> dict[str, list[str]]:
        """Ops watched and not completed -> the keys they are watched on."""
        keys: dict[str, list[str]] = {}
        for key, ops in self.model.purgatory.watchers.items():
            for op in ops:
                if not op.completed and key not in keys.setdefault(op.op_id, []):
                    keys[op.op_id].append(key)
        return keys

    # Ops picked from all the run's ops are mostly long done; the two rules below pick ops that are still waiting.

    def wake(self) -> None:
        """What a broker does: change what a waiting op waits for, then check a key it is watched on."""
        waiting = self.waiting()
        op = pick(self.choices, sorted(waiting))
        self.execute(v.SetReady(op))
        self.execute(v.Check(pick(self.choices, waiting[op])))

    def watch_waiting_again(self) -> None:
        """A waiting op watched again, mostly after part of its delay has passed: more entries, another estimate
        increment, and its deadline reset to now + delay (a kept deadline fires early, or sits in another bucket)."""
        keys = self.keys()
        op = pick(self.choices, sorted(self.waiting()))
        entry = self.model.ops[op].entry
        if entry is not None and entry.expiration_ms > self.model.now_ms + 1:
            to_ms = self.choices.integer(self.model.now_ms, entry.expiration_ms - 1)
            self.execute(v.Advance(min(to_ms, self.clock_limit)))
        if self.declared(self.op_delays[op]):
            self.execute(v.Watch(op, keys))

    def cancel_key(self) -> None:
        self.execute(v.CancelKey(pick(self.choices, self.run_keys)))

    def force(self) -> None:
        self.execute(v.Force(pick(self.choices, self.ops())))

    def try_complete(self) -> None:
        self.execute(v.Try(pick(self.choices, self.ops())))

    def cancel(self) -> None:
        self.execute(v.Cancel(pick(self.choices, self.ops())))


@attrs.frozen
class Rule:
    """One kind of step: ``draw`` draws and executes it on a builder, when ``when`` holds on the builder's state and
    the system can be sent the commands ``sends``."""

    draw: Callable[[RunBuilder], None]
    sends: tuple[str, ...]
    when: Callable[[RunBuilder], bool] | None = None

    def applies(self, builder: RunBuilder) -> bool:
        return self.when is None or self.when(builder)


def pending(builder: RunBuilder) -> bool:
    return builder.model.timer.size() > 0


def overflowing(builder: RunBuilder) -> bool:
    return builder.model.timer.timing_wheel.overflow_wheel is not None


#: both profiles' rules, then each profile's; what a rule sends beyond its own command is listed with it
COMMON_RULES = (
    Rule(RunBuilder.advance, ("advance",)),
    Rule(RunBuilder.advance_to_boundary, ("advance",)),
    Rule(RunBuilder.advance_to_deadline, ("advance",), pending),
    Rule(RunBuilder.read, (), lambda builder: bool(builder.reads)),
)
RULES: dict[str, tuple[Rule, ...]] = {
    "timer": COMMON_RULES + (
        Rule(RunBuilder.meet_at_interval, ("advance", "timer_add"), overflowing),
        Rule(TimerRuns.add_task, ("timer_add",)),
        Rule(TimerRuns.add_again, ("timer_add",), TimerRuns.tasks),
        Rule(TimerRuns.cancel_task, ("timer_cancel",), TimerRuns.tasks),
    ),
    "purgatory": COMMON_RULES + (
        Rule(RunBuilder.meet_at_interval, ("advance", "watch"), overflowing),
        Rule(PurgatoryRuns.watch_new, ("watch",)),
        Rule(PurgatoryRuns.watch_again, ("watch",), PurgatoryRuns.ops),
        Rule(PurgatoryRuns.watch_without_keys, ("watch",), PurgatoryRuns.ops),
        Rule(PurgatoryRuns.watch_on_every_shard, ("watch",)),
        Rule(PurgatoryRuns.set_ready, ("set_ready",), PurgatoryRuns.ops),
        Rule(PurgatoryRuns.check, ("check",)),
        Rule(PurgatoryRuns.wake, ("set_ready", "check"), PurgatoryRuns.waiting),
        Rule(PurgatoryRuns.watch_waiting_again, ("advance", "watch"), PurgatoryRuns.waiting),
        Rule(PurgatoryRuns.cancel_key, ("cancel_key",)),
        Rule(PurgatoryRuns.force, ("force",), PurgatoryRuns.ops),
        Rule(PurgatoryRuns.try_complete, ("try",), PurgatoryRuns.ops),
        Rule(PurgatoryRuns.cancel, ("cancel",), PurgatoryRuns.ops),
    ),
}
BUILDERS: dict[str, type[RunBuilder]] = {"timer": TimerRuns, "purgatory": PurgatoryRuns}


def draw_run(session: Session, choices: Choices, steps: int, key_home: int | None,
             coverage: Coverage | None = None, cut_at: int | None = None) -> Drawn:
    """One run of ``session``'s profile drawn with ``choices`` against the model (recording ``coverage``), cut at
    ``cut_at`` commands (`RunBuilder.draw`)."""
    builder = BUILDERS[session.profile](session, choices, coverage)
    return on_the_model(session, builder, lambda: builder.draw(steps, key_home, cut_at))


def given_run(session: Session, params: v.Params, commands: list[v.Command]) -> Drawn:
    """The run of ``commands`` from ``params``, recorded as `draw_run` records a drawn one."""
    builder = BUILDERS[session.profile](session, SeededChoices(0))

    def execute() -> Drawn:
        builder.begin(params)
        for command in commands:
            builder.execute(command)
        return builder.run

    return on_the_model(session, builder, execute)


def on_the_model(session: Session, builder: RunBuilder, make: Callable[[], Drawn]) -> Drawn:
    """``make()``, which runs ``builder``'s commands on the model, within the reference's time limit. A model that
    hangs or raises (but for `CommandError`: a malformed command, which a bug in the rules draws and a corpus may
    hold) ends the check with `ReferenceBroke`: no verdict about the system can rest on it."""
    try:
        with limited(session.model_timeout):
            return make()
    except CommandError:
        raise
    except (Exception, TimeLimit) as error:
        run, command = getattr(builder, "run", None), getattr(builder, "current", None)
        if run is None or command is None:
            raise
        failure = failure_text(error, session.model_timeout)
        summary = (f"step {len(run.steps) + 1} ({format_command(command)}): the reference model {failure}; this "
                   f"is a bug in kpurgatory, not in the implementation")
        step = Step(len(run.steps) + 1, command, v.Observation())  # the model has no observation of it
        raise ReferenceBroke(run.params, [*run.steps, step], [], summary,
                             Signature(REFERENCE_BROKE, command.name, type(error).__name__), summary) from None


def judge(session: Session, run: Drawn) -> Divergence | None:
    """Send ``run`` to the system (in one batch where it takes batches) and compare each answer with the model's;
    the run's first failure, whatever its signature (None: it passed, or ended at a foreseen known hang). A system
    that broke mid-batch is made afresh and sent the run again one request at a time, so that the failure names
    the command that broke it."""
    session.go_on()
    session.renew(run.params)
    sent = run.sent
    played = play(session.system, run.profile, run.params, [step.command for step in sent],
                  session.batching and not session.batch_hung)
    if played.unanswered:
        session.batch_hung = session.batch_hung or isinstance(played.init_error, AdapterTimedOut)
        session.renew(run.params)
        played = play(session.system, run.profile, run.params, [step.command for step in sent], batch=False)
    checker = StepChecker(SYSTEM, Trace(Header("check", run.profile, run.params), ()), session.level,
                          session.hello.declarations)
    outcomes: list[StepOutcome] = []

    def failure(summary: str, signature: Signature, at: int, observed: v.Observation | None,
                error: BaseException | None) -> Divergence:
        step = sent[at] if at >= 0 else None
        finding = findings.recognise(run.edges[at] if at >= 0 else None, step and step.command,
                                     step and step.observation, observed, error)
        failed = summary
        if finding is not None:
            signature, summary = finding.signature, f"{finding}. {summary}"
        return Divergence(run.params, sent[:at + 1], outcomes, summary, signature,
                          failed if error is not None else None, finding)

    if played.init_error is not None:
        return failure(f"init: system failed: {described(played.init_error)}",
                       findings.error_signature("init", played.init_error), -1, None, played.init_error)
    for at, step in enumerate(sent):
        if at == len(played.observed):
            error = played.error
            return failure(f"step {step.seq}: system failed: {described(error)}",
                           findings.error_signature(step.command.name, error), at, None, error)
        observed = played.observed[at]
        failures = checker.check(step.command, step.observation, observed)
        outcomes.append(StepOutcome(step.seq, step.command, step.observation, None, observed, tuple(failures)))
        if failures:
            return failure(f"step {step.seq} ({format_command(step.command)}): " + "; ".join(map(str, failures)),
                           findings.failure_signature(step.command, failures[0].what), at, observed, None)
    return None


def described(error: BaseException) -> str:
    return str(error) if isinstance(error, AdapterError) else f"{type(error).__name__}: {error}"


def rerun(session: Session, params: v.Params, commands: list[v.Command]) -> Divergence | None:
    """Run ``commands`` from ``params``, outside exploration; the new failure it ends in, if any (None also when a
    command is malformed for the model, or the run fails with a signature already reported, or at a foreseen known
    hang: each counted in ``session.known``)."""
    try:
        run = given_run(session, params, commands)
    except CommandError:
        return None
    stop = judge(session, run)
    if run.foreseen is not None and stop is None:
        session.known[run.foreseen.signature] += 1
        return None
    if stop is not None and stop.signature in session.known:
        session.known[stop.signature] += 1
        return None
    return stop


def minimise(session: Session, stop: Divergence, hang_budget: int | None = None) -> Divergence:
    """``stop`` with every block of steps deleted whose deletion keeps its signature: blocks of half the run first,
    then of a quarter and so on down to single steps (each step is tried alone once, last first), so that a failure
    whose every rerun hangs is minimised with few hanging runs. Hypothesis's shrinker works on the choices that made
    the run and now and then leaves a step it could not delete without changing another; the run's own commands can
    always be tried without it. The last step, the one that failed, is kept. After ``hang_budget`` (the session's)
    reruns that hung at the cost of a time limit, it stops with `Cut`."""
    hang_budget = session.hang_budget if hang_budget is None else hang_budget
    size = max(1, (len(stop.steps) - 1) // 2)
    hangs = 0
    while True:
        end = len(stop.steps) - 1
        while end > 0:
            start = max(0, end - size)
            commands = [step.command for step in stop.steps]
            again = rerun(session, stop.params, commands[:start] + commands[end:])
            session.shrink_runs += 1
            if again is not None and again.signature.kind == "hung" and session.broke():
                hangs += 1
                if hangs >= hang_budget:
                    raise Cut(f"deleting steps stopped after {hangs} runs that hung")
            if again is not None and again.signature == stop.signature and len(again.steps) < len(stop.steps):
                stop = again
                end = min(start, len(stop.steps) - 1)
            else:
                end = start
        if size == 1:
            return stop
        size //= 2
