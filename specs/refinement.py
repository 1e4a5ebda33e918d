"""Refinement: model/ against the encodings the proofs are about, checked by exhaustive bounded enumeration.

Every proof in specs/ is about an encoding: the purgatory's transition relation `purgatory.step` and the wheel's
shared arithmetic (`wheel.Arithmetic`: accepted, place, advance_level, overflow_tick, behind `SymbolicWheel`).
model/ is the executable spec that traces, replays and findings run. The obligations below tie the two: for every
state reachable by every command sequence up to a depth over a small domain, and every command of the domain, the
encoding and model/ take the same step — the same observation, and states that agree under the abstraction.

The enumeration is breadth first with duplicate states merged (a state is the machines' whole state, so a merged
state has the same future), so the first divergence found is one of the shortest, and the depth reached is stated
with the number of distinct states expanded and of transitions checked. Nothing is random and nothing reads the clock: the same
domain gives the same states, transitions and counterexample on every machine.

A divergence is written as a trace in the shared format: the commands, model/'s observations as the recording, and
the encoding's answer as the system's at the step where they part (plus read-outs that show the state there), so
``kpurgatory replay`` and ``kpurgatory view`` show it: replayed against the model that produced it the encoding's
answer fails, against a model that was fixed the recording does.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from typing import Callable, Iterable, Iterator

import attrs
import z3

from kpurgatory.conformance.traces.codec import Header, Trace
from kpurgatory.model import Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.purgatory import Journal
from kpurgatory.model.releases import Release
from kpurgatory.model.timer import DelayQueue
from kpurgatory.specs import purgatory as spec
from kpurgatory.specs import wheel
from kpurgatory.specs.core import BOUND, REFUTED, Bound, Outcome, model_step, obligation, recorded
from kpurgatory.specs.javalong import LONG_MAX, Long, PyBackend

# ---------------------------------------------------------------------------------------------------------------
# The enumeration
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Reach:
    """What an enumeration covered: every command sequence up to ``depth`` commands, checked as ``transitions``
    steps, from ``states`` distinct states (those reached by fewer than ``depth`` commands, from each of which every
    command was tried; a transition into a state already seen is checked, not expanded again)."""

    depth: int
    states: int
    transitions: int

    def __str__(self) -> str:
        return f"depth {self.depth}: {self.states} states expanded, {self.transitions} transitions checked"


@attrs.frozen
class Divergence:
    """A shortest command sequence after whose last command the encoding and model/ disagree, and how."""

    commands: tuple
    problems: tuple[str, ...]


#: a successor: (command, the key of the state reached (computed only if it is to be expanded), what its expansion
#: needs, disagreements on the way)
Successor = tuple[object, Callable[[], object], object, list[str]]


def breadth_first(root_key: object, root: object, expand: Callable[[tuple, object], Iterable[Successor]],
                  depth: int, visible: Callable[[Divergence], bool] = lambda divergence: True
                  ) -> tuple[Divergence | None, Reach]:
    """Visit every state reachable within ``depth`` commands, level by level, each distinct state once (by its
    key). At the first level with a disagreement, return its first ``visible`` one (else its first): a shortest
    counterexample, and one a trace can show where there is one."""
    seen, frontier, transitions = {root_key}, [((), root)], 0
    for level in range(1, depth + 1):
        following, found = [], []
        for path, node in frontier:
            for command, key, successor, problems in expand(path, node):
                transitions += 1
                if problems:
                    found.append(Divergence(path + (command,), tuple(problems)))
                    if visible(found[-1]):
                        return found[-1], Reach(level, len(seen), transitions)
                elif level < depth and (reached := key()) not in seen:
                    seen.add(reached)
                    following.append((path + (command,), successor))
        if found:
            return found[0], Reach(level, len(seen), transitions)
        frontier = following
    return None, Reach(depth, len(seen), transitions)


def replayed(profile: str, params: v.Params, commands: Iterable[v.Command]) -> Model:
    """A fresh model/ after ``commands`` (cheaper than copying one: a step takes about 10 us)."""
    model, commands = Model(profile, params), tuple(commands)
    for seq, command in enumerate(commands):
        model_step(model, command, commands[:seq])
    return model


def canonical(root: object) -> tuple:
    """The whole object graph of a model, as a value: attrs objects by their fields (each object numbered at its
    first visit, so shared and cyclic references are kept), dicts and lists in their order. The delay queue counts
    as its buckets in release order (its offer counter and heap layout depend on the path, not on the future);
    functions and counters carry no state of the run."""
    numbers: dict[int, int] = {}

    def walk(x):
        kind = type(x)
        if x is None or kind in (bool, int, str):
            return x
        if kind in (list, tuple):
            return tuple(walk(y) for y in x)
        if kind is dict:
            return tuple((walk(k), walk(y)) for k, y in x.items())
        if kind is DelayQueue:
            return tuple((expiration, walk(bucket)) for expiration, _, bucket in sorted(x.heap, key=lambda e: e[:2]))
        if kind in CONSTANT or not attrs.has(kind):
            return kind.__name__
        if id(x) in numbers:
            return ("@", numbers[id(x)])
        numbers[id(x)] = len(numbers)
        return (kind.__name__, *(walk(getattr(x, name)) for name in field_names(kind)))

    return walk(root)


#: parts of a model fixed when it is made (its configuration and release) or emptied by every command (the journal)
CONSTANT = (v.Params, Release, Journal)


@functools.cache
def field_names(kind: type) -> tuple[str, ...]:
    return tuple(field.name for field in attrs.fields(kind))


# ---------------------------------------------------------------------------------------------------------------
# The purgatory: model/ refines purgatory.step
# ---------------------------------------------------------------------------------------------------------------

#: (tick, wheel size, start, purge interval) of each enumeration: ticks 1 and 2, starts 0, aligned and unaligned,
#: wheels small enough to cascade, purge intervals 0 and 1 (with at most 3 ops, the ones a short run can exceed)
PURGATORY_PARAMS = (v.Params(tick_ms=1, wheel_size=2, start_ms=0, purge_interval=0),
                    v.Params(tick_ms=1, wheel_size=3, start_ms=5, purge_interval=1),
                    v.Params(tick_ms=2, wheel_size=2, start_ms=3, purge_interval=0))
#: the key lists a watch names: one key, the other, both, one twice
KEY_LISTS = (("k0",), ("k1",), ("k0", "k1"), ("k0", "k0"))
#: how a new op is made, in ticks and tries: (delay in ticks, ready_on)
CREATIONS = ((1, None), (1, 1), (2, 2), (1, 3))
#: how far an advance moves the clock, in ticks
ADVANCES = (0, 1, 2)
PURGATORY_DEPTH = 3
PURGATORY_DOMAIN = (f"{spec.OPS} ops, {spec.KEYS} keys; (tick, wheel size, start, purge interval) in "
                    + ", ".join(f"({p.tick_ms}, {p.wheel_size}, {p.start_ms}, {p.purge_interval})"
                                for p in PURGATORY_PARAMS)
                    + f"; watch with keys {'/'.join('+'.join(k) for k in KEY_LISTS)}, a new op with (delay, ready_on) "
                      f"in {', '.join(f'({d} ticks, {r})' for d, r in CREATIONS)} (ops made in name order: they are "
                      f"symmetric), set_ready/force/try/cancel of a made op, check/cancel_key of either key, advance "
                      f"by {'/'.join(map(str, ADVANCES))} ticks; every sequence up to {PURGATORY_DEPTH} commands, "
                      f"states merged; delays >= one tick (step()'s domain)")


def purgatory_commands(s: dict, tick: int) -> Iterator[v.Command]:
    """The domain's commands in spec state ``s``."""
    made = [name for o, name in enumerate(spec.SHAPE.op_names) if s[("created", o)]]
    if len(made) < spec.SHAPE.ops:
        new = spec.SHAPE.op_names[len(made)]
        for keys in KEY_LISTS:
            for ticks, ready_on in CREATIONS:
                yield v.Watch(new, keys, ticks * tick, ready_on)
    for op in made:
        yield from (v.Watch(op, keys) for keys in KEY_LISTS)
        yield from (v.SetReady(op), v.Force(op), v.Try(op), v.Cancel(op))
    for key in spec.SHAPE.key_names:
        yield from (v.Check(key), v.CancelKey(key))
    yield from (v.Advance(s[("now",)] + ticks * tick) for ticks in ADVANCES)


