"""The vector tree's release, findings and corpus cases, and the Python driver's judging of them (specs/vectors.md
§1, §3-§5): a tree made for a Kafka release is that release's; Kafka's findings are reported as Kafka does; a
timer that runs a due entry inside a cancel passes only when it says so; a watch without keys must be refused; a
check's corpus becomes cases its system fails; a hang fails its case only; a run in which no case ran fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

from kpurgatory.conformance.adapters.reference import ModelSystem
from kpurgatory.conformance.adapters.sut import Hello
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.cli import main
from kpurgatory.conformance.tools import vectors
from kpurgatory.conformance.traces.codec import read_traces
from kpurgatory.conformance.traces.replay import replay
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import Declarations

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # planted.py
import planted  # noqa: E402

SEED = 3


def generate(out: Path, *options: str) -> str:
    result = CliRunner().invoke(main, ["vectors", str(out), "--quick", "--seed", str(SEED), *options])
    assert result.exit_code == 0, result.output
    return result.output


def cases(root: Path, **wanted) -> list[dict]:
    return [entry for entry in vectors.read_index(root)["cases"]
            if all(entry[name] == value for name, value in wanted.items())]


def run(root: Path, entry: dict, factory, level: str, out: Path) -> vectors.CaseResult:
    system = vectors.bounded(factory)()
    try:
        return vectors.run_case(root, entry, system, system.hello(), level, out)[0]
    finally:
        system.close()


@pytest.fixture(scope="module")
def timer_tree(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vectors") / "timer"
    generate(out, "--profile", "timer")
    return out


# --- a tree for a Kafka release ----------------------------------------------------------------------------------


def test_a_tree_for_a_release_is_that_releases_and_reproducible(tmp_path):
    current, old, again = tmp_path / "current", tmp_path / "3.9.0", tmp_path / "again"
    generate(current, "--profile", "purgatory")
    generate(old, "--profile", "purgatory", "--kafka-version", "3.9.0")
    generate(again, "--profile", "purgatory", "--kafka-version", "3.9.0")
    assert [path.read_bytes() for path in sorted(old.rglob("*.jsonl"))] == \
           [path.read_bytes() for path in sorted(again.rglob("*.jsonl"))]
    index = vectors.read_index(old)  # valid against the schema
    assert index["kafka_version"] == "3.9.0" and vectors.read_index(current)["kafka_version"] is None
    assert {entry["kafka_version"] for entry in index["cases"]} == {"3.9.0"}
    # KAFKA-18027's scenario: 3.9.0 lists a completed op watched again, current Kafka does not
    [rule] = cases(old, id="kafka.releases.KAFKA-18027")
    [trace] = read_traces(old / rule["path"])
    assert trace.header.declarations.kafka_version == "3.9.0"
    relisted = [step for step in trace.steps if (step.expect or {}).get("relist_completed")]
    assert relisted and all(isinstance(step.command, v.Watch) for step in relisted)
    [pinned] = read_traces(current / rule["path"])  # in a current tree, pinned to the release that has the rule
    assert pinned.header.declarations.kafka_version == "4.0.0"
    assert not any((step.expect or {}).get("relist_completed") for step in pinned.steps)
    assert [step.observation for step in pinned.steps] != [step.observation for step in trace.steps]


def test_a_release_the_model_does_not_describe_is_bad_input(tmp_path):
    for version in ("0.8.2.2", "three"):
        result = CliRunner().invoke(main, ["vectors", str(tmp_path / version), "--quick", "--kafka-version", version])
        assert result.exit_code == 2 and "--kafka-version" in result.output, result.output
        assert not (tmp_path / version).exists()


# --- Kafka's findings ----------------------------------------------------------------------------------------------


class KafkaPort(planted.KafkaLike):
    """Kafka's timer, bugs included, saying it follows Kafka 4.4.0."""

    def hello(self) -> Hello:
        return attrs.evolve(super().hello(), declarations=Declarations(kafka_version="4.4.0"))


def test_a_kafka_faithful_timer_fails_the_findings_as_kafka_does(timer_tree, tmp_path, monkeypatch):
    monkeypatch.setenv(vectors.ENV_CALL_TIMEOUT, "3000")  # the reinsertion livelock hangs, as Kafka's reaper spins
    findings = cases(timer_tree, kind="findings")
    assert findings and all(
        read_traces(timer_tree / entry["path"])[0].steps[-1].expect["kafka"]["finding"] == entry["finding"]
        for entry in findings)
    for level in ("exact", "contract"):
        for entry in findings:
            result = run(timer_tree, entry, planted.KafkaLike, level, tmp_path)
            if result.verdict == "pass":  # what Kafka does there is what the model does, at this level
                continue
            assert result.verdict == "fail" and result.finding == entry["finding"], result
            assert result.reason.startswith(f"as Kafka does: {entry['finding']}: "), result
    assert run(timer_tree, cases(timer_tree, id="finding.timer.interval-divides-by-zero")[0], planted.KafkaLike,
               "exact", tmp_path).finding == "interval-divides-by-zero"


