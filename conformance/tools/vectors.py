"""Test vectors: the model's answers written out as a deterministic tree of traces, for drivers in other languages'
test runners (specs/vectors.md is the format; this module is its generator).

A case is a trace (conformance/traces/codec.py) whose observations are the model's, with a header ``vector`` (what
the case is for) and, per step, ``expect``: the event groups the exact comparison uses, and for a timer_add or a
watch its deadline and the firing window of each declarable firing semantics, so a driver judges both levels
without the model. Four kinds:

  scenarios  the bundled corpus (conformance/scenarios/) replayed through the model;
  coverage   from a seeded pool of runs drawn as the check draws them, greedily, per coverage item no case chosen so
             far reaches, the run reaching it soonest, cut there and shrunk, then observed (size, shutdown);
  findings   per Kafka finding, the pool's run reaching its input class soonest (Kafka's own timer shadowed),
             shrunk, ending at that step;
  releases   each release rule's separating scenario, with the model of the release it pins.

The same seed gives the same bytes: cases in a fixed order, JSON with a fixed key order, no timestamps.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import json
import re
import shutil
import time
from pathlib import Path
from typing import Callable, Iterable

import attrs
import click
import fastjsonschema

from kpurgatory.conformance.adapters.sut import Hello, SystemUnderTest
from kpurgatory.conformance.check import strategies
from kpurgatory.conformance.check.choices import SeededChoices
from kpurgatory.conformance.check.compare import exact_difference
from kpurgatory.conformance.check.coverage import ITEMS, Before, Coverage
from kpurgatory.conformance.check.findings import FINDINGS, KafkaShadow
from kpurgatory.conformance.cli import Unwritable
from kpurgatory.conformance.terminal import safe
from kpurgatory.conformance.traces.codec import (MODEL, Header, Step, Trace, declarations_to_json, dumps,
                                                 read_traces, write_traces)
from kpurgatory.conformance.traces.replay import format_command, format_observation, scenario_files
from kpurgatory.model import CommandError, Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import FIRING, KAFKA, Declarations
from kpurgatory.model.releases import RULES

FORMAT = "kpurgatory-vectors"
VERSION = 1
#: the corpus file whose traces are the releases kind (each pins the release on one side of a rule)
RELEASES_FILE = "kafka-releases.jsonl"
#: the read-outs: coverage cases send none (most real timers have none), findings only the ones they are about
NO_READ_OUTS = frozenset(v.OPTIONAL)
#: how many runs the pool of generated runs of each profile holds (``--quick``: fewer)
EXAMPLES, QUICK_EXAMPLES = 2000, 300


# ---------------------------------------------------------------------------------------------------------------
# One case: a run through the model, with its expectations
# ---------------------------------------------------------------------------------------------------------------


def windows(declarations: Declarations, expiration_ms: int, scheduled_ms: int, tick_ms: int) -> dict[str, list[int]]:
    """[earliest, latest] of an entry under each declarable firing semantics, latest clamped to Long.MAX_VALUE."""
    out = {}
    for firing in FIRING:
        declared = attrs.evolve(declarations, firing=firing)
        out[firing] = [declared.earliest_ms(expiration_ms, tick_ms),
                       min(declared.latest_ms(expiration_ms, scheduled_ms, tick_ms), v.LONG_MAX)]
    return out


def expectations(model: Model, command: v.Command, observation: v.Observation, now_ms: int,
                 declarations: Declarations) -> dict | None:
    expect: dict = {}
    if observation.events:
        expect["groups"] = [len(group) for group in observation.grouped()]
    delay = command.delay_ms if isinstance(command, (v.TimerAdd, v.Watch)) else None
    if delay is not None:
        deadline = now_ms + delay
        expect["deadline_ms"] = deadline if deadline <= v.LONG_MAX else None
        if deadline <= v.LONG_MAX:
            expect["windows"] = windows(declarations, deadline, now_ms, model.params.tick_ms)
    return expect or None


def vector_trace(trace_id: str, profile: str, params: v.Params, commands: Iterable[v.Command], kind: str, *,
                 declarations: Declarations = KAFKA, description: str | None = None, finding: str | None = None,
                 rule: str | None = None) -> Trace:
    """The model's run of ``commands`` as a test vector: observations, expectations, and the coverage it reaches."""
    model = Model(profile, params, declarations.release)
    coverage = Coverage(profile)
    steps = []
    for seq, command in enumerate(commands, start=1):
        before, now_ms = Before.of(model, command), model.now_ms
        observation = model.step(command)
        coverage.record(model, command, observation, before)
        steps.append(Step(seq, command, observation,
                          expect=expectations(model, command, observation, now_ms, declarations)))
    covers = [item for item in ITEMS[profile] if coverage.counts[item]]  # items, not the shard count
    header = Header(trace_id, profile, params, MODEL, description, declarations=declarations,
                    vector={"kind": kind, "covers": covers, "finding": finding, "rule": rule})
    return Trace(header, steps)