def abstraction(model: Model) -> dict:
    """model/'s purgatory as spec state: clock, estimate, watcher map, per op its flags, tries, timer entry and
    entries per key (`purgatory.model_state`), and the counters Kafka keeps: the timer's task count and the
    entries over all watch lists."""
    s = spec.model_state(model)
    s[("nd_ctr",)] = model.purgatory.num_delayed()
    s[("w_ctr",)] = model.purgatory.watched()
    return s


def spec_observation(command: v.Command, s: dict, obs: spec.Obs | None) -> v.Observation:
    """What step() says ``command`` shows, in the vocabulary (events in op order, the purge last)."""
    result, events = spec.expected_observation(command, s, obs)
    if isinstance(command, v.WatcherKeys):
        result = [key for k, key in enumerate(spec.SHAPE.key_names) if s[("present", k)]]
    elif isinstance(command, v.CancelKey):
        result = list(result)
    made = {"complete": lambda op, via: v.Complete(op, via), "expire": v.Expire, "purge": v.Purge}
    return v.Observation(result, tuple(made[kind](*rest) for kind, *rest in events))


def purgatory_step(model: Model, path: tuple, s: dict, command: v.Command, mutants: frozenset
                   ) -> tuple[dict, list[str]]:
    """One command through model/ (after ``path``) and step(): the spec's next state and every disagreement."""
    observation = model_step(model, command, path)
    n, obs = spec.step(s, spec.from_vocabulary([command])[0], mutants)
    mine, theirs = spec.expected_observation(command, n, obs), spec.observed(command, observation)
    problems = [f"observation: step() {mine}, model/ {theirs}"] if mine != theirs else []
    return n, problems + spec.compare_state(n, abstraction(model))


