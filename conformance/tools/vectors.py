"""Test vectors: the model's answers written out as a deterministic tree of traces, for drivers in other languages'
test runners (specs/vectors.md is the format; this module is its generator and the Python driver).

A case is a trace (conformance/traces/codec.py) whose observations are the model's, with a header ``vector`` (what
the case is for) and, per step, ``expect``: the event groups the exact comparison uses; for a timer_add or a watch
with keys its deadline and the firing window of each declarable firing semantics; whether the release lists a
completed op again; and on a finding's step what Kafka's own timer does there, so a driver judges both levels
without the model. A tree is made for one Kafka release (current Kafka by default). Five kinds:

  scenarios  the bundled corpus (conformance/scenarios/) replayed through the model;
  coverage   from a seeded pool of runs drawn as the check draws them, greedily, per coverage item no case chosen so
             far reaches, the run reaching it soonest, cut there and shrunk, then observed (size, shutdown);
  findings   per Kafka finding, the pool's run reaching its input class soonest (Kafka's own timer shadowed),
             shrunk, ending at that step;
  releases   each release rule's separating scenario, with the model of the release it pins;
  corpus     the failing runs a check stored in a corpus (``--from-corpus``), named after how their system failed.

The same seed gives the same bytes: cases in a fixed order, JSON with a fixed key order, no timestamps.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import json
import os
import re
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable

import attrs
import click
import fastjsonschema

from kpurgatory.conformance.adapters.subprocess import AdapterCrashed, AdapterError, AdapterTimedOut
from kpurgatory.conformance.adapters.sut import SYSTEM_ERRORS, Hello, SystemUnderTest
from kpurgatory.conformance.check import corpus as shared
from kpurgatory.conformance.check import strategies
from kpurgatory.conformance.check.choices import SeededChoices
from kpurgatory.conformance.check.compare import exact_difference
from kpurgatory.conformance.check.sequential import time_limited
from kpurgatory.conformance.check.coverage import ITEMS, Before, Coverage
from kpurgatory.conformance.check.findings import (FAMILIES, FINDINGS, KafkaDoes, KafkaShadow, Signature,
                                                   error_signature, failure_signature, recorded_error, said)
from kpurgatory.conformance.cli import Unwritable
from kpurgatory.conformance.terminal import safe
from kpurgatory.conformance.traces.codec import (MODEL, Header, Step, Trace, declarations_to_json, dumps,
                                                 read_traces, write_traces)
from kpurgatory.conformance.traces.replay import format_command, format_observation, replay, scenario_files
from kpurgatory.model import CommandError, Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import FIRING, KAFKA, Declarations, OpState
from kpurgatory.model.releases import CURRENT, RULES, Release

FORMAT = "kpurgatory-vectors"
VERSION = 1
#: the corpus file whose traces are the releases kind (each pins the release on one side of a rule)
RELEASES_FILE = "kafka-releases.jsonl"
#: the read-outs: coverage cases send none (most real timers have none), findings only the ones they are about
NO_READ_OUTS = frozenset(v.OPTIONAL)
#: how many runs the pool of generated runs of each profile holds (``--quick``: fewer)
EXAMPLES, QUICK_EXAMPLES = 2000, 300
FINDING = {finding.name: finding for finding in FINDINGS}


# ---------------------------------------------------------------------------------------------------------------
# One case: a run through the model, with its expectations
# ---------------------------------------------------------------------------------------------------------------


def windows(expiration_ms: int, scheduled_ms: int, tick_ms: int) -> dict[str, list[int | None]]:
    """[earliest, latest] of an entry under each declarable firing semantics, latest None past Long.MAX_VALUE (the
    clock never gets there: the entry is never late)."""
    out = {}
    for firing in FIRING:
        declared = Declarations(firing=firing)
        latest = declared.latest_ms(expiration_ms, scheduled_ms, tick_ms)
        out[firing] = [declared.earliest_ms(expiration_ms, tick_ms), latest if latest <= v.LONG_MAX else None]
    return out


def entry_of(command: v.Command, now_ms: int, ops: dict[str, OpState], release: Release) -> tuple[int, int] | None:
    """(now + delay_ms, the expiration the entry gets) of what a timer_add or a watch with keys puts in the timer:
    a watch's op keeps the delay of its first watch, and before KAFKA-3470 the deadline it was built with. ``ops``
    holds the ops watched so far (a watch of a new op adds it, as the contract monitor does)."""
    if isinstance(command, v.TimerAdd):
        return now_ms + command.delay_ms, now_ms + command.delay_ms
    if not isinstance(command, v.Watch):
        return None
    op = ops.setdefault(command.op, OpState(command.ready_on, command.delay_ms or 0, built_ms=now_ms))
    return (now_ms + op.delay_ms, op.deadline_ms(now_ms, release)) if command.keys else None


def expectations(model: Model, command: v.Command, observation: v.Observation, now_ms: int,
                 entry: tuple[int, int] | None, relisted: bool) -> dict | None:
    """A step's ``expect`` (specs/vectors.md §2): its event groups; the deadline and firing windows of the entry it
    schedules (``entry``, `entry_of`); whether the release lists its completed op again (``relisted``)."""
    expect: dict = {}
    if observation.events:
        expect["groups"] = [len(group) for group in observation.grouped()]
    if entry is not None:
        deadline, expiration = entry
        expect["deadline_ms"] = deadline if deadline <= v.LONG_MAX else None
        if deadline <= v.LONG_MAX:
            expect["windows"] = windows(expiration, now_ms, model.params.tick_ms)
    if relisted:
        expect["relist_completed"] = True
    return expect or None


def vector_trace(trace_id: str, profile: str, params: v.Params, commands: Iterable[v.Command], kind: str, *,
                 declarations: Declarations = KAFKA, description: str | None = None, finding: str | None = None,
                 rule: str | None = None) -> Trace:
    """The model's run of ``commands`` as a test vector: observations, expectations, and the coverage it reaches.
    The step of a ``finding``'s input class (the first) also says what Kafka's own timer does there."""
    release = declarations.release
    model = Model(profile, params, release)
    coverage = Coverage(profile)
    ops: dict[str, OpState] = {}
    shadow = None if finding is None else KafkaShadow()
    steps = []
    for seq, command in enumerate(commands, start=1):
        before, now_ms = Before.of(model, command), model.now_ms
        entry = entry_of(command, now_ms, ops, release)
        relisted = (entry is not None and isinstance(command, v.Watch) and not release.has("KAFKA-18027")
                    and command.op in model.ops and model.ops[command.op].completed)
        if shadow is not None:
            shadow.before(model, command)
        observation = model.step(command)
        coverage.record(model, command, observation, before)
        expect = expectations(model, command, observation, now_ms, entry, relisted)
        edge = None if shadow is None else shadow.after(model, command, observation)
        if edge is not None and FINDING[finding].inputs(edge, command, observation):
            expect = {**(expect or {}), "kafka": {"finding": finding, **FINDING[finding].outcome(edge).to_json()}}
            shadow = None
        steps.append(Step(seq, command, observation, expect=expect))
    covers = [item for item in ITEMS[profile] if coverage.counts[item]]  # items, not the shard count
    header = Header(trace_id, profile, params, MODEL, description, declarations=declarations,
                    vector={"kind": kind, "covers": covers, "finding": finding, "rule": rule})
    return Trace(header, steps)


def first_reached(profile: str, params: v.Params, commands: list[v.Command], release: Release = CURRENT
                  ) -> dict[str, int]:
    """Coverage item -> how many steps the run takes to reach it first (the model as ``release``)."""
    model, coverage, first = Model(profile, params, release), Coverage(profile), {}
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


def scenario_cases(releases: bool, kafka_version: str | None, left_out: list[str]) -> list[Trace]:
    """The scenario corpus (without the release rules' scenarios), or only those, replayed through the model as
    Kafka ``kafka_version`` (None: each as the release its header pins, current Kafka when none); the ids of those
    that release cannot be sent are added to ``left_out``."""
    cases = []
    for path in scenario_files():
        if (path.name == RELEASES_FILE) != releases:
            continue
        for trace in read_traces(path):
            header = trace.header
            pinned = Declarations(kafka_version=kafka_version or header.declarations.kafka_version)
            rule = next((r.ticket for r in RULES if r.separated_by == trace.trace_id), None) if releases else None
            try:
                cases.append(vector_trace(slug(trace.trace_id), header.profile, header.params, trace.commands,
                                          "releases" if releases else "scenarios", declarations=pinned,
                                          description=header.description, rule=rule))
            except CommandError as error:
                left_out.append(f"{slug(trace.trace_id)} ({error})")
    return cases


def corpus_cases(directories: Iterable[Path], declarations: Declarations, left_out: list[str]) -> list[Trace]:
    """The failing runs stored in the corpora ``directories`` (`conformance.check.corpus`, in the order given, each
    run once), replayed through the model as the tree's release, each named after how its system failed: the
    signature of the first failure of its recorded answers (`replay` of the counterexample). Those the release
    cannot be sent are added to ``left_out``."""
    seen, numbers, cases = set(), Counter(), []
    for directory in directories:
        for trace in shared.stored(directory):
            if shared.key(trace) in seen:
                continue
            seen.add(shared.key(trace))
            signature = corpus_signature(trace)
            name = f"corpus.{trace.header.profile}.{signature.slug}"
            numbers[name] += 1
            try:
                cases.append(vector_trace(f"{name}-{numbers[name]}", trace.header.profile, trace.header.params,
                                          trace.commands, "corpus", declarations=declarations,
                                          description=f"a failing run from a check's corpus: {signature}"))
            except CommandError as error:
                left_out.append(f"{name}-{numbers[name]} ({error})")
    return cases


def corpus_signature(trace: Trace) -> Signature:
    """How the system of a stored counterexample failed: the first failure of its recorded answers, judged at the
    exact level, or how it failed to answer its last step."""
    report = replay(trace)
    if report.finding is not None:
        return report.finding.signature
    if (failure := report.first_failure) is not None:
        return failure_signature(failure.command, failure.failures[0].what)
    last = trace.steps[-1] if trace.steps else None
    if last is not None and isinstance(last.system, str):
        return error_signature(last.command.name, recorded_error(last.system))
    return Signature("passes", "", "")


Runs = list[tuple[v.Params, list[v.Command]]]


def pool(profile: str, seed: str, examples: int, release: Release = CURRENT) -> Runs:
    """``examples`` runs drawn by the check's drawing functions, run N from a generator seeded with ``seed`` and N
    (`SeededChoices`, as ``check`` draws its runs): timer runs with read-outs (a finding is about them; shrinking
    drops those a case does not need), purgatory runs without. Nothing else steers them, so a seed gives the same
    runs however kpurgatory is installed (Hypothesis's generation would add constants from the source files it
    finds in an editable checkout). Commands ``release`` lacks are not drawn."""
    unsupported = release.missing_commands | (frozenset() if profile == "timer" else NO_READ_OUTS)
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


def coverage_cases(profile: str, runs: Runs, declarations: Declarations) -> tuple[list[Trace], list[str]]:
    """Greedily, for each coverage item no case chosen so far reaches, the run of the pool reaching it soonest,
    shrunk; and the items no run of the pool reaches (the model as the release ``declarations`` name)."""
    release = declarations.release
    reached = [first_reached(profile, *run, release) for run in runs]
    cases, covered, uncovered = [], set(), []
    for item in ITEMS[profile]:
        if item in covered:
            continue
        run = shortest(runs, reached, item)
        if run is None:
            uncovered.append(item)
            continue
        params, commands = run
        commands = shrink(commands, lambda candidate: item in first_reached(profile, params, candidate, release))
        case = vector_trace(f"coverage.{profile}.{slug(item)}", profile, params, observed_at_the_end(commands),
                            "coverage", declarations=declarations,
                            description=f"a minimal generated run reaching: {item}")
        covered.update(case.header.vector["covers"])
        cases.append(case)
    return cases, uncovered


def finding_cases(runs: Runs, declarations: Declarations) -> tuple[list[Trace], list[str]]:
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
                                  declarations=declarations, description=str(finding), finding=finding.name))
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
    #: the cases the tree's release cannot be sent (a scenario or a stored run with a call the release lacks)
    left_out: list[str] = attrs.Factory(list)


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
             progress: Callable[[str], None] = lambda message: None, kafka_version: str | None = None,
             corpora: Iterable[Path] = ()) -> Tree:
    """The tree for Kafka ``kafka_version`` (None: current Kafka), with the failing runs of ``corpora`` added."""
    profiles = tuple(profiles)
    declarations = Declarations(kafka_version=kafka_version)
    left_out: list[str] = []
    cases = [*scenario_cases(False, kafka_version, left_out), *scenario_cases(True, kafka_version, left_out),
             *corpus_cases(corpora, declarations, left_out)]
    uncovered: dict[str, list[str]] = {}
    for profile in profiles:
        progress(f"{examples} runs of the {profile} profile")
        runs = (pool(profile, f"{seed}:{profile}", examples, declarations.release)
                + (CONSTRUCTED if profile == "timer" else []))
        found, uncovered[profile] = coverage_cases(profile, runs, declarations)
        cases += found
        if profile == "timer":
            found, uncovered["findings"] = finding_cases(runs, declarations)
            cases += found
    tree = tree_of([trace for trace in cases if trace.header.profile in profiles], seed, uncovered, kafka_version)
    return attrs.evolve(tree, left_out=left_out)


def tree_of(cases: Iterable[Trace], seed: int = 0, uncovered: dict[str, list[str]] | None = None,
            kafka_version: str | None = None) -> Tree:
    """The tree of ``cases`` (vector traces, `vector_trace`) made for Kafka ``kafka_version``: their files and the
    index."""
    files, entries = {}, []
    for trace in cases:
        path = case_path(trace)
        if path in files:
            raise ValueError(f"two cases would be written to {path}")
        files[path] = dumps(trace).encode()
        entries.append(index_entry(path, trace, files[path]))
    index = {"format": FORMAT, "version": VERSION, "seed": seed, "kafka_version": kafka_version,
             "families": [[name, list(words)] for name, words in FAMILIES.items()],
             "cases": sorted(entries, key=lambda e: e["path"])}
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


def release_option(_context, _parameter, value: str | None) -> str | None:
    try:
        Declarations(kafka_version=value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    return value


def corpus_option(_context, _parameter, value: tuple[Path, ...]) -> tuple[Path, ...]:
    """Each corpus folder, read once here: a missing folder or a file that is not a trace is bad input."""
    for directory in value:
        if not directory.is_dir():
            raise click.BadParameter(f"{safe(directory)} is not a folder (a corpus of `kpurgatory check --corpus`)")
        try:
            shared.stored(directory)
        except (OSError, ValueError) as error:
            raise click.BadParameter(f"{safe(directory)}: {safe(str(error))}") from None
    return value


@click.command("vectors")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the generated kinds.")
@click.option("--profile", "profiles", multiple=True, type=click.Choice(v.PROFILES),
              help="Only this profile's cases (repeatable; default both).")
@click.option("--quick", is_flag=True, help=f"Draw {QUICK_EXAMPLES} runs per pool instead of {EXAMPLES} (faster; "
                                            f"an item may be left unreached).")
@click.option("--kafka-version", metavar="VERSION", callback=release_option,
              help="Make the tree for this Kafka release (e.g. 2.6.3): every case replayed through the model as "
                   "that release, for a binding that declares it. Default: current Kafka.")
@click.option("--from-corpus", "corpora", multiple=True, type=click.Path(path_type=Path), callback=corpus_option,
              metavar="DIR", help="Add the failing runs stored in this corpus of `kpurgatory check --corpus DIR` as "
                                  "corpus cases (repeatable).")
def vectors_command(out, seed, profiles, quick, kafka_version, corpora):
    """Write the test vectors (specs/vectors.md) to OUT: the scenario corpus, coverage-directed generated runs, each
    Kafka finding's input class, each release rule's separating case and the failing runs of --from-corpus, as
    traces of the model's answers with what a driver needs to judge them. The same seed gives the same bytes.

    OUT must not exist, be empty, or hold an earlier vector tree (replaced). Exits 0, or 2 on a bad OUT, release or
    corpus."""
    if out.exists() and not out.is_dir():
        raise click.BadParameter(f"{safe(out)} is a file, not a directory", param_hint="OUT")
    if out.is_dir() and any(out.iterdir()) and not is_vector_tree(out):
        raise click.BadParameter(f"{safe(out)} is a non-empty directory without a vector tree's index.json: "
                                 f"refusing to write into it", param_hint="OUT")
    started = time.monotonic()
    tree = generate(seed, profiles or v.PROFILES, QUICK_EXAMPLES if quick else EXAMPLES,
                    progress=lambda message: click.echo(f"generating {message} ...", err=True),
                    kafka_version=kafka_version, corpora=corpora)
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
    release = f"Kafka {kafka_version}" if kafka_version else "current Kafka"
    click.echo(f"{len(tree.index['cases'])} cases for {release}, {written:,} bytes (index included) in {safe(out)}, "
               f"seed {seed}, {elapsed:.1f} s")
    for what, items in tree.uncovered.items():
        if items:
            click.echo(f"not reached ({what}): {'; '.join(items)}")  # items hold commas
    if tree.left_out:
        click.echo(f"left out (calls {release} lacks): {'; '.join(tree.left_out)}")


# ---------------------------------------------------------------------------------------------------------------
# Running a tree: the Python driver (the pytest plugin's vectors mode), judging from the cases alone
# ---------------------------------------------------------------------------------------------------------------

#: the environment a driver reads (specs/vectors.md)
ENV_TREE, ENV_OUT, ENV_RESULTS = "KPURGATORY_VECTORS", "KPURGATORY_VECTORS_OUT", "KPURGATORY_VECTORS_RESULTS"
ENV_CALL_TIMEOUT, CALL_TIMEOUT_MS = "KPURGATORY_VECTORS_CALL_TIMEOUT_MS", 10_000
NO_TREE = f"no vector tree: set {ENV_TREE}=DIR (make one with `kpurgatory vectors DIR`)"


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


def families_of(index: dict) -> dict[str, tuple[str, ...]]:
    """The tree's failure families in their order (a tree written before they were in the index: `FAMILIES`)."""
    return {name: tuple(words) for name, words in index["families"]} if "families" in index else FAMILIES


def call_timeout_s() -> float:
    """How long one call of a binding may take (``KPURGATORY_VECTORS_CALL_TIMEOUT_MS``), in seconds."""
    text = os.environ.get(ENV_CALL_TIMEOUT, str(CALL_TIMEOUT_MS))
    if not text.isdigit() or int(text) == 0:
        raise ValueError(f"{ENV_CALL_TIMEOUT} must be a whole number of milliseconds above 0, got {text!r}")
    return int(text) / 1000


def bounded(factory: Callable[[], SystemUnderTest]) -> Callable[[], SystemUnderTest]:
    """``factory`` with each call of its systems limited to `call_timeout_s`: an in-process system runs in a process
    of its own, killed when a call hangs (`ForkedSystem`); an adapter is bounded by its own time limit."""
    return time_limited(factory, call_timeout_s())


def skip_reason(entry: dict, hello: Hello) -> str | None:
    """Why this binding cannot run the case, or None."""
    if entry["profile"] not in hello.profiles:
        return f"the {entry['profile']} profile is not implemented"
    lacking = [name for name in entry["commands"] if name in hello.unsupported]
    if lacking:
        return f"uses {', '.join(lacking)}, which the implementation does not support"
    if entry["kafka_version"] != hello.declarations.kafka_version:
        return (f"the case is about {release_name(entry['kafka_version'])}; the implementation declares "
                f"{release_name(hello.declarations.kafka_version)}")
    return None


def release_name(version: str | None) -> str:
    return f"Kafka {version}" if version else "current Kafka"


def no_case_ran(results: Iterable[tuple[str, str | None]], declared: str | None, tree: str | None) -> str | None:
    """The failure of a run in which no case ran (``results``: each case's verdict and reason), with the skips
    counted by reason and, when the binding follows another release than the tree, the command that makes its tree;
    None when a case ran."""
    results = list(results)
    if any(verdict != "skip" for verdict, _ in results):
        return None
    reasons = Counter(reason for _, reason in results)
    lines = [f"no case of the vector tree ran: {len(results)} skipped"]
    lines += [f"  {number} x {reason}" for reason, number in sorted(reasons.items(), key=lambda item: -item[1])]
    if declared != tree:
        lines.append(f"the implementation declares {release_name(declared)}, the tree is for {release_name(tree)}: "
                     f"make its tree with `kpurgatory vectors DIR"
                     + (f" --kafka-version {declared}`" if declared else "` (no --kafka-version)"))
    return "\n".join(lines)


class Broken(Exception):
    """A step breaks the contract: ``str`` is the property and what breaks it."""

    def __init__(self, prop: str, message: str):
        super().__init__(f"{prop}: {message}")


def fail(prop: str, message: str):
    raise Broken(prop, message)


@attrs.define
class TimerContract:
    """The contract level of the timer profile as specs/vectors.md §5.2 states it, from the cases' ``expect``:
    pending task -> firing window [lo, hi] of its last add under the declared firing semantics."""

    declarations: Declarations
    now_ms: int
    pending: dict[str, list[int]] = attrs.field(factory=dict)
    #: tasks that left the timer since the last advance (what lazy_size lets size and shutdown still count)
    departed: list[str] = attrs.field(factory=list)
    judging: bool = True

    def judge(self, step: Step, observed: v.Observation) -> str | None:
        """What breaks the contract in the system's answer to ``step``, or None."""
        command = step.command
        try:
            if observed.error is not None and not isinstance(command, (v.TimerAdd, v.Watch)):
                fail("domain", f"{command.name} answered the error {observed.error}, which only timer_add and watch "
                               f"answer")
            getattr(self, f"on_{command.name}", self.on_read_out)(command, step.expect or {}, observed)
        except Broken as broken:
            return str(broken)
        return None

    def leave(self, name: str) -> list[int] | None:
        """Take ``name``'s entry out of the timer, if it has one; its window."""
        window = self.pending.pop(name, None)
        if window is not None:
            self.departed.append(name)
        return window

    def domain(self, command: v.Command, deadline_ms: int | None, delay_ms: int, observed: v.Observation) -> bool:
        """The domain of an entry due at ``deadline_ms`` after ``delay_ms``; True when it is accepted (an undefined
        one stops the judging)."""
        d = self.declarations
        if deadline_ms is None or deadline_ms > d.max_deadline_ms:
            treatment = d.beyond_max_deadline
        else:
            treatment = d.negative_delays if delay_ms < 0 and d.negative_delays != "run_at_once" else "accepted"
        rejected = observed.error == "delay_out_of_range"
        if treatment == "undefined":
            self.judging = False
            return False
        if (treatment == "rejected") != rejected:
            fail("domain", f"{command.name} with the deadline {deadline_ms} must be "
                           f"{'rejected with delay_out_of_range' if treatment == 'rejected' else 'accepted'}, "
                           f"observed error {observed.error!r}")
        if rejected and observed.events:
            fail("domain", f"a rejected {command.name} caused events")
        return not rejected

    def due(self, task: str) -> dict[str, list[int]]:
        """The pending entry of ``task`` a cancel or re-add may run, when the system declares runs_due_on_update
        and the entry's window is open."""
        window = self.pending.get(task)
        if self.declarations.runs_due_on_update and window is not None and window[0] <= self.now_ms:
            return {task: window}
        return {}

    def on_timer_add(self, command: v.TimerAdd, expect: dict, observed: v.Observation) -> None:
        due = self.due(command.task)
        if not self.domain(command, expect["deadline_ms"], command.delay_ms, observed):
            return
        if observed.error is not None:
            fail("domain", f"timer_add of {command.task!r} answered the error {observed.error}, though its deadline "
                           f"is inside the declared domain")
        self.leave(command.task)
        self.pending[command.task] = expect["windows"][self.declarations.firing]
        self.events(command, observed, due)

    def on_timer_cancel(self, command: v.TimerCancel, expect: dict, observed: v.Observation) -> None:
        due = self.due(command.task)
        self.leave(command.task)
        self.events(command, observed, due)

    def on_advance(self, command: v.Advance, expect: dict, observed: v.Observation) -> None:
        self.now_ms = command.to_ms
        self.events(command, observed)
        self.departed.clear()
        late = sorted(name for name, (_, hi) in self.pending.items() if hi is not None and hi <= self.now_ms)
        if late:
            fail("on_time", f"still pending after advance to {self.now_ms}: {', '.join(late)}")

    def on_size(self, command: v.Command, expect: dict, observed: v.Observation) -> None:
        self.events(command, observed)
        pending, lazy = len(self.pending), len(self.departed) if self.declarations.lazy_size else 0
        if type(observed.result) is not int or not pending <= observed.result <= pending + lazy:
            fail("counters", f"{command.name} {observed.result!r}, expected {pending}" + (f"..{pending + lazy}" * bool(lazy)))

    def on_shutdown(self, command: v.Shutdown, expect: dict, observed: v.Observation) -> None:
        self.events(command, observed)
        reported, pending = observed.result or [], set(self.pending)
        allowed = pending | (set(self.departed) if self.declarations.lazy_size else set())
        if len(set(reported)) != len(reported) or not pending <= set(reported) <= allowed:
            fail("counters", f"shutdown reported {sorted(reported)!r}, pending {sorted(pending)!r}")

    def on_read_out(self, command: v.Command, expect: dict, observed: v.Observation) -> None:
        self.events(command, observed)

    def events(self, command: v.Command, observed: v.Observation, due: dict[str, list[int]] | None = None) -> None:
        """Every event in order; ``due``: entries the command took out of the timer that may still run in it."""
        due = dict(due or {})
        for event in observed.events:
            if not isinstance(event, v.Run):
                fail("justified", f"{event.kind} is not a timer event")
            if due.pop(event.task, None) is not None:
                continue
            window = self.leave(event.task)
            if window is None:
                fail("exactly_once", f"task {event.task!r} ran but was not pending")
            if self.now_ms < window[0]:
                fail("on_time", f"task {event.task!r} ran at {self.now_ms}, before its window {window}")


@attrs.define
class TrackedOp:
    """An op as the purgatory's contract sees it: its first watch's ``ready_on`` and ``delay_ms``, what the last
    set_ready said (None: none yet) and whether it completed."""

    ready_on: int | None
    delay_ms: int
    ready: bool | None = None
    completed: bool = False

    def may_hold(self) -> bool:
        return self.ready if self.ready is not None else self.ready_on is not None


@attrs.define
class PurgatoryContract(TimerContract):
    """The contract level of the purgatory profile as specs/vectors.md §5.3 states it, from the cases' ``expect``:
    §5.2's tracker over the ops in the timer, each op's state, and per key the multisets of its live entries (ops
    not completed) and stale ones (completed ops a system may still list)."""

    ops: dict[str, TrackedOp] = attrs.field(factory=dict)
    live: dict[str, Counter] = attrs.field(factory=dict)
    stale: dict[str, Counter] = attrs.field(factory=dict)

    def entries(self, multisets: dict[str, Counter], key: str) -> Counter:
        return multisets.setdefault(key, Counter())

    def on_watch(self, command: v.Watch, expect: dict, observed: v.Observation) -> None:
        op = self.ops.setdefault(command.op, TrackedOp(command.ready_on, command.delay_ms or 0))
        if not command.keys:
            if observed.error != "empty_keys" or observed.events:
                fail("domain", f"a watch with no keys must be answered with the error empty_keys and no events, "
                               f"observed error {observed.error!r} and {len(observed.events)} events")
            return
        if not self.domain(command, expect["deadline_ms"], op.delay_ms, observed):
            return
        if observed.error is not None:
            fail("justified", f"watch of {command.op!r} answered the error {observed.error}, though its deadline is "
                              f"inside the declared domain")
        if op.completed:
            if expect.get("relist_completed"):
                for key in command.keys:
                    self.entries(self.stale, key)[command.op] += 1
        else:
            for key in command.keys:
                self.entries(self.live, key)[command.op] += 1
            self.leave(command.op)
            self.pending[command.op] = expect["windows"][self.declarations.firing]
        completions = self.events(command, observed)
        self.result(command, observed, any(event.op == command.op and event.via == "try" for event in completions))

    def on_set_ready(self, command: v.SetReady, expect: dict, observed: v.Observation) -> None:
        self.ops[command.op].ready = command.ready
        self.events(command, observed)

    def on_check(self, command: v.Check, expect: dict, observed: v.Observation) -> None:
        listed = Counter(self.live.get(command.key, ()))
        candidates = [op for op in listed if self.ops[op].ready]
        completed = {event.op for event in self.events(command, observed) if event.via == "check"}
        lost = [op for op in candidates if op not in completed]
        if lost:
            fail("no_lost_wakeup", f"check({command.key!r}) did not complete {', '.join(map(repr, lost))}, whose "
                                   f"condition holds and which is watched on that key")
        self.result(command, observed, len(completed))
        self.stale[command.key] = Counter({op: listed[op] - 1 for op in completed if listed[op] > 1})

    def on_cancel_key(self, command: v.CancelKey, expect: dict, observed: v.Observation) -> None:
        live, stale = self.live.pop(command.key, Counter()), self.stale.pop(command.key, Counter())
        returned = Counter(observed.result or [])
        if not live <= returned <= live + stale:
            fail("watcher_cleanup", f"cancel_key({command.key!r}) returned {sorted(returned.elements())}; the key's "
                                    f"entries are {sorted(live.elements())} plus possibly {sorted(stale.elements())}")
        for op in live:
            self.leave(op)
        self.events(command, observed)

    def on_force(self, command: v.Force, expect: dict, observed: v.Observation) -> None:
        was_completed = self.ops[command.op].completed
        self.events(command, observed)
        self.result(command, observed, not was_completed)

    def on_try(self, command: v.Try, expect: dict, observed: v.Observation) -> None:
        op = self.ops[command.op]
        must_complete = op.ready and not op.completed
        completed = any(event.op == command.op for event in self.events(command, observed))
        if must_complete and not completed:
            fail("no_lost_wakeup", f"try({command.op!r}) did not complete it although its condition holds")
        self.result(command, observed, completed)

    def on_cancel(self, command: v.Cancel, expect: dict, observed: v.Observation) -> None:
        self.leave(command.op)
        self.events(command, observed)

    def on_watched(self, command: v.Watched, expect: dict, observed: v.Observation) -> None:
        live = sum(sum(entries.values()) for entries in self.live.values())
        stale = sum(sum(entries.values()) for entries in self.stale.values())
        if not live <= (observed.result or 0) <= live + stale:
            fail("watcher_cleanup", f"watched() = {observed.result}; expected between {live} and {live + stale}")
        self.events(command, observed)

    on_delayed = TimerContract.on_size

    def on_watcher_keys(self, command: v.WatcherKeys, expect: dict, observed: v.Observation) -> None:
        live = {key for key, entries in self.live.items() if +entries}
        stale = {key for key, entries in self.stale.items() if +entries}
        if not live <= set(observed.result or ()) <= live | stale:
            fail("watcher_cleanup", f"watcher_keys() = {sorted(observed.result or ())}; expected the keys "
                                    f"{sorted(live)}, plus possibly {sorted(stale - live)}")
        self.events(command, observed)

    def result(self, command: v.Command, observed: v.Observation, expected: object) -> None:
        if observed.result != expected:
            fail("justified", f"{command.name} returned {observed.result!r}; its events imply {expected!r}")

    def events(self, command: v.Command, observed: v.Observation, due: dict | None = None) -> list[v.Complete]:
        """Every event in order; the completions."""
        completions = []
        for index, event in enumerate(observed.events):
            if isinstance(event, v.Complete):
                self.complete(command, event)
                completions.append(event)
            elif isinstance(event, v.Expire):
                if index == 0 or observed.events[index - 1] != v.Complete(event.op, "expire"):
                    fail("exactly_once", f"onExpiration of {event.op!r} not right after its completion by expiry")
            elif isinstance(event, v.Purge):
                if not isinstance(command, v.Advance):
                    fail("purge_rule", f"a purge during {command.name}; purges run only after a timer advance")
                self.stale.clear()
            elif isinstance(event, v.StaleTry):
                fail("justified", f"{command.name} called tryComplete on {event.op!r}, already completed "
                                  f"(KAFKA-17848)")
            else:
                fail("exactly_once", f"{event.kind} is not a purgatory event")
        return completions

    def complete(self, command: v.Command, event: v.Complete) -> None:
        op = self.ops.get(event.op)
        if op is None:
            fail("justified", f"completion of {event.op!r}, which was never watched")
        if op.completed:
            fail("exactly_once", f"{event.op!r} completed a second time (via {event.via})")
        if event.via in ("try", "check") and not op.may_hold():
            fail("justified", f"{event.op!r} completed via {event.via} but its condition never held")
        if not v.may_complete_via(command, event):
            fail("justified", f"{event.op!r} completed via {event.via} during {command.name}")
        if event.via == "check" and not self.live.get(command.key, {}).get(event.op):
            fail("justified", f"{event.op!r} completed via check of {command.key!r}, not a key it is watched on")
        window = self.leave(event.op)
        if event.via == "expire":
            if window is None:
                fail("justified", f"{event.op!r} expired but was not in the timer")
            if self.now_ms < window[0]:
                fail("on_time", f"op {event.op!r} expired at {self.now_ms}, before its window {window}")
        op.completed = True
        for key, entries in self.live.items():  # its entries turn stale
            if entries.get(event.op):
                self.entries(self.stale, key)[event.op] += entries.pop(event.op)


CONTRACTS = {"timer": TimerContract, "purgatory": PurgatoryContract}


@attrs.frozen
class CaseResult:
    path: str
    verdict: str  # pass, fail or skip
    reason: str | None = None
    step: int | None = None
    observed: str | None = None
    #: the Kafka finding the outcome is (reported as Kafka does)
    finding: str | None = None

    def to_json(self) -> dict:
        return attrs.asdict(self, filter=lambda field, value: value is not None or field.name != "finding")


def exact_judgement(step: Step, observed: v.Observation) -> str | None:
    groups = (step.expect or {}).get("groups")
    expected = attrs.evolve(step.observation, groups=tuple(groups) if groups else None)
    difference = exact_difference(step.command, expected, observed)
    return None if difference is None else str(difference)


def unanswered(error: BaseException) -> str:
    """How a binding failed to answer a call (specs/vectors.md §4): hung, crashed, or failed with its text."""
    if isinstance(error, AdapterTimedOut):
        return f"hung: {error.detail}"
    if isinstance(error, AdapterCrashed):
        return f"crashed: {error.detail}"
    return f"failed: {said(error)}"


def run_case(root: Path, entry: dict, system: SystemUnderTest, hello: Hello, level: str, out_dir: Path,
             families: dict[str, tuple[str, ...]] | None = None) -> tuple[CaseResult, str]:
    """Run one case on ``system`` (whose hello is ``hello``); the result and what to print (empty on a plain pass).
    ``families``: the tree's failure families (`families_of` its index; read from it when not given)."""
    path = entry["path"]
    if (why := skip_reason(entry, hello)) is not None:
        return CaseResult(path, "skip", why), ""
    trace = read_traces(root / path)[0]
    contract = None if level == "exact" else CONTRACTS[trace.header.profile](hello.declarations,
                                                                            trace.header.params.start_ms)
    answered: list[Step] = []
    problem = observed = error = None
    try:
        system.init(trace.header.profile, trace.header.params)
    except SYSTEM_ERRORS as failed:
        problem = f"init {unanswered(failed)}"
    for step in trace.steps if problem is None else ():
        if not v.supported(step.command, hello.features):
            answered.append(step)  # a read-out the system lacks is left out, as `kpurgatory check` leaves it
            continue
        try:
            observed = system.step(step.command)
        except SYSTEM_ERRORS as failed:
            error = failed
            answered.append(attrs.evolve(step, system=str(failed) if isinstance(failed, AdapterError) else said(failed)))
            problem = unanswered(failed)
            break
        answered.append(attrs.evolve(step, system=observed))
        problem = exact_judgement(step, observed) if contract is None else contract.judge(step, observed)
        if problem is not None or contract is not None and not contract.judging:
            break
    if problem is None:
        return CaseResult(path, "pass"), ""
    failing = answered[-1] if answered else None
    kafka = (failing.expect or {}).get("kafka") if failing is not None else None
    finding = None
    if kafka is not None:
        families = families_of(read_index(root)) if families is None else families
        if KafkaDoes.from_json(kafka).matches(None if error else observed, error, families):
            finding = kafka["finding"]
            problem = f"as Kafka does: {finding}: {problem}"
    if finding is not None and hello.declarations.kafka_version:
        return CaseResult(path, "pass", problem, finding=finding), safe(f"PASS {path}: {problem}")
    header = attrs.evolve(trace.header, implementation=hello.implementation, declarations=hello.declarations)
    observed_file = write_traces(out_dir / f"{entry['id']}.observed.jsonl", Trace(header, answered))
    where = f"step {failing.seq} ({format_command(failing.command)})" if failing else "init"
    lines = [f"FAIL {path} at {where}: {problem}"]
    if failing is not None:
        answer = failing.system if isinstance(failing.system, str) else format_observation(failing.system)
        lines += [f"  expected: {format_observation(failing.observation)}", f"  observed: {answer}"]
    lines += [f"  observed trace: {observed_file}",
              f"  replay with its HTML view: kpurgatory replay {observed_file} --level {level}"]
    return (CaseResult(path, "fail", problem, failing and failing.seq, str(observed_file), finding),
            safe("\n".join(lines)))


def results_document(driver: str, hello: Hello, level: str, results: list[CaseResult]) -> dict:
    return {"format": "kpurgatory-vector-results", "version": VERSION, "driver": driver,
            "implementation": hello.implementation, "level": level,
            "declarations": declarations_to_json(hello.declarations),
            "cases": [result.to_json() for result in sorted(results, key=lambda r: r.path)]}