def test_a_binding_that_follows_kafka_passes_its_findings(tmp_path, monkeypatch):
    monkeypatch.setenv(vectors.ENV_CALL_TIMEOUT, "3000")
    tree = tmp_path / "tree"
    generate(tree, "--profile", "timer", "--kafka-version", "4.4.0")
    results = [run(tree, entry, KafkaPort, "exact", tmp_path) for entry in cases(tree, kind="findings")]
    assert {result.verdict for result in results} == {"pass"}
    assert any(result.finding for result in results)
    document = vectors.results_document("python", KafkaPort().hello(), "exact", results)
    vectors.check_document("results", document, "results")


def test_a_failure_in_a_findings_case_that_is_not_kafkas_is_a_plain_failure(timer_tree, tmp_path):
    [entry] = cases(timer_tree, id="finding.timer.interval-divides-by-zero")

    class Garbles(ModelSystem):
        def step(self, command):
            raise KeyError("mine")

    result = run(timer_tree, entry, Garbles, "exact", tmp_path)
    assert result.verdict == "fail" and result.finding is None and result.reason == "failed: KeyError: 'mine'"


# --- runs_due_on_update ------------------------------------------------------------------------------------------


class RunsDueOnCancel:
    """A plain timer that fires an entry at its deadline, and runs a due one (its tick begun) when it is cancelled
    or added again, as Caffeine's wheel does."""

    def __init__(self, declare: bool = False):
        self.declare = declare

    def hello(self) -> Hello:
        return Hello("runs-due-on-cancel", ("timer",),
                     declarations=Declarations(runs_due_on_update=self.declare))

    def init(self, profile, params):
        self.tick, self.now, self.pending = params.tick_ms, params.start_ms, {}

    def step(self, command):
        events = []
        if isinstance(command, (v.TimerAdd, v.TimerCancel)):
            deadline = self.pending.pop(command.task, None)
            if deadline is not None and deadline - deadline % self.tick <= self.now:
                events.append(v.Run(command.task))
            if isinstance(command, v.TimerAdd):
                self.pending[command.task] = self.now + command.delay_ms
        elif isinstance(command, v.Advance):
            self.now = command.to_ms
            events = [v.Run(task) for task, deadline in sorted(self.pending.items()) if deadline <= self.now]
            for event in events:
                del self.pending[event.task]
        elif isinstance(command, v.Size):
            return v.Observation(result=len(self.pending))
        elif isinstance(command, v.Shutdown):
            pending, self.pending = sorted(self.pending), {}
            return v.Observation(result=pending)
        return v.Observation(events=tuple(events))

    def close(self):
        pass


DUE = [v.TimerAdd("t", 15), v.TimerAdd("u", 16), v.Advance(12), v.TimerCancel("t"), v.TimerAdd("u", 16),
       v.Advance(70), v.Size(), v.Shutdown()]


@pytest.mark.parametrize("declare", [False, True])
def test_running_a_due_entry_on_cancel_passes_only_when_declared(tmp_path, declare):
    case = vectors.vector_trace("due", "timer", v.Params(10, 8, 0, 1000), DUE, "scenarios")
    tree = tmp_path / "tree"
    vectors.write_tree(tree, vectors.tree_of([case]))
    [entry] = cases(tree)
    result = vectors.run_case(tree, entry, RunsDueOnCancel(declare), RunsDueOnCancel(declare).hello(), "contract",
                              tmp_path)[0]
    report = replay(case, RunsDueOnCancel(declare), "contract", declarations=RunsDueOnCancel(declare).hello()
                    .declarations, features=())
    if declare:
        assert result.verdict == "pass" and report.ok, (result, report.first_failure)
    else:
        assert result.verdict == "fail" and result.step == 4 and result.reason.startswith("exactly_once"), result
        assert report.first_failure.seq == 4 and "exactly_once" in str(report.first_failure.failures[0])


# --- a watch without keys ----------------------------------------------------------------------------------------


class WatchesNoKeys(ModelSystem):
    """Accepts a watch of no keys (Kafka throws IllegalArgumentException)."""

    def step(self, command):
        if isinstance(command, v.Watch) and not command.keys:
            return v.Observation(result=False)
        return super().step(command)