def purgatory_refines(params: v.Params, depth: int, mutants: frozenset = frozenset()
                      ) -> tuple[Divergence | None, Reach]:
    """Enumerate the purgatory domain from ``params`` (with step() carrying ``mutants``)."""
    with spec.bounded(spec.OPS, spec.KEYS, params.tick_ms):
        s0 = spec.initial_state(params.purge_interval)
        s0[("now",)] = params.start_ms

        def expand(path: tuple, s: dict) -> Iterator[Successor]:
            for command in purgatory_commands(s, params.tick_ms):
                model = replayed("purgatory", params, path)
                n, problems = purgatory_step(model, path, s, command, mutants)
                yield (command, lambda: (canonical(model), tuple(n[key] for key in spec.state_keys())), n,
                       problems)

        return breadth_first(None, s0, expand, depth, shows_in_observation)


def shows_in_observation(divergence: Divergence) -> bool:
    """The disagreement is in what the last command showed, not only in state (`purgatory_step` lists it first)."""
    return divergence.problems[0].startswith("observation")


#: read-outs that end a divergence's trace, and how many more commands a divergence in state the read-outs do not
#: show (the purge estimate) may take to show in what a command returns
READOUTS = (v.Watched(), v.Delayed(), v.WatcherKeys())
READOUT_KINDS = tuple(type(readout) for readout in READOUTS)
SHOWING_DEPTH = 3


def steps_from(params: v.Params, commands: tuple, mutants: frozenset) -> tuple[dict, list[v.Observation]]:
    """step()'s state after ``commands`` from ``params``' initial state, and its answer to each."""
    s = spec.initial_state(params.purge_interval)
    s[("now",)] = params.start_ms
    answers = []
    for command in commands:
        obs = None
        if not isinstance(command, READOUT_KINDS):
            s, obs = spec.step(s, spec.from_vocabulary([command])[0], mutants)
        answers.append(spec_observation(command, s, obs))
    return s, answers


def showing(params: v.Params, divergence: Divergence, mutants: frozenset) -> tuple:
    """The fewest commands after a divergence in state only that make it show in an answer: none when the
    read-outs show it, else a shortest continuation whose answers part (within SHOWING_DEPTH; none found, none)."""
    s, _ = steps_from(params, divergence.commands, mutants)
    model = replayed("purgatory", params, divergence.commands)
    if any(unordered(spec_observation(readout, s, None).result)
           != unordered(model_step(model, readout, divergence.commands).result) for readout in READOUTS):
        return ()

    def expand(path: tuple, n: dict) -> Iterator[Successor]:
        for command in purgatory_commands(n, params.tick_ms):
            system = replayed("purgatory", params, divergence.commands + path)
            after, problems = purgatory_step(system, divergence.commands + path, n, command, mutants)
            yield (command, lambda: (canonical(system), tuple(after[key] for key in spec.state_keys())), after,
                   [problem for problem in problems if problem.startswith("observation")])

    shown, _ = breadth_first(None, s, expand, SHOWING_DEPTH)
    return () if shown is None else shown.commands


