"""The JavaScript vector driver (conformance/drivers/javascript) as the npm package kpurgatory-vectors: `npm pack`
ships its own files only, and a user's project outside the repository installs the tarball, binds node-timer's
wheel (conformance/examples/node-timer) and the npm package timer-wheel (conformance/examples/pypi/npm-timer-wheel,
the package from the npm registry) beside the stdio binding, and runs the vectors with `node --test`: every
applicable vector passes through the stdio binding on the built-in implementation, and the registry bindings give
their documented verdicts. The driver's own folder, run in place, fails a broken copy with the case named in node's
own output."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
EXAMPLES = CONFORMANCE / "examples"
DRIVER = CONFORMANCE / "drivers" / "javascript"
NODE_TIMER = EXAMPLES / "node-timer"
TIMER_WHEEL = EXAMPLES / "pypi" / "npm-timer-wheel"
PACKAGE = json.loads((DRIVER / "package.json").read_text())
STDIO = [sys.executable, "-m", "kpurgatory.conformance.adapters.stdio"]
BUILTIN = "kpurgatory.conformance.adapters.builtin:factory"
#: the user's test file: the binding KPURGATORY_BINDING names, its modules beside it
USER_TEST = """\
import { run, stdio } from "kpurgatory-vectors";
import nodeTimer from "./node-timer/binding.js";
import timerWheel from "./npm-timer-wheel/binding.js";

