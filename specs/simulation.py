"""Refinement as a proof: model/ simulates the encodings, one step from any state, by symbolic execution of model/.

refinement.py checks model/ against the encodings on every run of a bounded domain: runs of at most a few
commands, over listed delays and advances. The obligations here check the same tie for one step from *any* state
that satisfies the purgatory's invariant, with every number left symbolic (the clock, deadlines, delays, tries,
``ready_on``, the estimate, the purge interval, the advance's target), by running model/'s own code on z3 terms
(`lift`): each feasible path through model/'s code for a command is a path condition and a successor, and z3 proves,
for every path, that the successor and what the command showed are step()'s.

The simulation relation R(model, s): model/'s state read through `refinement.abstraction` is s (clock, estimate,
the watcher map's keys, per op its flags, tries, timer entry and entries per key, the task and watch-entry
counters), and model/'s structures are well formed (`well_formed`: every listed op exists, no watch list is
empty, an op's timer entry is in the timer). `concretisation` builds, for a symbolic s, every model/ state related
to it: its branches on s are decided by the exploration, so every arrangement of the watch lists consistent with
the entry counts is a path of its own. So the obligation is: for every s satisfying the invariant (within the
structural bounds) and every command of the domain, every model/ state related to s steps, under model/'s code,
to a state related to step(s) — one step of an inductive argument whose base is the initial state (related by
construction) and whose invariant is purgatory.invariant (proved for step(); since step() and model/ stay related,
model/'s reachable states are abstracted by step()'s).

What is not lifted is stated as trusted: the timer. model/'s purgatory runs here over `DeadlineTimer`, the timer
as a deadline per op (exactly the abstraction step() makes); that model/timer.py's wheel behaves as that timer is
the wheel's business (wheel.timing.*, refinement.wheel.lifted for its per-level arithmetic, refinement.wheel
for the whole wheel within its bound).
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Callable, Iterator

import attrs
import z3

from kpurgatory.conformance.adapters.timed import TimeLimit, failure_text, limited
from kpurgatory.model import CommandError, Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.purgatory import DelayedOperation, DelayedOperationPurgatory
from kpurgatory.model.releases import CURRENT
from kpurgatory.model.timer import (DelayQueue, TaskCounter, TimerTask, TimerTaskEntry, TimerTaskList, TimingWheel,
                                    check_expiration)
from kpurgatory.specs import core
from kpurgatory.specs import purgatory as spec
from kpurgatory.specs import refinement, wheel
from kpurgatory.specs.core import NOT_INDUCTIVE, PROVED, REFUTED, UNKNOWN, Bound, ModelBroke, Outcome, obligation
from kpurgatory.specs.javalong import EXACT, LONG_MAX, Long
from kpurgatory.specs.lift import Bool, Int, PathLimit, Paths, Unliftable, term

# ---------------------------------------------------------------------------------------------------------------
# The timer step() abstracts to, under model/'s purgatory
# ---------------------------------------------------------------------------------------------------------------


@attrs.define(eq=False)
class DeadlineTimer:
    """The timer as a deadline per task, with SystemTimer's interface as model/'s purgatory uses it: an entry
    is due once the clock reaches the start of its deadline's tick; an advance sets the clock and runs every due
    entry that was not cancelled. Entries live in one TimerTaskList (model/'s own), whose counter is the size."""

    now_ms: object
    tick_ms: int
    pending: TimerTaskList = attrs.field(factory=lambda: TimerTaskList(TaskCounter()))

    def due(self, entry: TimerTaskEntry, now_ms: object) -> bool:
        expiration = entry.expiration_ms
        return bool(expiration - expiration % self.tick_ms <= now_ms)

    def add(self, task: TimerTask, expiration_ms: object = None) -> None:
        entry = TimerTaskEntry(task, check_expiration(self.now_ms, task.delay_ms)
                               if expiration_ms is None else expiration_ms)
        task.set_timer_task_entry(entry)
        if not self.due(entry, self.now_ms):
            self.pending.add(entry)
        elif not entry.cancelled():
            task.run()

    def advance_clock(self, to_ms: object) -> None:
        self.now_ms = to_ms
        for entry in list(self.pending.entries):
            if self.due(entry, to_ms):
                self.pending.remove(entry)
                if not entry.cancelled():
                    entry.task.run()

    def size(self) -> int:
        return self.pending.counter.value


# ---------------------------------------------------------------------------------------------------------------
# The relation, and the model/ states a symbolic state stands for
# ---------------------------------------------------------------------------------------------------------------

#: (ops, keys, most entries of one op in one watch list) of each exploration: every number is unbounded; one op
#: meets duplicate entries on two keys, two ops meet each other on one list (in either order) and in the purge
SHAPES = ((1, 2, 2), (2, 1, 1))
#: the timer's tick (the spec's tick_start and the deadline timer's are the same rule)
TICK = 1
#: more feasible paths than this for one command means a loop of model/ that forks for ever
PATH_LIMIT = 20_000


def concretisation(s: dict, tick: int, most: int) -> Model:
    """A model/ purgatory related to spec state ``s``: decided by the current exploration wherever s is symbolic,
    so that the exploration visits every one (every order of every watch list)."""
    model = Model("purgatory", v.Params(tick_ms=tick, wheel_size=2, start_ms=0))
    model.timer = timer = DeadlineTimer(Int(s[("now",)]), tick)
    purgatory = model.purgatory = DelayedOperationPurgatory(timer, model.journal, Int(s[("P",)]), CURRENT)
    purgatory.estimated_total_operations = Int(s[("est",)])
    for o, name in enumerate(spec.SHAPE.op_names):
        if not Bool(s[("created", o)]):
            continue
        ro = s[("ro", o)]
        op = model.ops[name] = DelayedOperation(
            name, Int(s[("delay", o)]), journal=model.journal,
            ready_on=None if Bool(ro == 0) else Int(ro), ready=True if Bool(s[("ready", o)]) else None,
            try_calls=Int(s[("tc", o)]), completed=Bool(s[("completed", o)]))
        if Bool(s[("in_timer", o)]):
            entry = TimerTaskEntry(op, Int(s[("exp", o)]))
            op.set_timer_task_entry(entry)
            timer.pending.add(entry)
    for k, key in enumerate(spec.SHAPE.key_names):
        counts = {name: entries(s[("cnt", k, o)], most) for o, name in enumerate(spec.SHAPE.op_names)}
        if any(counts.values()):
            purgatory.watchers[key] = [model.ops[name] for name in arrangement(counts, key)]
    return model


def entries(count: z3.ArithRef, most: int) -> int:
    """The number of entries a symbolic count stands for, decided (at most ``most``: an assumption)."""
    return next(m for m in range(most + 1) if Bool(count == m))


def arrangement(counts: dict[str, int], tag: str) -> list[str]:
    """One order of a watch list with these entry counts, chosen by free choices: the exploration visits all."""
    remaining, order = Counter(counts), []
    for position in itertools.count():
        candidates = sorted(name for name, m in remaining.items() if m)
        if not candidates:
            return order
        chosen = candidates[-1]
        for index, name in enumerate(candidates[:-1]):
            if Bool(z3.Bool(f"order.{tag}.{position}.{index}")):
                chosen = name
                break
        remaining[chosen] -= 1
        order.append(chosen)
    raise AssertionError("unreachable")


def well_formed(model: Model) -> list[str]:
    """The structural half of the relation: every listed op exists, no watch list is empty, and an op has a timer
    entry exactly when that entry is in the timer."""
    problems = [f"watch list {key} is empty but in the map" for key, ops in model.purgatory.watchers.items() if not ops]
    known = set(map(id, model.ops.values()))
    problems += [f"watch list {key} holds an op model/ does not know" for key, ops in model.purgatory.watchers.items()
                 if any(id(op) not in known for op in ops)]
    pending = model.timer.pending.entries
    problems += [f"op {name}'s timer entry is not in the timer" for name, op in model.ops.items()
                 if op.entry is not None and op.entry not in pending]
    problems += [f"the timer holds an entry of {entry.task.task_id} that is not its op's" for entry in pending
                 if entry.cancelled()]
    return problems


# ---------------------------------------------------------------------------------------------------------------
# One step
# ---------------------------------------------------------------------------------------------------------------

def key_lists() -> list[tuple[str, ...]]:
    """Every key list a watch may name: each key up to twice (step()'s domain), at least one key."""
    names = spec.SHAPE.key_names
    return [tuple(key for key, m in zip(names, mult) for _ in range(m))
            for mult in itertools.product(range(spec.MAX_MULT + 1), repeat=len(names)) if any(mult)]


@attrs.frozen
class Case:
    """A command of the domain: its shape concrete (kind, op, key, key list), its numbers z3 constants."""

    command: v.Command | None
    cmd: spec.Cmd
    creates: bool = False


def cases(delay: z3.ArithRef, ready_on: z3.ArithRef, to: z3.ArithRef) -> Iterator[Case]:
    """Every command of the current shape: per op a creating watch and a re-watch for each key list, set_ready,
    force, try and cancel; per key check and cancel_key; an advance."""
    names, keys = spec.SHAPE.op_names, spec.SHAPE.key_names
    for o, op in enumerate(names):
        for key_list in key_lists():
            mult = tuple(key_list.count(key) for key in keys)
            yield Case(None, spec.Cmd(spec.WATCH, o, 0, mult, delay, ready_on), creates=True)
            yield Case(v.Watch(op, key_list), spec.Cmd(spec.WATCH, o, 0, mult, delay, ready_on))
        yield Case(v.SetReady(op), spec.Cmd(spec.SET_READY, o))
        yield Case(v.Force(op), spec.Cmd(spec.FORCE, o))
        yield Case(v.Try(op), spec.Cmd(spec.TRY, o))
        yield Case(v.Cancel(op), spec.Cmd(spec.CANCEL, o))
    for k, key in enumerate(keys):
        yield Case(v.Check(key), spec.Cmd(spec.CHECK, 0, k))
        yield Case(v.CancelKey(key), spec.Cmd(spec.CANCEL_KEY, 0, k))
    yield Case(v.Advance(Int(to)), spec.Cmd(spec.ADVANCE, to=to))


def the_command(case: spec.Cmd, ready_on: z3.ArithRef) -> v.Command:
    """A creating watch in the vocabulary: its ready_on is None where the symbolic one is 0 (a decision)."""
    keys = tuple(key for key, m in zip(spec.SHAPE.key_names, case.mult) for _ in range(m))
    return v.Watch(spec.SHAPE.op_names[case.op], keys, Int(case.delay), None if Bool(ready_on == 0) else Int(ready_on))


#: a claim of the relation after a step: what it is about, model/'s side, step()'s side
Claim = tuple[str, object, object]


def observation_claims(kind: int, n_obs: spec.Obs, observation: v.Observation) -> list[Claim]:
    """What the command showed in model/ (concrete on a path) against step()'s terms."""
    names = spec.SHAPE.op_names
    result = observation.result
    claims: list[Claim] = []
    if kind in (spec.WATCH, spec.FORCE, spec.TRY):
        claims.append(("result", 1 if result else 0, n_obs.result))
    elif kind == spec.CHECK:
        claims.append(("result", result, n_obs.result))
    elif kind == spec.CANCEL_KEY:
        claims += [(f"result: entries of {name}", result.count(name), n_obs.removed[o])
                   for o, name in enumerate(names)]
    codes = {via: code for code, via in spec.VIA_NAMES.items()}
    legend = ", ".join(f"{code} {via}" for code, via in spec.VIA_NAMES.items())
    for o, name in enumerate(names):
        routes = [codes[e.via] for e in observation.events if isinstance(e, v.Complete) and e.op == name]
        claims.append((f"completions of {name} (0 none, {legend}; -n: completed n times)",
                       routes[0] if len(routes) == 1 else -len(routes), n_obs.via[o]))
        claims.append((f"expired {name}", v.Expire(name) in observation.events, n_obs.expired[o]))
    purges = [e.count for e in observation.events if isinstance(e, v.Purge)]
    claims.append(("purged", bool(purges), n_obs.purged))
    if purges:
        claims.append(("purge count", purges[0], n_obs.purge_count))
    return claims


def state_claims(model: Model, n: dict) -> list[Claim]:
    """model/'s state read through the abstraction against step()'s next state."""
    return [(".".join(map(str, key)), value, n[key]) for key, value in refinement.abstraction(model).items()]


def parted(found: z3.ModelRef, claims: list[Claim], other: str = "step()") -> tuple[str, ...]:
    """The claims a counterexample falsifies, with both sides' values in it (``other``: what model/ is held to)."""
    value = lambda x: found.eval(term(x), model_completion=True)  # noqa: E731
    return tuple(f"{label}: model/ {value(mine)}, {other} {value(theirs)}" for label, mine, theirs in claims
                 if z3.is_false(found.eval(term(mine) == term(theirs), model_completion=True)))


@attrs.frozen
class Counterexample:
    """A state satisfying the invariant and a command after which model/ and step() are not related."""

    shape: tuple[int, int, int]
    command: str
    state: dict
    problems: tuple[str, ...]
    #: model/ itself hung or raised on the path (not a disagreement with step())
    broke: bool = False

    def __str__(self) -> str:
        fields = ", ".join(f"{'.'.join(map(str, key))}={value}" for key, value in self.state.items())
        return f"{shape_text(self.shape)}: {self.command} from {{{fields}}}: {'; '.join(self.problems)}"


def shape_text(shape: tuple[int, int, int]) -> str:
    ops, keys, most = shape
    return (f"{ops} op{'s' * (ops > 1)}, {keys} key{'s' * (keys > 1)}, <= {most} entr{'ies' if most > 1 else 'y'} "
            f"per op and key")


@attrs.frozen
class Coverage:
    """What an exploration covered: the commands tried, the paths of model/ run, the z3 feasibility checks."""

    paths: int
    cases: int
    checks: int


def simulates(shape: tuple[int, int, int], mutants: frozenset = frozenset()) -> tuple[Counterexample | None, Coverage]:
    """Explore every command of the domain from every state of ``shape`` satisfying the invariant; the first
    path on which model/ and step() part, or None."""
    ops, keys, most = shape
    paths = checks = count = 0
    with spec.bounded(ops, keys, TICK):
        s = spec.symbolic_state("s")
        delay, ready_on, to = z3.Ints("delay ready_on to")
        within = [spec.invariant(s), s[("P",)] >= 0, s[("now",)] >= 0, to <= LONG_MAX,
                  s[("now",)] + delay <= LONG_MAX,
                  *[s[("now",)] + s[("delay", o)] <= LONG_MAX for o in range(ops)],
                  *[s[("cnt", k, o)] <= most for k in range(keys) for o in range(ops)]]
        for case in cases(delay, ready_on, to):
            count += 1
            n, n_obs = spec.step(s, case.cmd, mutants)
            assumptions = [*within, spec.cmd_domain(s, case.cmd, [case.cmd.kind])]
            if case.cmd.kind == spec.WATCH:  # a creating watch names an op not made yet, a re-watch one made
                made = s[("created", case.cmd.op)]
                assumptions.append(z3.Not(made) if case.creates else made)
            explorer = Paths(assumptions, PATH_LIMIT, solver=core.solver())

            def run() -> Counterexample | None:
                model = concretisation(s, TICK, most)
                command = case.command or the_command(case.cmd, ready_on)
                try:
                    with limited(core.MODEL_STEP_S):
                        observation = model.step(command)
                except CommandError as error:  # cmd_domain rules every such path out
                    return counterexample(explorer.counterexample(z3.BoolVal(False)), s, case, shape,
                                          (f"model/ refused the command: {error}",))
                except Unliftable:
                    raise
                except (Exception, TimeLimit) as error:
                    return attrs.evolve(counterexample(explorer.counterexample(z3.BoolVal(False)), s, case,
                                                       shape, (f"model/ {failure_text(error, core.MODEL_STEP_S)}",)),
                                        broke=True)
                problems = well_formed(model)
                claims = observation_claims(case.cmd.kind, n_obs, observation) + state_claims(model, n)
                found = explorer.counterexample(z3.And(*[term(mine) == term(theirs) for _, mine, theirs in claims]))
                if problems or found is not None:
                    return counterexample(found or explorer.counterexample(z3.BoolVal(False)), s, case,
                                          shape, tuple(problems) + (parted(found, claims) if found else ()))
                return None

            for path in explorer.explore(run):
                paths += 1
                if path.result is not None:
                    return path.result, Coverage(paths, count, checks + explorer.feasibility_checks)
            checks += explorer.feasibility_checks
    return None, Coverage(paths, count, checks)


def described(case: Case, value: Callable) -> str:
    """The command with the values of its numbers in a counterexample."""
    from kpurgatory.conformance.traces.replay import format_command

    if case.creates:
        keys = [key for key, m in zip(spec.SHAPE.key_names, case.cmd.mult) for _ in range(m)]
        return (f"watch(op={spec.SHAPE.op_names[case.cmd.op]}, keys={keys}, delay_ms={value(case.cmd.delay)}, "
                f"ready_on={value(case.cmd.ready_on)}) creating the op (ready_on 0: none)")
    if case.cmd.kind == spec.ADVANCE:
        return f"advance(to_ms={value(case.cmd.to)})"
    return format_command(case.command)


#: the fields of a state a counterexample shows: model/'s side of the relation (the rest is step()'s ghost state)
SHOWN = ("now", "est", "P", "nd_ctr", "w_ctr", "created", "ready", "completed", "in_timer", "tc", "exp", "delay", "ro",
         "cnt", "present")


def counterexample(found: z3.ModelRef, s: dict, case: Case, shape, problems: tuple) -> Counterexample:
    value = lambda x: found.eval(x, model_completion=True)  # noqa: E731
    return Counterexample(shape, described(case, value), {key: value(x) for key, x in s.items() if key[0] in SHOWN},
                          problems)


# ---------------------------------------------------------------------------------------------------------------
# The obligation
# ---------------------------------------------------------------------------------------------------------------

METHOD = "symbolic execution of model/ + z3, one step from any state satisfying the invariant"
DOMAIN = ("any state satisfying purgatory.invariant, with " + " and with ".join(shape_text(shape) for shape in SHAPES)
          + f", tick {TICK}: every order of every watch list; the clock, deadlines, delays, tries, ready_on, the "
            "estimate, the purge interval and an advance's target any longs; every command (a watch with each key "
            "up to twice); the timer as a deadline per op")


@obligation("refinement.purgatory.inductive", kind="model", cost=10, domain=DOMAIN,
            mutant="step() with " + spec.MUTANTS["check_keeps_completed"],
            bound=Bound(METHOD, "the clock, deadlines, delays, tries, ready_on, the estimate, the purge interval, "
                                "the advance's target; every order of the watch lists; run length (induction)",
                        "; ".join(shape_text(shape) for shape in SHAPES) + f"; tick {TICK}; the timer as a deadline "
                        "per op"))
def purgatory_simulation(mutated: bool = False) -> Outcome:
    """model/'s purgatory simulates purgatory.step, proved one step at a time from any state. For every state s
    satisfying purgatory.invariant, every model/ state related to s (read through the abstraction of
    refinement.purgatory it is s, and its structures are well formed; every order of its watch lists), and every
    command, each feasible path of model/'s own code for that command (run on z3 terms) ends in a state related to
    step(s) — the same clock, estimate, watcher keys, per-op flags, tries, deadlines, entries per key and counters —
    having shown what step() shows: the call's result, each op's completion and its route, each onExpiration, the
    purge and its count. With the initial states related, model/'s every reachable state is related to a reachable
    state of step(), whatever the run's length, so the purgatory obligations proved about step() hold of model/.
    If a step parts, the bounded enumeration of refinement.purgatory looks for a run that reaches the divergence
    (refuted, with its trace); if none is found within its bound the relation is not inductive (or, where model/
    hung or raised on the path, refuted)."""
    mutants = frozenset({"check_keeps_completed"}) if mutated else frozenset()
    covered = []
    for shape in SHAPES:
        try:
            found, coverage = simulates(shape, mutants)
        except (Unliftable, PathLimit) as error:
            return Outcome(UNKNOWN, METHOD, f"{shape_text(shape)}: model/ cannot be run on terms here: {error}")
        if found is not None:
            # a run that reaches it, if the bounded enumeration has one: a trace replay and view show
            reached = enumerated("refinement.purgatory.inductive", lambda: refinement.purgatory_refinement(mutated))
            if reached.status == REFUTED:
                return attrs.evolve(reached, detail=f"{reached.detail} (one step from any state: {found})")
            status = REFUTED if found.broke else NOT_INDUCTIVE
            return Outcome(status, METHOD, f"{found} (no run of refinement.purgatory's bounded domain reaches it)",
                           witness={"state": stringified(found.state)})
        covered.append(f"{shape_text(shape)}: {coverage.cases} commands, {coverage.paths} paths of model/, "
                       f"{coverage.checks} z3 feasibility checks")
    return Outcome(PROVED, METHOD, "; ".join(covered))


def enumerated(name: str, enumeration: Callable[[], Outcome]) -> Outcome:
    """A bounded enumeration run to find the run behind a one-step counterexample; a model/ that hangs or raises on
    the way is that run."""
    try:
        return enumeration()
    except ModelBroke as broke:
        return broke.outcome(name)


def stringified(state: dict) -> dict:
    return {".".join(map(str, key)): str(value) for key, value in state.items()}


# ---------------------------------------------------------------------------------------------------------------
# The wheel: model/timer.py's levels decide as the shared arithmetic does, for every value
# ---------------------------------------------------------------------------------------------------------------


@attrs.define(eq=False)
class Slots:
    """A level's buckets where the slot is a term: ``buckets[i]`` is bucket i (a Python list cannot be indexed by
    a term; this is the one thing of a level not lifted)."""

    counter: TaskCounter
    taken: list[tuple[object, TimerTaskList]] = attrs.field(factory=list)

    def __getitem__(self, index: Int) -> TimerTaskList:
        bucket = TimerTaskList(self.counter)
        self.taken.append((index, bucket))
        return bucket


@attrs.define(eq=False)
class LevelAbove:
    """The overflow level, as the level below sees it: what was handed up to it and where its clock was moved."""

    added: list[TimerTaskEntry] = attrs.field(factory=list)
    advanced: list[object] = attrs.field(factory=list)

    def add(self, entry: TimerTaskEntry) -> bool:
        self.added.append(entry)
        return True

    def advance_clock(self, time_ms: object) -> None:
        self.advanced.append(time_ms)


def level(tick, size, clock) -> tuple[TimingWheel, Slots, LevelAbove]:
    counter = TaskCounter()
    slots, above = Slots(counter), LevelAbove()
    return TimingWheel(Int(tick), Int(size), Int(clock), DelayQueue(), counter, slots, above), slots, above


def longs(*terms: z3.ArithRef) -> list[Long]:
    return [Long(EXACT, t) for t in terms]


def level_claims(arithmetic: wheel.Arithmetic, sizes: range) -> Iterator[tuple[str, list, Callable[[], list]]]:
    """What each lifted piece of a level must agree on, as (what, assumptions, run returning claims)."""
    T, n, c, E, x = z3.Ints("T n c E x")
    lT, ln, lc, lE, lx = longs(T, n, c, E, x)
    level_domain = [T >= 1, n >= 2, c >= 0, c % T == 0]

    def add() -> list[Claim]:
        """TimingWheel.add of a live entry with expiration E: refused, placed (which slot, which bucket
        expiration) or handed up, as accepted/refused/place say."""
        wheel_level, slots, above = level(T, n, c)
        task = TimerTask("t", 0)
        entry = TimerTaskEntry(task, Int(E))
        task.set_timer_task_entry(entry)
        placed = wheel_level.add(entry)
        _, slot, expiration = arithmetic.place(lE, lT, ln)
        claims = [("refused", not placed, arithmetic.refused(lE, lc, lT, ln)),
                  ("placed on this level", bool(slots.taken), arithmetic.accepted(lE, lc, lT, ln))]
        for index, bucket in slots.taken:
            claims += [("slot", index, slot.raw), ("bucket expiration", bucket.expiration_ms, expiration.raw),
                       ("the entry is in the bucket", entry.bucket is bucket, True)]
        return claims

    def advance() -> list[Claim]:
        """TimingWheel.advance_clock(x): the clock advance_level gives; the level above follows a moved clock."""
        wheel_level, _, above = level(T, n, c)
        wheel_level.advance_clock(Int(x))
        moved = arithmetic.advance_level(lc, lT, lx).raw
        return [("clock", wheel_level.current_time_ms, moved),
                ("the level above advanced", bool(above.advanced), moved != c),
                *[("the level above's target", target, moved) for target in above.advanced]]

    def created(size: int) -> Callable[[], list[Claim]]:
        def run() -> list[Claim]:
            """TimingWheel.create and add_overflow_wheel: a level's clock is the one below rounded down to its
            tick, the level above has this level's interval as its tick."""
            wheel_level = TimingWheel.create(Int(T), size, Int(c), DelayQueue(), TaskCounter())
            upper = wheel_level.add_overflow_wheel()
            interval = arithmetic.overflow_tick(lT, Long(EXACT, z3.IntVal(size)))
            return [("clock of a new level", wheel_level.current_time_ms, refinement.round_down(lc, lT).raw),
                    ("tick of the level above", upper.tick_ms, interval.raw),
                    ("clock of the level above", upper.current_time_ms,
                     refinement.round_down(Long(EXACT, term(wheel_level.current_time_ms)), interval).raw)]
        return run

    yield "TimingWheel.add", [*level_domain, E >= 0], add
    yield "TimingWheel.advance_clock", [*level_domain, x >= 0], advance
    for size in sizes:
        yield f"TimingWheel.create + add_overflow_wheel (wheel size {size})", [T >= 1, c >= 0], created(size)


#: the wheel sizes whose level creation is lifted (creating a level builds a list of that many buckets)
CREATED_SIZES = range(2, 9)


def level_agrees(arithmetic: wheel.Arithmetic) -> tuple[str | None, int]:
    """The first lifted piece of a level that disagrees with ``arithmetic`` (with the values where it does), and
    how many paths were checked."""
    paths = 0
    for what, assumptions, run in level_claims(arithmetic, CREATED_SIZES):
        explorer = Paths(assumptions, PATH_LIMIT, solver=core.solver())

        def checked() -> str | None:
            with limited(core.MODEL_STEP_S):
                claims = run()
            found = explorer.counterexample(z3.And(*[term(mine) == term(theirs) for _, mine, theirs in claims]))
            if found is None:
                return None
            values = ", ".join(f"{name}={found.eval(z3.Int(name), model_completion=True)}" for name in "TncEx")
            return f"{what} at {values}: {'; '.join(parted(found, claims, 'the shared arithmetic'))}"

        for path in explorer.explore(checked):
            paths += 1
            if path.result is not None:
                return path.result, paths
    return None, paths


@obligation("refinement.wheel.lifted", kind="model", cost=1,
            domain="one level of model/timer.py: tick, wheel size, clock (a multiple of the tick), expiration and "
                   "advance target any non-negative integers, unbounded as the model's are; level creation for "
                   f"wheel sizes {CREATED_SIZES.start}..{CREATED_SIZES.stop - 1}",
            mutant="the shared arithmetic with " + wheel.REFUSES_EARLY.bug,
            bound=Bound("symbolic execution of model/ + z3, every path", "tick, wheel size, clock, expiration, "
                        "advance target (any non-negative integers)", f"level creation: wheel sizes "
                        f"{CREATED_SIZES.start}..{CREATED_SIZES.stop - 1}; one level (the wheel's structure: "
                        "refinement.wheel)"))
def wheel_lifted(mutated: bool = False) -> Outcome:
    """model/timer.py's levels decide what the shared arithmetic decides, for every value: its own TimingWheel code,
    run on z3 terms, refuses an entry exactly when refused() says, places it exactly when accepted() says, in the
    slot and under the bucket expiration place() gives, and hands every other entry to the level above; its
    advanceClock moves the clock to advance_level()'s value and moves the level above to it exactly when it moved;
    a level is created with its clock rounded down to its tick, and the level above has this level's interval as
    its tick (overflow_tick) and this level's clock rounded down to that. The shared arithmetic is what the
    symbolic wheel, and so every wheel obligation, is built from, so those obligations are about model/timer.py's
    own decisions, not a copy of them. Only the bucket list indexed by a term is not model/'s (a level of a
    symbolic size cannot be built as a list); the wheel's structure (buckets, the delay queue, the cascade's
    order) is tied to the arithmetic by refinement.wheel, within its bound. A disagreement is refuted with the
    level's values, and with the run of refinement.wheel's bounded domain that shows it, where there is one."""
    arithmetic = wheel.REFUSES_EARLY if mutated else wheel.KAFKA
    try:
        found, paths = level_agrees(arithmetic)
    except (Unliftable, PathLimit) as error:
        return Outcome(UNKNOWN, "symbolic execution of model/ + z3", f"model/ cannot be run on terms here: {error}")
    if found is not None:
        # a run of the whole wheel that shows it, if the bounded enumeration has one: a trace replay and view show
        reached = enumerated("refinement.wheel.lifted", lambda: refinement.wheel_refinement(mutated))
        if reached.status == REFUTED:
            return attrs.evolve(reached, detail=f"{reached.detail} (one level, any values: {found})")
        return Outcome(REFUTED, "symbolic execution of model/ + z3", found)
    return Outcome(PROVED, "symbolic execution of model/ + z3", f"{paths} paths of model/, each agreeing")