def unordered(result: object) -> object:
    """A read-out's result, its keys in any order."""
    return sorted(result) if isinstance(result, list) else result


def purgatory_trace(name: str, params: v.Params, divergence: Divergence, mutants: frozenset) -> Trace:
    """The divergence as a trace: model/'s recording, step()'s answers as the system's where it parts and after it
    (the commands that make a divergence in state show, if the read-outs do not, then the read-outs)."""
    with spec.bounded(spec.OPS, spec.KEYS, params.tick_ms):
        commands = (*divergence.commands, *showing(params, divergence, mutants), *READOUTS)
        _, answers = steps_from(params, commands, mutants)
    parted = len(divergence.commands) - 1
    recording = recorded(Header(f"specs.{name}", "purgatory", params, "kpurgatory.model",
                                f"model/ and purgatory.step() part at command {parted + 1}: "
                                f"{'; '.join(divergence.problems)}. The recording is model/'s, the system's "
                                f"answers are step()'s (from that command on)."), commands)
    return with_answers(recording, parted, answers[parted:])


def with_answers(recording: Trace, last: int, answers: list[v.Observation]) -> Trace:
    """``recording`` with the system's answers: before step ``last`` (0-based) the recording's own events (the two
    sides agreed there, as multisets), from it on ``answers``."""
    return Trace(recording.header, [
        attrs.evolve(step, system=answers[i - last] if i >= last else attrs.evolve(step.observation, groups=None))
        for i, step in enumerate(recording.steps)])


def describe(commands: Iterable[v.Command]) -> str:
    from kpurgatory.conformance.traces.replay import format_command

    return "; ".join(format_command(command) for command in commands)


def params_text(params: v.Params) -> str:
    return (f"tick {params.tick_ms}, wheel {params.wheel_size}, start {params.start_ms}, "
            f"purge interval {params.purge_interval}")


@obligation("refinement.purgatory", kind="model", expect=BOUND, cost=10, domain=PURGATORY_DOMAIN,
            mutant="step() with " + spec.MUTANTS["check_keeps_completed"],
            bound=Bound("exhaustive enumeration", "-", f"{spec.OPS} ops, {spec.KEYS} keys, {len(PURGATORY_PARAMS)} "
                        f"configurations, listed delays/advances/key lists, run length <= {PURGATORY_DEPTH}"))
def purgatory_refinement(mutated: bool = False) -> Outcome:
    """model/ refines the purgatory encoding that every purgatory obligation is proved about: from every state
    reachable by every command sequence of the domain up to the bound, every command of the domain takes model/
    (the real wheel underneath, with cascades) and the transition relation purgatory.step (evaluated on Python
    values) to the same observation — the call's result and the events it caused, as a multiset — and to states that
    agree under the abstraction: the clock, the purge estimate, the watcher map's keys, per op whether it exists, is
    ready, completed, how often it was tried, whether it is in the timer and its deadline, its entries per key, and
    the counters Kafka keeps (the timer's task count, the entries over all watch lists). Only the order of the
    entries within a watch list is abstracted (step() keeps a multiset), and the timer as a deadline per op
    (exact for delays of at least one tick, by the wheel obligations and by refinement.wheel)."""
    mutants = frozenset({"check_keeps_completed"}) if mutated else frozenset()
    bounds = []
    for params in PURGATORY_PARAMS:
        divergence, bound = purgatory_refines(params, PURGATORY_DEPTH, mutants)
        if divergence is not None:
            trace = purgatory_trace("refinement.purgatory", params, divergence, mutants)
            return Outcome(REFUTED, "exhaustive enumeration", f"{params_text(params)}: after "
                           f"{describe(divergence.commands)}: {'; '.join(divergence.problems)}",
                           witness={"params": attrs.asdict(params), "commands": describe(divergence.commands),
                                    "problems": list(divergence.problems), "bound": str(bound)},
                           traces={"counterexample": trace})
        bounds.append(bound)
    return Outcome(BOUND, "exhaustive enumeration", bounds_text(PURGATORY_PARAMS, bounds, params_text),
                   witness=bounds_witness(bounds))


def bounds_text(configurations, bounds: list[Reach], name: Callable) -> str:
    total = Reach(max(b.depth for b in bounds), sum(b.states for b in bounds), sum(b.transitions for b in bounds))
    return "; ".join(f"{name(c)}: {b}" for c, b in zip(configurations, bounds)) + \
        f"; in all {total.states} states expanded, {total.transitions} transitions checked"