await run({ stdio, "node-timer": nodeTimer, "npm-timer-wheel": timerWheel }[process.env.KPURGATORY_BINDING]);
"""

pytestmark = pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                                reason="needs node and npm")


def npm(folder: Path, *args: str) -> None:
    done = subprocess.run(["npm", *args, "--no-audit", "--no-fund"], cwd=folder, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="session")
def tarball(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pack")
    npm(DRIVER, "pack", "--pack-destination", str(out))
    return out / f"{PACKAGE['name']}-{PACKAGE['version']}.tgz"


def test_the_tarball_holds_the_package_files_only(tarball):
    with tarfile.open(tarball) as tar:
        assert set(tar.getnames()) == {f"package/{name}" for name in
                                       ["package.json", "README.md", "index.js", "driver.js", "stdio.js"]}


@pytest.fixture(scope="session")
def user_project(tarball, tmp_path_factory) -> Path:
    """A project in a temporary folder: its package.json, the bindings' modules, the package installed from the
    tarball and timer-wheel from the npm registry (the example's version), its test file."""
    project = tmp_path_factory.mktemp("user-project")
    (project / "package.json").write_text(json.dumps({"name": "my-timers", "private": True}))
    (project / "node-timer").mkdir()
    for name in ("binding.js", "timer.js"):
        shutil.copy(NODE_TIMER / name, project / "node-timer")
    (project / "npm-timer-wheel").mkdir()
    shutil.copy(TIMER_WHEEL / "binding.js", project / "npm-timer-wheel")
    version = json.loads((TIMER_WHEEL / "package.json").read_text())["dependencies"]["timer-wheel"]
    npm(project, "install", "--save-dev", "--save-exact", str(tarball), f"timer-wheel@{version}")
    (project / "vectors.test.mjs").write_text(USER_TEST)
    return project


@pytest.fixture(scope="session")
def installed() -> None:
    """The driver's folder, for its own runs in place, and the npm timer-wheel adapter's, for its own test."""
    for folder in (DRIVER, TIMER_WHEEL):
        npm(folder, "ci")


def run_driver(project: Path, tree: Path, out: Path, binding: str, adapter: str | None = None,
               level: str = "exact"):
    """node --test with the binding; returns (exit code, node's output, the results file's cases by path)."""
    results = out / "results.json"
    env = {**os.environ, "KPURGATORY_VECTORS": str(tree), "KPURGATORY_BINDING": binding, "KPURGATORY_LEVEL": level,
           "KPURGATORY_VECTORS_OUT": str(out), "KPURGATORY_VECTORS_RESULTS": str(results)}
    if adapter is not None:
        env["KPURGATORY_ADAPTER"] = shlex.join([*STDIO, adapter])
    done = subprocess.run(["node", "--test"], cwd=project, env=env, capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert results.exists(), output[-3000:]
    cases = {case["path"]: case for case in json.loads(results.read_text())["cases"]}
    # node's own closing counts agree with the results file
    for word, verdict in (("pass", "pass"), ("fail", "fail"), ("skipped", "skip")):
        assert f"# {word} {sum(case['verdict'] == verdict for case in cases.values())}\n" in output
    return done.returncode, output, cases


def index(tree: Path) -> list[dict]:
    return json.loads((tree / "index.json").read_text())["cases"]


def test_every_vector_passes_on_the_builtin_implementation(vector_tree, user_project, tmp_path):
    code, output, cases = run_driver(user_project, vector_tree, tmp_path, "stdio", BUILTIN)
    assert code == 0, output[-3000:]
    assert set(cases) == {case["path"] for case in index(vector_tree)}
    # only the cases pinned to a Kafka release are not for the current one
    pinned = {case["path"] for case in index(vector_tree) if case["kafka_version"]}
    assert {path for path, case in cases.items() if case["verdict"] != "pass"} == pinned
    assert all(cases[path]["reason"].startswith("pinned to Kafka") for path in pinned)


@pytest.mark.parametrize("mutant", ["expired_on_add_off_by_one", "cancel_leaves_entry"])
def test_a_broken_copy_fails_naming_the_case(vector_tree, installed, tmp_path, mutant):
    code, output, cases = run_driver(DRIVER, vector_tree, tmp_path, "stdio",
                                     f"kpurgatory.conformance.tools.mutants:{mutant}")
    failed = [case for case in cases.values() if case["verdict"] == "fail"]
    assert code == 1 and failed
    first = failed[0]
    # node's own report names the case, the step, and the command that replays the observed run
    assert "not ok" in output and first["path"] in output
    assert f"failed at step {first['step']}" in output
    assert f"kpurgatory replay {first['observed']} --level exact" in output
    # the observed run replays as the same failure
    replayed = CliRunner().invoke(main, ["replay", first["observed"], "--level", "exact"])
    assert replayed.exit_code == 1, replayed.output


def test_the_contract_level_catches_a_task_run_a_tick_early(vector_tree, installed, tmp_path):
    code, output, cases = run_driver(DRIVER, vector_tree, tmp_path, "stdio",
                                     "kpurgatory.conformance.tools.mutants:expired_on_add_off_by_one", "contract")
    failed = [case for case in cases.values() if case["verdict"] == "fail"]
    assert code == 1 and failed and all("before its window" in case["reason"] for case in failed)
    # the purgatory's contract is the Python harness's to judge, and the skip says so
    assert all("kpurgatory check/replay --level contract" in case["reason"] for case in cases.values()
               if case["path"].startswith("1/purgatory/"))
    assert f"kpurgatory replay {failed[0]['observed']} --level contract" in output


def test_node_timer_passes_every_timer_vector_exactly(vector_tree, user_project, tmp_path):
    code, output, cases = run_driver(user_project, vector_tree, tmp_path, "node-timer")
    assert code == 0, output[-3000:]
    timer = {case["path"] for case in index(vector_tree) if case["profile"] == "timer" and not case["kafka_version"]}
    assert {path for path, case in cases.items() if case["verdict"] == "pass"} == timer
    assert all(case["reason"] == "profile purgatory is not implemented" for case in cases.values()
               if case["path"].startswith("1/purgatory/"))


def test_npm_timer_wheel_is_only_ever_late(vector_tree, user_project, tmp_path):
    """FINDINGS.md, npm timer-wheel: it fails the contract by firing late (a due task parked in bucket 0, a sweep
    skipped when the bucket index wraps, its 32-bit local time), never early, twice, after a cancel, or with a
    wrong size."""
    code, output, cases = run_driver(user_project, vector_tree, tmp_path, "npm-timer-wheel")
    failed = [case for case in cases.values() if case["verdict"] == "fail"]
    assert code == 1 and failed
    assert all("still pending after advance" in case["reason"] for case in failed), \
        [case["reason"] for case in failed if "still pending after advance" not in case["reason"]]
    # Kafka's own test of already expired tasks: run on add by Kafka, parked in bucket 0 by the package (bug 1)
    expired = cases["1/timer/scenarios/kafka.TimerTest.testAlreadyExpiredTask.jsonl"]
    assert expired["verdict"] == "fail" and expired["step"] == 6
    assert all(case["reason"] == "profile purgatory is not implemented" for case in cases.values()
               if case["path"].startswith("1/purgatory/"))


@pytest.mark.parametrize("adapter", [NODE_TIMER, TIMER_WHEEL], ids=["node-timer", "npm-timer-wheel"])
def test_the_adapters_answer_a_batch_as_one_request_at_a_time(installed, adapter):
    """Each adapter's own node:test (adapter.test.js): a batch's answers are the requests' answers alone, skipped
    after a failure up to the next init."""
    done = subprocess.run(["node", "--test"], cwd=adapter, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "# pass 1\n" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