def first_reached(profile: str, params: v.Params, commands: list[v.Command]) -> dict[str, int]:
    """Coverage item -> how many steps the run takes to reach it first."""
    model, coverage, first = Model(profile, params), Coverage(profile), {}
    for number, command in enumerate(commands, start=1):
        before = Before.of(model, command)
        coverage.record(model, command, model.step(command), before)
        for item in coverage.counts.keys() - first.keys():
            first[item] = number
    return first


def first_findings(params: v.Params, commands: list[v.Command]) -> dict[str, int]:
    """Kafka finding -> how many steps the timer run takes to reach a step of its input class (Kafka's timer
    shadowed, `KafkaShadow`)."""
    model, shadow, first = Model("timer", params), KafkaShadow(), {}
    for number, command in enumerate(commands, start=1):
        shadow.before(model, command)
        expected = model.step(command)
        edge = shadow.after(model, command, expected)
        if edge is not None:
            for finding in FINDINGS:
                if finding.name not in first and finding.inputs(edge, command, expected):
                    first[finding.name] = number
    return first


# ---------------------------------------------------------------------------------------------------------------
# The kinds
# ---------------------------------------------------------------------------------------------------------------


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def corpus_cases(releases: bool) -> list[Trace]:
    """The corpus (without the release rules' scenarios), or only those, replayed through the model."""
    cases = []
    for path in scenario_files():
        if (path.name == RELEASES_FILE) != releases:
            continue
        for trace in read_traces(path):
            header = trace.header
            pinned = Declarations(kafka_version=header.declarations.kafka_version)
            rule = next((r.ticket for r in RULES if r.separated_by == trace.trace_id), None) if releases else None
            cases.append(vector_trace(slug(trace.trace_id), header.profile, header.params, trace.commands,
                                      "releases" if releases else "scenarios", declarations=pinned,
                                      description=header.description, rule=rule))
    return cases


Runs = list[tuple[v.Params, list[v.Command]]]


def pool(profile: str, seed: str, examples: int) -> Runs:
    """``examples`` runs drawn by the check's drawing functions, run N from a generator seeded with ``seed`` and N
    (`SeededChoices`, as ``check`` draws its runs): timer runs with read-outs (a finding is about them; shrinking
    drops those a case does not need), purgatory runs without. Nothing else steers them, so a seed gives the same
    runs however kpurgatory is installed (Hypothesis's generation would add constants from the source files it
    finds in an editable checkout)."""
    unsupported = frozenset() if profile == "timer" else NO_READ_OUTS
    return [strategies.draw_run(SeededChoices(f"{seed}/{index}"), profile, unsupported)[1:]
            for index in range(examples)]


#: runs that reach a Kafka finding's input class the pool rarely draws: the reaper's re-insertion livelock (a far
#: clock and a deadline whose level window wrapped) and a read-out once a level's window wrapped
CONSTRUCTED: Runs = [
    (v.Params(tick_ms=3, wheel_size=6, start_ms=0, purge_interval=1000),
     [v.Advance(2369190669160808449), v.TimerAdd("a", 650), v.Advance(2369190669160809100)]),
    (v.Params(tick_ms=2, wheel_size=6, start_ms=131621703842267134, purge_interval=1000),
     [v.Advance(2305843009213693952), v.TimerAdd("a", 3), v.Wheel()]),
]