def bounds_witness(bounds: list[Reach]) -> dict:
    return {"depth": max(b.depth for b in bounds), "states": sum(b.states for b in bounds),
            "transitions": sum(b.transitions for b in bounds)}


# ---------------------------------------------------------------------------------------------------------------
# The wheel: the shared arithmetic, KafkaWheel and model/timer.py, pairwise
# ---------------------------------------------------------------------------------------------------------------


class ExactLongs(PyBackend):
    """Longs as Python ints computed exactly (the model's arithmetic), noting when a result leaves the long range:
    from there on Java's wrapping arithmetic (KafkaWheel's) computes something else."""

    name = "concrete longs, exact, overflow noted"

    def __init__(self) -> None:
        super().__init__()
        self.overflowed = False

    def wrap(self, x: int) -> int:
        if not self.min <= x <= self.max:
            self.overflowed = True
        return x


@functools.cache
def evaluate(function: Callable, *args: int) -> tuple[object, bool]:
    """``function(*args)`` (one of the shared arithmetic's) on concrete longs, computed exactly (a condition as a
    bool, longs as ints), and whether any of its operations left the long range. The shared functions build z3
    terms for their connectives; those are simplified to their value."""
    longs = ExactLongs()
    result = function(*(Long(longs, x) for x in args))
    return concrete(result), longs.overflowed


def concrete(x):
    if isinstance(x, tuple):
        return tuple(concrete(y) for y in x)
    if isinstance(x, Long):
        x = x.raw
    if isinstance(x, (bool, int)):
        return x
    x = z3.simplify(x)
    return z3.is_true(x) if z3.is_bool(x) else x.as_long()


def round_down(x: Long, T: Long) -> Long:
    """A fresh level's clock: the clock below rounded down to the level's tick (`SymbolicWheel.aligned`)."""
    return x - x % T


@attrs.define
class ArithmeticLevel:
    tick: int
    clock: int
    #: slot -> (bucket expiration, tasks in insertion order)
    buckets: dict[int, tuple[int, list[str]]] = attrs.field(factory=dict)


@attrs.define
class ArithmeticWheel:
    """The wheel the symbolic wheel is made of, executed: every entry is placed, refused or handed up by the shared
    arithmetic (`wheel.Arithmetic`: accepted, refused, place, advance_level, overflow_tick, evaluated on concrete
    longs), levels are made when first needed with the level below's clock rounded down to their tick (the
    symbolic wheel's `aligned`), and an advance releases due buckets earliest first, moving every level's clock
    by advance_level before re-inserting the bucket's entries, as `SymbolicWheel.step` does for its entry.
    ``overflowed``: some exact computation left the long range (Java would have wrapped)."""

    tick: int
    size: int
    start: int
    arithmetic: wheel.Arithmetic = wheel.KAFKA
    levels: list[ArithmeticLevel] = attrs.field(factory=list)
    queue: list[tuple[int, int, int, int]] = attrs.field(factory=list)
    expirations: dict[str, int] = attrs.field(factory=dict)
    ran: list[str] = attrs.field(factory=list)
    now: int = 0
    overflowed: bool = False
    offers: Iterator[int] = attrs.field(factory=itertools.count)

    def __attrs_post_init__(self) -> None:
        self.now = self.start
        self.levels = [self.level(self.tick, self.start)]

    def calc(self, function: Callable, *args: int):
        result, overflowed = evaluate(function, *args)
        self.overflowed |= overflowed
        return result

    def level(self, tick: int, below: int) -> ArithmeticLevel:
        return ArithmeticLevel(tick, self.calc(round_down, below, tick))

    def add(self, task: str, delay: int) -> None:
        E = self.now + delay  # the model's guard keeps it a long (the domain's adds only)
        self.expirations[task] = E
        if not self.insert(task, E):
            self.ran.append(task)

    def insert(self, task: str, E: int) -> bool:
        """Place the entry on the first level that accepts it; False if one refuses it (it runs)."""
        n = self.size
        for k in itertools.count():
            level = self.levels[k]
            T, c = level.tick, level.clock
            if self.calc(self.arithmetic.accepted, E, c, T, n):
                _, slot, b = self.calc(self.arithmetic.place, E, T, n)
                expiration_before, tasks = level.buckets.get(slot, (-1, []))
                level.buckets[slot] = (b, tasks + [task])
                if expiration_before != b:
                    heapq.heappush(self.queue, (b, next(self.offers), k, slot))
                return True
            if self.calc(self.arithmetic.refused, E, c, T, n):
                return False
            if k + 1 == len(self.levels):
                self.levels.append(self.level(self.calc(self.arithmetic.overflow_tick, T, n), c))
        raise AssertionError("unreachable")

    def advance(self, to: int) -> None:
        self.now = to
        while self.queue and self.queue[0][0] <= to:
            _, _, k, slot = heapq.heappop(self.queue)
            expiration, tasks = self.levels[k].buckets.pop(slot)
            if self.arithmetic.advance_before_flush:
                x = expiration
                for level in self.levels:
                    level.clock = x = self.calc(self.arithmetic.advance_level, level.clock, level.tick, x)
            for task in tasks:
                if not self.insert(task, self.expirations[task]) and self.arithmetic.runs_refused:
                    self.ran.append(task)