def test_a_watch_without_keys_that_is_accepted_breaks_the_domain(tmp_path):
    case = vectors.vector_trace("no-keys", "purgatory", v.Params(1, 8, 0, 1000),
                                [v.Watch("o", (), 100, None), v.Watch("o", ("k",)), v.Advance(200)], "scenarios")
    assert case.steps[0].observation.error == "empty_keys" and "deadline_ms" not in (case.steps[0].expect or {})
    tree = tmp_path / "tree"
    vectors.write_tree(tree, vectors.tree_of([case]))
    [entry] = cases(tree)
    for system, verdict in ((WatchesNoKeys, "fail"), (ModelSystem, "pass")):
        result = vectors.run_case(tree, entry, system(), system().hello(), "contract", tmp_path)[0]
        assert result.verdict == verdict, result
        report = replay(case, system(), "contract")
        assert report.ok == (verdict == "pass")
    assert result.reason is None
    failed = vectors.run_case(tree, entry, WatchesNoKeys(), WatchesNoKeys().hello(), "contract", tmp_path)[0]
    assert failed.step == 1 and failed.reason.startswith("domain: a watch with no keys"), failed
    assert [failure.what.prop for failure in replay(case, WatchesNoKeys(), "contract").first_failure.failures] == \
           ["domain"]


# --- cases from a check's corpus ---------------------------------------------------------------------------------


def test_a_checks_corpus_becomes_cases_its_system_fails(tmp_path):
    corpus = tmp_path / "corpus"
    found = run_check(planted.TwoBugs, profile="timer", examples=60, seed=1, corpus=corpus, out_dir=tmp_path / "out")
    assert not found.passed and list(corpus.glob("*.jsonl"))
    tree = tmp_path / "tree"
    generate(tree, "--profile", "timer", "--from-corpus", str(corpus))
    stored = cases(tree, kind="corpus")
    assert stored and all(entry["id"].startswith("corpus.timer.") and entry["id"][-2:] == "-1" for entry in stored)
    again = tmp_path / "again"
    generate(again, "--profile", "timer", "--from-corpus", str(corpus))
    assert cases(again, kind="corpus") == stored
    for entry in stored:
        for level in ("exact", "contract"):
            assert run(tree, entry, ModelSystem, level, tmp_path).verdict == "pass"
        assert run(tree, entry, planted.TwoBugs, "exact", tmp_path).verdict == "fail"


def test_a_corpus_that_is_not_one_is_bad_input(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "run.jsonl").write_text("not json\n")
    for corpus in (tmp_path / "missing", tmp_path / "bad"):
        result = CliRunner().invoke(main, ["vectors", str(tmp_path / "tree"), "--quick", "--from-corpus", str(corpus)])
        assert result.exit_code == 2 and str(corpus) in result.output.replace("\n", ""), result.output


# --- a hang, and a run in which no case ran ----------------------------------------------------------------------


def advances_after_a_cancel(root: Path, entry: dict) -> bool:
    names = [step.command.name for step in read_traces(root / entry["path"])[0].steps]
    return "timer_cancel" in names and "advance" in names[names.index("timer_cancel"):]


def test_a_hang_fails_its_case_and_only_its_case(timer_tree, tmp_path, monkeypatch):
    monkeypatch.setenv(vectors.ENV_CALL_TIMEOUT, "1000")
    [hangs] = [entry for entry in cases(timer_tree, profile="timer") if advances_after_a_cancel(timer_tree, entry)][:1]
    plain = [entry for entry in cases(timer_tree, profile="timer") if "timer_cancel" not in entry["commands"]
             and "wheel" not in entry["commands"] and entry["kind"] != "findings"][:2]
    results = [run(timer_tree, entry, planted.HangsInAdvance, "exact", tmp_path) for entry in [hangs, *plain]]
    assert [result.verdict for result in results] == ["fail", "pass", "pass"], results
    assert results[0].reason == "hung: no answer to advance within 1 s; its process was killed"
    observed = read_traces(results[0].observed)[0].steps[-1]
    assert observed.system.startswith("system timed out: no answer to advance")  # replay judges it a hang


VECTORS_TEST = '''
from kpurgatory.conformance.adapters.reference import ModelSystem
from kpurgatory.conformance.adapters.sut import Hello
from kpurgatory.model.contract import Declarations

class Port(ModelSystem):
    def hello(self):
        return Hello("port", ("timer", "purgatory"), declarations=Declarations(kafka_version="3.9.0"))

def test_vectors(kpurgatory_vector):
    kpurgatory_vector(Port)
'''


def test_a_run_in_which_no_case_ran_fails_naming_the_tree_to_make(timer_tree, tmp_path):
    (tmp_path / "test_port.py").write_text(VECTORS_TEST)
    completed = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "0",
                                "--kpurgatory-vectors", str(timer_tree), "test_port.py"],
                               capture_output=True, text=True, cwd=tmp_path, timeout=300,
                               env={**os.environ, "PYTEST_ADDOPTS": ""})
    assert completed.returncode == 1, completed.stdout[-3000:]
    assert "no case of the vector tree ran" in completed.stdout
    assert "`kpurgatory vectors DIR --kafka-version 3.9.0`" in completed.stdout
    results = json.loads(json.dumps(vectors.no_case_ran([("skip", "a"), ("skip", "a")], None, None)))
    assert results == "no case of the vector tree ran: 2 skipped\n  2 x a"
    assert vectors.no_case_ran([("skip", "a"), ("pass", None)], "3.9.0", None) is None