def shrink(commands: list[v.Command], condition: Callable[[list[v.Command]], bool]) -> list[v.Command]:
    """``commands`` without every step whose deletion keeps ``condition`` met (passes from the end until nothing
    goes; a deletion that leaves a command the model refuses, such as a watch of an op never built, does not)."""
    def holds(candidate: list[v.Command]) -> bool:
        try:
            return condition(candidate)
        except CommandError:
            return False

    removed = True
    while removed:
        removed = False
        for index in reversed(range(len(commands))):
            candidate = commands[:index] + commands[index + 1:]
            if holds(candidate):
                commands, removed = candidate, True
    return commands


def shortest(runs: Runs, reached: list[dict[str, int]], item: str):
    """The run of ``runs`` reaching ``item`` in the fewest steps (the first such), cut there; None if none does."""
    steps, number = min(((first[item], number) for number, first in enumerate(reached) if item in first),
                        default=(None, None))
    return None if steps is None else (runs[number][0], runs[number][1][:steps])


def observed_at_the_end(commands: list[v.Command]) -> list[v.Command]:
    """A shrunk run with size and shutdown at its end (unless it shut down): what it left pending is then observed,
    so an entry a system forgot to remove, or fired too soon, shows."""
    return commands if commands and isinstance(commands[-1], v.Shutdown) else [*commands, v.Size(), v.Shutdown()]


def coverage_cases(profile: str, runs: Runs) -> tuple[list[Trace], list[str]]:
    """Greedily, for each coverage item no case chosen so far reaches, the run of the pool reaching it soonest,
    shrunk; and the items no run of the pool reaches."""
    reached = [first_reached(profile, *run) for run in runs]
    cases, covered, uncovered = [], set(), []
    for item in ITEMS[profile]:
        if item in covered:
            continue
        run = shortest(runs, reached, item)
        if run is None:
            uncovered.append(item)
            continue
        params, commands = run
        commands = shrink(commands, lambda candidate: item in first_reached(profile, params, candidate))
        case = vector_trace(f"coverage.{profile}.{slug(item)}", profile, params, observed_at_the_end(commands),
                            "coverage", description=f"a minimal generated run reaching: {item}")
        covered.update(case.header.vector["covers"])
        cases.append(case)
    return cases, uncovered


def finding_cases(runs: Runs) -> tuple[list[Trace], list[str]]:
    """Per Kafka finding, the run of the pool of timer runs that reaches its input class soonest, shrunk, ending at
    that step; and the findings no run reaches."""
    reached = [first_findings(*run) for run in runs]
    cases, missed = [], []
    for finding in FINDINGS:
        run = shortest(runs, reached, finding.name)
        if run is None:
            missed.append(finding.name)
            continue
        params, commands = run
        commands = shrink(commands, lambda candidate: first_findings(params, candidate).get(finding.name)
                          == len(candidate))
        cases.append(vector_trace(f"finding.timer.{finding.name}", "timer", params, commands, "findings",
                                  description=str(finding), finding=finding.name))
    return cases, missed


# ---------------------------------------------------------------------------------------------------------------
# The tree
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Tree:
    index: dict
    files: dict[str, bytes]
    #: coverage items (per profile) and findings no case reaches
    uncovered: dict[str, list[str]]


def case_path(trace: Trace) -> str:
    return f"{VERSION}/{trace.header.profile}/{trace.header.vector['kind']}/{trace.trace_id}.jsonl"


def index_entry(path: str, trace: Trace, data: bytes) -> dict:
    names = sorted({step.command.name for step in trace.steps})
    return {"path": path, "profile": trace.header.profile, "kind": trace.header.vector["kind"], "id": trace.trace_id,
            "params": attrs.asdict(trace.header.params), "commands": names,
            "features": [name for name in names if name in v.OPTIONAL],
            "kafka_version": trace.header.declarations.kafka_version, "finding": trace.header.vector["finding"],
            "steps": len(trace.steps), "sha256": hashlib.sha256(data).hexdigest()}


def generate(seed: int, profiles: Iterable[str] = v.PROFILES, examples: int = EXAMPLES,
             progress: Callable[[str], None] = lambda message: None) -> Tree:
    profiles = tuple(profiles)
    cases = [*corpus_cases(releases=False), *corpus_cases(releases=True)]
    uncovered: dict[str, list[str]] = {}
    for profile in profiles:
        progress(f"{examples} runs of the {profile} profile")
        runs = pool(profile, f"{seed}:{profile}", examples) + (CONSTRUCTED if profile == "timer" else [])
        found, uncovered[profile] = coverage_cases(profile, runs)
        cases += found
        if profile == "timer":
            found, uncovered["findings"] = finding_cases(runs)
            cases += found
    return tree_of([trace for trace in cases if trace.header.profile in profiles], seed, uncovered)