@attrs.frozen
class WheelView:
    """What the wheel obligations compare after each command: the tasks that ran in it (a refusal on add is a run
    at once), whether the add was rejected, each level's clock, and each pending task's level and bucket
    expiration."""

    ran: tuple[str, ...]
    rejected: str | None
    clocks: tuple[int, ...]
    pending: tuple[tuple[str, int, int], ...]


def model_view(model: Model, observation: v.Observation) -> WheelView:
    levels = model.timer.describe()["levels"]
    return WheelView(tuple(sorted(event.task for event in observation.events)), observation.error,
                     tuple(level["current_ms"] for level in levels),
                     tuple(sorted((task, k, bucket["expiration_ms"]) for k, level in enumerate(levels)
                                  for bucket in level["buckets"] for task in bucket["entries"])))


def arithmetic_view(a: ArithmeticWheel, ran_before: int) -> WheelView:
    return WheelView(tuple(sorted(a.ran[ran_before:])), None, tuple(level.clock for level in a.levels),
                     tuple(sorted((task, k, expiration) for k, level in enumerate(a.levels)
                                  for expiration, tasks in level.buckets.values() for task in tasks)))


def kafka_view(kafka: wheel.KafkaWheel, ran_before: int) -> WheelView:
    return WheelView(tuple(sorted(task for task, _ in kafka.ran[ran_before:])), None,
                     tuple(level.current for level in kafka.levels),
                     tuple(sorted((task, k, expiration) for k, level in enumerate(kafka.levels)
                                  for expiration, tasks in level.buckets.values() for task in tasks)))


@attrs.frozen
class WheelShape:
    tick: int
    size: int
    start: int

    @property
    def params(self) -> v.Params:
        return v.Params(tick_ms=self.tick, wheel_size=self.size, start_ms=self.start)

    @property
    def near_end(self) -> bool:
        return self.start > LONG_MAX // 2

    def delays(self, now: int) -> list[int]:
        """0, 1 ms, a level-1 interval less 1, two level-2 ticks and one more tick (a cascade from level 3), and
        near Long.MAX the delay to exactly Long.MAX; only those the model's guard accepts (now + delay <=
        Long.MAX)."""
        T, n = self.tick, self.size
        candidates = {0, 1, T * n - 1, 2 * T * n + T} | ({LONG_MAX - now} if self.near_end else set())
        return sorted(d for d in candidates if now + d <= LONG_MAX)

    def advances(self, now: int) -> list[int]:
        """By 1 ms, a tick, a level-1 rotation, and three rotations of level 2 (so a small wheel turns several
        times in a run); never past Long.MAX."""
        T, n = self.tick, self.size
        return [now + d for d in sorted({1, T, T * n, 3 * T * n * n}) if now + d <= LONG_MAX]


def shape_text(shape: WheelShape, short: bool = False) -> str:
    start = f"Long.MAX - {LONG_MAX - shape.start}" if shape.near_end else str(shape.start)
    return f"{shape.tick}, {shape.size}, {start}" if short else f"tick {shape.tick}, wheel {shape.size}, start {start}"


WHEEL_SHAPES = (WheelShape(1, 2, 0), WheelShape(1, 3, 0), WheelShape(2, 2, 1), WheelShape(2, 3, 3),
                WheelShape(3, 2, 4), WheelShape(1, 2, LONG_MAX - 6), WheelShape(2, 3, LONG_MAX - 9))
