"""`kpurgatory vectors`: the tree is deterministic, every case is the model's and says what it covers, the index
matches the files, and the pytest plugin's vectors mode (the Python driver of specs/vectors.md) passes the builtin
implementation and fails broken copies naming the case."""

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.check.coverage import ITEMS
from kpurgatory.conformance.check.findings import FINDINGS
from kpurgatory.conformance.cli import main
from kpurgatory.conformance.tools import vectors
from kpurgatory.conformance.traces.codec import MODEL, dumps, read_traces
from kpurgatory.conformance.traces.replay import replay
from kpurgatory.model import vocabulary as v

SEED = 7
KPURGATORY = str(Path(sys.executable).parent / "kpurgatory")


def generate(out: Path, *options: str):
    result = CliRunner().invoke(main, ["vectors", str(out), "--quick", "--seed", str(SEED), *options])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("vectors") / "tree"
    return out, generate(out)


@pytest.fixture(scope="module")
def tree(generated) -> Path:
    return generated[0]


def files(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_two_generations_with_one_seed_are_byte_identical(tree, tmp_path):
    generate(tmp_path / "again")
    assert files(tmp_path / "again") == files(tree)


def test_the_index_is_valid_and_matches_the_files(tree):
    index = vectors.read_index(tree)  # validated against specs/vectors.schema.json
    entries = index["cases"]
    assert index["seed"] == SEED and entries == sorted(entries, key=lambda entry: entry["path"])
    assert {entry["path"] for entry in entries} == set(files(tree)) - {"index.json"}
    assert len({entry["id"] for entry in entries}) == len(entries)
    kinds = {(entry["profile"], entry["kind"]) for entry in entries}
    assert kinds == {("timer", "scenarios"), ("timer", "coverage"), ("timer", "findings"),
                     ("purgatory", "scenarios"), ("purgatory", "coverage"), ("purgatory", "releases")}
    for entry in entries:
        data = (tree / entry["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        [trace] = read_traces(tree / entry["path"])  # every line valid against specs/kpurgatory.schema.json
        assert dumps(trace).encode() == data  # the codec writes back what it read: vector and expect included
        header = trace.header
        assert entry["path"] == f"1/{header.profile}/{header.vector['kind']}/{trace.trace_id}.jsonl"
        assert (entry["id"], entry["profile"], entry["kind"], entry["steps"]) == \
               (trace.trace_id, header.profile, header.vector["kind"], len(trace.steps))
        assert entry["commands"] == sorted({step.command.name for step in trace.steps})
        assert entry["kafka_version"] == header.declarations.kafka_version
        assert (entry["kafka_version"] is not None) == (entry["kind"] == "releases") == (header.vector["rule"]
                                                                                         is not None)
        assert (entry["finding"] is not None) == (entry["kind"] == "findings")


def test_every_case_is_the_models_own_run_with_its_expectations(tree):
    for entry in vectors.read_index(tree)["cases"]:
        [trace] = read_traces(tree / entry["path"])
        assert trace.header.implementation == MODEL
        assert replay(trace).ok, entry["path"]
        for step in trace.steps:
            expect = step.expect or {}
            assert sum(expect.get("groups", ())) == len(step.observation.events)
            if isinstance(step.command, v.TimerAdd) or isinstance(step.command, v.Watch) and step.command.keys:
                assert "deadline_ms" in expect and ("windows" in expect) == (expect["deadline_ms"] is not None)
            else:
                assert not {"deadline_ms", "windows", "relist_completed"} & set(expect)


def test_every_coverage_item_and_finding_has_a_case_or_is_reported(generated):
    tree, output = generated
    index = vectors.read_index(tree)["cases"]
    reported = {what: items.split("; ") for what, items in re.findall(r"not reached \((\w+)\): (.+)", output)}
    for profile in v.PROFILES:
        covered = {item for entry in index if entry["profile"] == profile and entry["kind"] == "coverage"
                   for item in read_traces(tree / entry["path"])[0].header.vector["covers"]}
        assert covered | set(reported.get(profile, ())) == set(ITEMS[profile])
        assert not covered & set(reported.get(profile, ()))
    found = {entry["finding"] for entry in index if entry["kind"] == "findings"}
    assert found | set(reported.get("findings", ())) == {finding.name for finding in FINDINGS}
    assert "deadline-wraps" in found  # the quick tree's pool may miss the rarer input classes


def test_a_folder_that_is_not_a_vector_tree_is_refused(tmp_path, tree):
    (tmp_path / "notes.txt").write_text("mine")
    for out in (tmp_path, tmp_path / "notes.txt"):
        result = CliRunner().invoke(main, ["vectors", str(out), "--quick"])
        assert result.exit_code == 2 and "OUT" in result.output, result.output
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert vectors.is_vector_tree(tree)


VECTORS_TEST = '''
import pytest
from kpurgatory.conformance.adapters.builtin import factory
from kpurgatory.conformance.tools import mutants

@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("system", SYSTEMS)
def test_vectors(kpurgatory_vector, system, level):
    kpurgatory_vector(factory if system == "builtin" else getattr(mutants, system), level)
'''


def run_vectors_mode(tmp_path: Path, tree: Path, systems: list[str], levels: list[str]):
    test = tmp_path / "test_mine.py"
    test.write_text(f"LEVELS = {levels!r}\nSYSTEMS = {systems!r}\n{VECTORS_TEST}")
    env = {**os.environ, vectors.ENV_RESULTS: str(tmp_path / "results.json"), vectors.ENV_OUT: str(tmp_path / "out")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", str(test),
                           "--kpurgatory-vectors", str(tree)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)


def test_the_pytest_vectors_mode_passes_the_builtin_implementation(tmp_path, tree):
    completed = run_vectors_mode(tmp_path, tree, ["builtin"], ["exact", "contract"])
    assert completed.returncode == 0, completed.stdout[-4000:]
    entries = vectors.read_index(tree)["cases"]
    pinned = [entry for entry in entries if entry["kafka_version"]]
    assert f"{2 * len(entries) - len(pinned) * 2} passed" in completed.stdout  # the purgatory at both levels
    assert f"{2 * len(pinned)} skipped" in completed.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    vectors.check_document("results", results, "results.json")
    assert results["driver"] == "python" and results["implementation"].startswith("kpurgatory.impl")
    assert {case["verdict"] for case in results["cases"]} == {"pass", "skip"}


@pytest.mark.parametrize("mutant", ["expired_on_add_off_by_one", "cancel_leaves_entry"])
def test_the_pytest_vectors_mode_fails_a_broken_copy_naming_the_case(tmp_path, tree, mutant):
    completed = run_vectors_mode(tmp_path, tree, [mutant], ["exact", "contract"])
    assert completed.returncode == 1, completed.stdout[-4000:]
    failed = re.findall(r"FAILED \S+::test_vectors\[(\S+)-\w+-(exact|contract)\]", completed.stdout)
    assert {level for _, level in failed} == {"exact", "contract"}, completed.stdout[-4000:]
    for case_id, level in failed:
        [entry] = [entry for entry in vectors.read_index(tree)["cases"] if entry["id"] == case_id]
        observed = tmp_path / "out" / f"{case_id}.observed.jsonl"
        assert f"FAIL {entry['path']} at step " in completed.stdout
        assert f"kpurgatory replay {observed} --level {level}" in completed.stdout
        # the observed trace shows the failure by itself: replayed, the system's recorded answers fail
        replayed = subprocess.run([KPURGATORY, "replay", str(observed), "--level", level], capture_output=True,
                                  text=True, cwd=tmp_path, timeout=120)
        assert replayed.returncode == 1, replayed.stdout[-2000:]