def tree_of(cases: Iterable[Trace], seed: int = 0, uncovered: dict[str, list[str]] | None = None) -> Tree:
    """The tree of ``cases`` (vector traces, `vector_trace`): their files and the index."""
    files, entries = {}, []
    for trace in cases:
        path = case_path(trace)
        if path in files:
            raise ValueError(f"two cases would be written to {path}")
        files[path] = dumps(trace).encode()
        entries.append(index_entry(path, trace, files[path]))
    index = {"format": FORMAT, "version": VERSION, "seed": seed, "cases": sorted(entries, key=lambda e: e["path"])}
    return Tree(index, files, uncovered or {})


def index_bytes(index: dict) -> bytes:
    return (json.dumps(index, indent=1, sort_keys=True) + "\n").encode()


def is_vector_tree(out: Path) -> bool:
    try:
        return json.loads((out / "index.json").read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def write_tree(out: Path, tree: Tree) -> int:
    """Write ``tree`` under ``out`` (replacing the tree of this format version there); returns the bytes written."""
    shutil.rmtree(out / str(VERSION), ignore_errors=True)
    written = 0
    for path, data in tree.files.items():
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written += len(data)
    data = index_bytes(tree.index)
    (out / "index.json").write_bytes(data)
    return written + len(data)


@click.command("vectors")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the generated kinds.")
@click.option("--profile", "profiles", multiple=True, type=click.Choice(v.PROFILES),
              help="Only this profile's cases (repeatable; default both).")
@click.option("--quick", is_flag=True, help=f"Draw {QUICK_EXAMPLES} runs per pool instead of {EXAMPLES} (faster; "
                                            f"an item may be left unreached).")
def vectors_command(out, seed, profiles, quick):
    """Write the test vectors (specs/vectors.md) to OUT: the scenario corpus, coverage-directed generated runs, each
    Kafka finding's input class and each release rule's separating case, as traces of the model's answers with what a
    driver needs to judge them. The same seed gives the same bytes.

    OUT must not exist, be empty, or hold an earlier vector tree (replaced). Exits 0, or 2 on a bad OUT."""
    if out.exists() and not out.is_dir():
        raise click.BadParameter(f"{safe(out)} is a file, not a directory", param_hint="OUT")
    if out.is_dir() and any(out.iterdir()) and not is_vector_tree(out):
        raise click.BadParameter(f"{safe(out)} is a non-empty directory without a vector tree's index.json: "
                                 f"refusing to write into it", param_hint="OUT")
    started = time.monotonic()
    tree = generate(seed, profiles or v.PROFILES, QUICK_EXAMPLES if quick else EXAMPLES,
                    progress=lambda message: click.echo(f"generating {message} ...", err=True))
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = write_tree(out, tree)
    except OSError as error:
        raise Unwritable(out, error) from None
    elapsed = time.monotonic() - started
    counts: dict[tuple[str, str], list[int]] = {}
    for entry in tree.index["cases"]:
        tally = counts.setdefault((entry["profile"], entry["kind"]), [0, 0])
        tally[0] += 1
        tally[1] += len(tree.files[entry["path"]])
    click.echo(f"{'profile':<10} {'kind':<10} {'cases':>6} {'bytes':>10}")
    for (profile, kind), (number, size) in sorted(counts.items()):
        click.echo(f"{profile:<10} {kind:<10} {number:>6} {size:>10,}")
    click.echo(f"{len(tree.index['cases'])} cases, {written:,} bytes (index included) in {safe(out)}, seed {seed}, "
               f"{elapsed:.1f} s")
    for what, items in tree.uncovered.items():
        if items:
            click.echo(f"not reached ({what}): {'; '.join(items)}")  # items hold commas


# ---------------------------------------------------------------------------------------------------------------
# Running a tree: the Python driver (the pytest plugin's vectors mode), judging from the cases alone
# ---------------------------------------------------------------------------------------------------------------

#: the environment a driver reads (specs/vectors.md)
ENV_TREE, ENV_OUT, ENV_RESULTS = "KPURGATORY_VECTORS", "KPURGATORY_VECTORS_OUT", "KPURGATORY_VECTORS_RESULTS"
NO_TREE = f"no vector tree: set {ENV_TREE}=DIR (make one with `kpurgatory vectors DIR`)"
PURGATORY_CONTRACT = ("purgatory cases at the contract level are judged by `kpurgatory replay --level contract` "
                      "through the stdio adapter")


@functools.cache
def vectors_validator(definition: str):
    whole = json.loads(importlib.resources.files("kpurgatory.specs").joinpath("vectors.schema.json").read_text())
    return fastjsonschema.compile({**whole, "$ref": f"#/$defs/{definition}"})


def check_document(definition: str, document: object, source: str) -> None:
    """Raise ValueError naming ``source`` and the field at fault unless ``document`` is a valid ``definition``
    (index or results) of specs/vectors.schema.json."""
    try:
        vectors_validator(definition)(document)
    except fastjsonschema.JsonSchemaValueException as error:
        raise ValueError(f"{source}: {error.message}") from None


def read_index(root: Path) -> dict:
    source = root / "index.json"
    try:
        index = json.loads(source.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{source}: not a vector tree's index ({error}); {NO_TREE}") from None
    check_document("index", index, str(source))
    return index


def skip_reason(entry: dict, hello: Hello, level: str) -> str | None:
    """Why this binding cannot run the case, or None."""
    if entry["profile"] not in hello.profiles:
        return f"the {entry['profile']} profile is not implemented"
    if level == "contract" and entry["profile"] == "purgatory":
        return PURGATORY_CONTRACT
    lacking = [name for name in entry["commands"] if name in hello.unsupported]
    if lacking:
        return f"uses {', '.join(lacking)}, which the implementation does not support"
    if entry["kafka_version"] != hello.declarations.kafka_version:
        return (f"the case is about Kafka {entry['kafka_version'] or '(current)'}; the implementation declares "
                f"{hello.declarations.kafka_version or 'current Kafka'}")
    return None


@attrs.define
class TimerContract:
    """The contract level of the timer profile as specs/vectors.md states it, from the cases' ``expect``: pending
    task -> firing window [lo, hi] of its last add under the declared firing semantics."""

    declarations: Declarations
    now_ms: int
    pending: dict[str, list[int]] = attrs.field(factory=dict)
    #: tasks that left the timer since the last advance (what lazy_size lets size and shutdown still count)
    departed: list[str] = attrs.field(factory=list)
    judging: bool = True

    def leave(self, task: str) -> bool:
        if self.pending.pop(task, None) is None:
            return False
        self.departed.append(task)
        return True

    def treatment(self, deadline_ms: int | None, delay_ms: int) -> str:
        d = self.declarations
        if deadline_ms is None or deadline_ms > d.max_deadline_ms:
            return d.beyond_max_deadline
        return d.negative_delays if delay_ms < 0 and d.negative_delays != "run_at_once" else "accepted"

    def judge(self, step: Step, observed: v.Observation) -> str | None:
        """What breaks the contract in the system's answer to ``step``, or None."""
        command, expect = step.command, step.expect or {}
        if isinstance(command, v.TimerAdd):
            treatment = self.treatment(expect["deadline_ms"], command.delay_ms)
            rejected = observed.error == "delay_out_of_range"
            if treatment == "undefined":
                self.judging = False
                return None
            if (treatment == "rejected") != rejected:
                return (f"domain: the deadline {expect['deadline_ms']} must be "
                        f"{'rejected with delay_out_of_range' if treatment == 'rejected' else 'accepted'}, "
                        f"observed error {observed.error!r}")
            if rejected:
                return "domain: a rejected timer_add caused events" if observed.events else None
            self.leave(command.task)
            self.pending[command.task] = expect["windows"][self.declarations.firing]
        if observed.error is not None:
            return f"unexpected error {observed.error!r}"
        if isinstance(command, v.TimerCancel):
            self.leave(command.task)
        elif isinstance(command, v.Advance):
            self.now_ms = command.to_ms
        for event in observed.events:
            if not isinstance(event, v.Run):
                return f"{event.kind} is not a timer event"
            window = self.pending.get(event.task)
            if window is None:
                return f"on_time/exactly_once: task {event.task!r} ran but was not pending"
            if self.now_ms < window[0]:
                return f"on_time: task {event.task!r} ran at {self.now_ms}, before its window {window}"
            self.leave(event.task)
        if isinstance(command, v.Advance):
            self.departed.clear()
            late = sorted(task for task, (_, hi) in self.pending.items() if hi <= self.now_ms)
            if late:
                return f"on_time: still pending after advance to {self.now_ms}: {', '.join(late)}"
        if isinstance(command, v.Size):
            pending, lazy = len(self.pending), len(self.departed) if self.declarations.lazy_size else 0
            if type(observed.result) is not int or not pending <= observed.result <= pending + lazy:
                return f"counters: size {observed.result!r}, expected {pending}" + (f"..{pending + lazy}" * bool(lazy))
        if isinstance(command, v.Shutdown):
            reported, pending = observed.result or [], set(self.pending)
            allowed = pending | (set(self.departed) if self.declarations.lazy_size else set())
            if len(set(reported)) != len(reported) or not pending <= set(reported) <= allowed:
                return f"counters: shutdown reported {sorted(reported)!r}, pending {sorted(pending)!r}"
        return None


@attrs.frozen
class CaseResult:
    path: str
    verdict: str  # pass, fail or skip
    reason: str | None = None
    step: int | None = None
    observed: str | None = None

    def to_json(self) -> dict:
        return attrs.asdict(self)


def exact_judgement(step: Step, observed: v.Observation) -> str | None:
    groups = (step.expect or {}).get("groups")
    expected = attrs.evolve(step.observation, groups=tuple(groups) if groups else None)
    difference = exact_difference(step.command, expected, observed)
    return None if difference is None else str(difference)


def run_case(root: Path, entry: dict, system: SystemUnderTest, hello: Hello, level: str, out_dir: Path
             ) -> tuple[CaseResult, str]:
    """Run one case on ``system`` (whose hello is ``hello``); the result and what to print (empty on a pass)."""
    path = entry["path"]
    if (why := skip_reason(entry, hello, level)) is not None:
        return CaseResult(path, "skip", why), ""
    trace = read_traces(root / path)[0]
    contract = TimerContract(hello.declarations, trace.header.params.start_ms) if level == "contract" else None
    answered: list[Step] = []
    problem = None
    try:
        system.init(trace.header.profile, trace.header.params)
    except Exception as error:  # noqa: BLE001 - the system failed: the result says how
        problem = f"init raised {type(error).__name__}: {error}"
    for step in trace.steps if problem is None else ():
        if not v.supported(step.command, hello.features):
            answered.append(step)  # a read-out the system lacks is left out, as `kpurgatory check` leaves it
            continue
        try:
            observed = system.step(step.command)
        except Exception as error:  # noqa: BLE001
            answered.append(attrs.evolve(step, system=f"{type(error).__name__}: {error}"))
            problem = f"raised {type(error).__name__}: {error}"
            break
        answered.append(attrs.evolve(step, system=observed))
        problem = exact_judgement(step, observed) if contract is None else contract.judge(step, observed)
        if problem is not None or contract is not None and not contract.judging:
            break
    if problem is None:
        return CaseResult(path, "pass"), ""
    failing = answered[-1] if answered else None
    header = attrs.evolve(trace.header, implementation=hello.implementation, declarations=hello.declarations)
    observed_file = write_traces(out_dir / f"{entry['id']}.observed.jsonl", Trace(header, answered))
    where = f"step {failing.seq} ({format_command(failing.command)})" if failing else "init"
    lines = [f"FAIL {path} at {where}: {problem}"]
    if failing is not None:
        answer = failing.system if isinstance(failing.system, str) else format_observation(failing.system)
        lines += [f"  expected: {format_observation(failing.observation)}", f"  observed: {answer}"]
    lines += [f"  observed trace: {observed_file}",
              f"  replay with its HTML view: kpurgatory replay {observed_file} --level {level}"]
    return (CaseResult(path, "fail", problem, failing and failing.seq, str(observed_file)),
            safe("\n".join(lines)))


def results_document(driver: str, hello: Hello, level: str, results: list[CaseResult]) -> dict:
    return {"format": "kpurgatory-vector-results", "version": VERSION, "driver": driver,
            "implementation": hello.implementation, "level": level,
            "declarations": declarations_to_json(hello.declarations),
            "cases": [result.to_json() for result in sorted(results, key=lambda r: r.path)]}