WHEEL_DEPTH = 4
WHEEL_DOMAIN = ("(tick, wheel size, start) in " + ", ".join(f"({shape_text(s, short=True)})" for s in WHEEL_SHAPES)
                + f"; every sequence up to {WHEEL_DEPTH} commands of add(delay) with delay in {{0, 1, tick*size - 1, "
                  f"2*tick*size + tick, and near Long.MAX the delay to exactly Long.MAX}} (each add a new task; "
                  f"only now + delay <= Long.MAX) and advance(now + d) with d in {{1, tick, tick*size, "
                  f"3*tick*size^2}} (up to Long.MAX), states merged; KafkaWheel compared only up to the first "
                  f"command at which an exact computation of the shared arithmetic leaves the long range (where "
                  f"Java wraps)")


@attrs.define
class Wheels:
    """The three wheels after the same commands (KafkaWheel None once Java's arithmetic wrapped)."""

    model: Model
    arithmetic: ArithmeticWheel
    kafka: wheel.KafkaWheel | None


def wheels_after(shape: WheelShape, commands: Iterable[v.Command], arithmetic: wheel.Arithmetic) -> Wheels:
    w = Wheels(Model("timer", shape.params), ArithmeticWheel(shape.tick, shape.size, shape.start, arithmetic),
               wheel.KafkaWheel(shape.tick, shape.size, shape.start))
    commands = tuple(commands)
    for seq, command in enumerate(commands):
        wheel_step(w, commands[:seq], command)
    return w


def wheel_step(w: Wheels, path: tuple, command: v.Command) -> list[str]:
    """One command on the three wheels (after ``path``); the pairs that disagree after it."""
    observation = model_step(w.model, command, path)
    a, k = w.arithmetic, w.kafka
    a_before, k_before = len(a.ran), len(k.ran) if k is not None else 0
    kafka_failed = None
    if isinstance(command, v.TimerAdd):
        a.add(command.task, command.delay_ms)
    else:
        a.advance(command.to_ms)
    if a.overflowed:
        w.kafka = k = None
    elif k is not None:
        try:
            k.add_task(command.task, command.delay_ms) if isinstance(command, v.TimerAdd) else k.advance(command.to_ms)
        except (ArithmeticError, IndexError, wheel.Livelock) as error:
            kafka_failed = f"KafkaWheel raised {type(error).__name__}: {error}"
    views = {"model/timer.py": model_view(w.model, observation), "the shared arithmetic": arithmetic_view(a, a_before)}
    if k is not None and kafka_failed is None:
        views["KafkaWheel"] = kafka_view(k, k_before)
    problems = [kafka_failed] if kafka_failed else []
    names = list(views)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            problems += [f"{first} vs {second}: {field} {getattr(views[first], field)} != "
                         f"{getattr(views[second], field)}" for field in ("ran", "rejected", "clocks", "pending")
                         if getattr(views[first], field) != getattr(views[second], field)]
    return problems


def wheel_commands(now: int, shape: WheelShape, adds: int) -> Iterator[v.Command]:
    """The domain's commands at ``now``: an add of a new task per delay, an advance per step."""
    for delay in shape.delays(now):
        yield v.TimerAdd(f"t{adds + 1}", delay)
    for to in shape.advances(now):
        yield v.Advance(to)


def wheel_key(w: Wheels) -> tuple:
    """The three wheels' states: model/'s object graph, the others' clocks, buckets and queue order."""
    a, k = w.arithmetic, w.kafka
    kafka = None if k is None else (k.now, tuple((level.current, canonical(sorted(level.buckets.items())))
                                                 for level in k.levels), tuple(e[::2] for e in sorted(k.queue)))
    return (canonical(w.model.timer), a.now, tuple((level.clock, canonical(sorted(level.buckets.items())))
                                                   for level in a.levels),
            tuple(e[::2] for e in sorted(a.queue)), a.overflowed, kafka)


def wheels_agree(shape: WheelShape, depth: int, arithmetic: wheel.Arithmetic = wheel.KAFKA
                 ) -> tuple[Divergence | None, Reach]:
    """Enumerate the wheel domain of ``shape``, the shared arithmetic being ``arithmetic``."""
    def expand(path: tuple, now: int) -> Iterator[Successor]:
        adds = sum(isinstance(command, v.TimerAdd) for command in path)
        for command in wheel_commands(now, shape, adds):
            w = wheels_after(shape, path, arithmetic)
            problems = wheel_step(w, path, command)
            yield command, lambda: wheel_key(w), w.model.now_ms, problems

    return breadth_first(None, shape.start, expand, depth)


def wheel_trace(name: str, shape: WheelShape, divergence: Divergence, arithmetic: wheel.Arithmetic) -> Trace:
    """The divergence as a timer trace: model/'s recording; at the command where the wheels part, the answer of the
    first other wheel that disagrees with model/ as the system's (its runs, or its rejection), then the wheel
    read-out."""
    commands = [*divergence.commands, v.Wheel()]
    recording = recorded(Header(f"specs.{name}", "timer", shape.params, "kpurgatory.model",
                                f"the wheels part at command {len(divergence.commands)}: "
                                f"{'; '.join(divergence.problems)}. The recording is model/'s; the system's "
                                f"answers at that command and in the read-out after it are the other wheel's."),
                         commands)
    w = wheels_after(shape, divergence.commands[:-1], arithmetic)
    other = "KafkaWheel" if all("KafkaWheel" in problem for problem in divergence.problems) else "arithmetic"
    k_before, a_before = len(w.kafka.ran) if w.kafka is not None else 0, len(w.arithmetic.ran)
    wheel_step(w, divergence.commands[:-1], divergence.commands[-1])
    if other == "KafkaWheel" and w.kafka is not None:
        ran, levels = [task for task, _ in w.kafka.ran[k_before:]], [(level.tick, level.current, level.buckets)
                                                                      for level in w.kafka.levels]
    else:
        ran, levels = w.arithmetic.ran[a_before:], [(level.tick, level.clock, level.buckets)
                                                    for level in w.arithmetic.levels]
    answers = [v.Observation(None, tuple(v.Run(task) for task in sorted(ran))),
               v.Observation(read_out(levels, shape.size))]
    return with_answers(recording, len(divergence.commands) - 1, answers)


def read_out(levels: list[tuple[int, int, dict]], size: int) -> dict:
    """Levels of the shared arithmetic's wheel or KafkaWheel as the model's ``wheel`` read-out."""
    return {"levels": [{"tick_ms": tick, "wheel_size": size, "current_ms": clock,
                        "buckets": [{"slot": slot, "expiration_ms": expiration, "entries": list(tasks)}
                                    for slot, (expiration, tasks) in sorted(buckets.items()) if tasks]}
                       for tick, clock, buckets in levels]}


@obligation("refinement.wheel", kind="model", expect=BOUND, cost=8, domain=WHEEL_DOMAIN,
            mutant="the shared arithmetic with " + wheel.REFUSES_EARLY.bug,
            bound=Bound("exhaustive enumeration", "-", f"{len(WHEEL_SHAPES)} (tick, size, start) shapes, listed "
                        f"delays and advances, run length <= {WHEEL_DEPTH}"))
def wheel_refinement(mutated: bool = False) -> Outcome:
    """The three wheels are one wheel: the shared arithmetic that the symbolic wheel and every wheel obligation are
    built from (accepted, refused, place, advance_level, overflow_tick, executed for every entry), KafkaWheel (Kafka's
    wheel in Java's wrapping arithmetic, which executes the findings) and model/timer.py (the executable spec) agree
    pairwise after every command of every sequence in the domain: the same tasks run in it (a refusal on add is a
    run at once), the same add is rejected (the model's guard; the others accept every deadline up to Long.MAX), the
    same levels exist with the same clocks, and every pending task sits on the same level in a bucket of the same
    expiration. Where Java's arithmetic wraps (near Long.MAX) KafkaWheel is not compared: that is where Kafka fails
    (wheel.kafka.*) and the model departs from it on purpose."""
    arithmetic = wheel.REFUSES_EARLY if mutated else wheel.KAFKA
    bounds = []
    for shape in WHEEL_SHAPES:
        divergence, bound = wheels_agree(shape, WHEEL_DEPTH, arithmetic)
        if divergence is not None:
            return Outcome(REFUTED, "exhaustive enumeration", f"{shape_text(shape)}: after "
                           f"{describe(divergence.commands)}: {'; '.join(divergence.problems)}",
                           witness={"params": attrs.asdict(shape.params), "commands": describe(divergence.commands),
                                    "problems": list(divergence.problems), "bound": str(bound)},
                           traces={"counterexample": wheel_trace("refinement.wheel", shape, divergence, arithmetic)})
        bounds.append(bound)
    return Outcome(BOUND, "exhaustive enumeration", bounds_text(WHEEL_SHAPES, bounds, shape_text),
                   witness=bounds_witness(bounds))
