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
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main

sys.path.insert(0, str(Path(__file__).parent))  # small_trees.py
from small_trees import boom_tree, subtree  # noqa: E402

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
EXAMPLES = CONFORMANCE / "examples"
DRIVER = CONFORMANCE / "drivers" / "javascript"
NODE_TIMER = EXAMPLES / "node-timer"
TIMER_WHEEL = EXAMPLES / "pypi" / "npm-timer-wheel"
PACKAGE = json.loads((DRIVER / "package.json").read_text())
STDIO = [sys.executable, "-m", "kpurgatory.conformance.adapters.stdio"]
BUILTIN = "kpurgatory.conformance.adapters.builtin:factory"
MISBEHAVING = Path(__file__).resolve().parents[1] / "conformance" / "misbehaving_adapter.py"
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
                                       ["package.json", "README.md", "index.js", "driver.js", "stdio.js",
                                        "isolated.js"]}


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
               level: str = "exact", **settings: str):
    """node --test with the binding (and more environment variables, ``settings``); returns (exit code, node's
    output, the results file's cases by path). ``adapter`` is an adapter's factory, or a shell command (with a
    space)."""
    results = out / "results.json"
    env = {**os.environ, "KPURGATORY_VECTORS": str(tree), "KPURGATORY_BINDING": binding, "KPURGATORY_LEVEL": level,
           "KPURGATORY_VECTORS_OUT": str(out), "KPURGATORY_VECTORS_RESULTS": str(results), **settings}
    if adapter is not None:
        env["KPURGATORY_ADAPTER"] = adapter if " " in adapter else shlex.join([*STDIO, adapter])
    done = subprocess.run(["node", "--test"], cwd=project, env=env, capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert results.exists(), output[-3000:]
    cases = {case["path"]: case for case in json.loads(results.read_text())["cases"]}
    # node's own closing counts agree with the results file (and the test "no case ran" fails when none did)
    nothing_ran = all(case["verdict"] == "skip" for case in cases.values())
    for word, verdict in (("pass", "pass"), ("fail", "fail"), ("skipped", "skip")):
        count = sum(case["verdict"] == verdict for case in cases.values()) + (word == "fail" and nothing_ran)
        assert f"# {word} {count}\n" in output, output[-3000:]
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
    assert f"kpurgatory replay {failed[0]['observed']} --level contract" in output


def test_purgatory_cases_are_judged_at_the_contract_level(vector_tree, installed, tmp_path):
    code, output, cases = run_driver(DRIVER, vector_tree, tmp_path, "stdio", BUILTIN, "contract")
    assert code == 0, output[-3000:]
    assert {case["verdict"] for path, case in cases.items()
            if path.startswith("1/purgatory/") and "/releases/" not in path} == {"pass"}


def test_a_purgatory_mutant_fails_the_contract_naming_the_property(vector_tree, installed, tmp_path):
    code, output, cases = run_driver(DRIVER, vector_tree, tmp_path, "stdio",
                                     "kpurgatory.conformance.tools.mutants:double_completion", "contract")
    failed = [case for case in cases.values() if case["verdict"] == "fail"]
    assert code == 1 and failed
    assert all(case["reason"].startswith("exactly_once: ") and "completed a second time" in case["reason"]
               for case in failed), failed
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


#: a plain timer (a map of deadlines) as a binding module at the contract level, misbehaving as MISBEHAVE says on the
#: task "boom": its add recurses without end, or an advance with it pending never returns (a synchronous loop); or,
#: with "divide", every add past 2^62 ms fails as a Java port of Kafka's wheel does there; with "late" ("early") an
#: advance runs the tasks due before it (up to 1 ms after it). It declares KAFKA_VERSION and FIRING, if set.
PLAIN_TIMER = """\
"use strict";
const MISBEHAVE = process.env.MISBEHAVE || "";
const deeper = (n) => deeper(n + 1) + 1;

module.exports = {
  name: "plain timer",
  level: "contract",
  declarations: { ...(process.env.KAFKA_VERSION ? { kafka_version: process.env.KAFKA_VERSION } : {}),
    ...(process.env.FIRING ? { firing: process.env.FIRING } : {}) },
  create(profile, params, emit) {
    const due = new Map();
    let now = params.start_ms;
    return {
      add(task, delayMs) {
        if (MISBEHAVE === "recurse" && task === "boom") deeper(0);
        if (MISBEHAVE === "divide" && now > 2n ** 62n) throw new Error("java.lang.ArithmeticException: / by zero");
        due.delete(task);
        if (delayMs <= 0n) emit({ event: "run", task });
        else due.set(task, now + delayMs);
      },
      cancel: (task) => due.delete(task),
      advance(toMs) {
        while (MISBEHAVE === "hang" && due.has("boom")); // never returns
        now = toMs;
        const upTo = { late: toMs - 1n, early: toMs + 1n }[MISBEHAVE] ?? toMs;
        for (const [task] of [...due].filter(([, at]) => at <= upTo).sort(([, a], [, b]) => (a < b ? -1 : a > b))) {
          due.delete(task);
          emit({ event: "run", task });
        }
      },
      size: () => due.size,
      shutdown: () => [...due.keys()],
    };
  },
};
"""


def plain_timer(tmp: Path) -> str:
    (tmp / "plain-timer.js").write_text(PLAIN_TIMER)
    return str(tmp / "plain-timer.js")


def report(what: str, started: float, output: str, cases: dict) -> None:
    """The wall time and, per case, node's line about it and its verdict."""
    out = output.splitlines()
    lines = [line.strip() for number, line in enumerate(out)
             if line.startswith(("ok ", "not ok ")) or number and out[number - 1].endswith("error: |-")]
    print(f"{what}: {time.monotonic() - started:.1f} s (node --test)", *lines,
          *(f"{path}: {case['verdict']} {case['reason'] or ''}" for path, case in cases.items()), sep="\n  ")


def test_a_binding_that_overflows_its_stack_fails_that_case_only(installed, tmp_path):
    started = time.monotonic()
    code, output, cases = run_driver(DRIVER, boom_tree(tmp_path / "tree"), tmp_path, plain_timer(tmp_path),
                                     MISBEHAVE="recurse")
    report("stack overflow", started, output, cases)
    by = {path.split("/")[-1]: case for path, case in cases.items()}
    assert code == 1 and by["1.boom.jsonl"]["step"] == 2
    assert by["1.boom.jsonl"]["reason"] == "failed: RangeError: Maximum call stack size exceeded"
    assert [case["verdict"] for name, case in sorted(by.items()) if name != "1.boom.jsonl"] == ["pass"] * 4


def test_a_call_that_never_returns_fails_as_hung_and_the_run_goes_on(installed, tmp_path):
    started = time.monotonic()
    code, output, cases = run_driver(DRIVER, boom_tree(tmp_path / "tree"), tmp_path, plain_timer(tmp_path),
                                     MISBEHAVE="hang", KPURGATORY_VECTORS_CALL_TIMEOUT_MS="2000")
    report("hung advance", started, output, cases)
    by = {path.split("/")[-1]: case for path, case in cases.items()}
    assert code == 1 and by["1.boom.jsonl"]["step"] == 3
    assert by["1.boom.jsonl"]["reason"] == "hung: no answer to advance within 2 s"
    # the cases after it ran in a new worker: the one spinning was terminated
    assert [case["verdict"] for name, case in sorted(by.items()) if name != "1.boom.jsonl"] == ["pass"] * 4


@pytest.mark.parametrize("misbehave, firing, step, reason", [
    ("late", "never_early_up_to_tick_late", None, None),  # hi null: never late, even after an advance to 2^63-1
    ("late", "kafka", 3, 'on_time: still pending after advance to 9223372036854775807, past their window: ["max"]'),
    ("early", "never_early_up_to_tick_late", 2,  # lo kept
     'on_time: task "max" ran at 9223372036854775806, before its window [9223372036854775807,null] opened')])
def test_a_window_ending_past_long_max_is_never_late(installed, far_deadline_tree, tmp_path, misbehave, firing, step,
                                                    reason):
    """A window whose hi is null (its end past 2^63-1, specs/vectors.md §2) keeps its lo and is never late; a real hi
    of 2^63-1 is late after an advance to 2^63-1."""
    code, output, cases = run_driver(DRIVER, far_deadline_tree, tmp_path, plain_timer(tmp_path),
                                     MISBEHAVE=misbehave, FIRING=firing)
    [case] = cases.values()
    assert (case["verdict"], case["step"], case["reason"]) == ("fail" if step else "pass", step, reason), output[-3000:]
    assert code == (1 if step else 0)


@pytest.mark.parametrize("mode, reason", [("hang", "hung: no answer to "),
                                          ("crash", "crashed: the adapter exited (status 3); its stderr ends: "
                                                    "simulated crash")])
def test_an_adapter_that_breaks_once_is_replaced(installed, vector_tree, tmp_path, mode, reason):
    """The first adapter breaks at its first run's second command; the driver kills it and starts the next one,
    which behaves: every other case passes, and the run ends."""
    once = tmp_path / "broke-once"
    adapter = (f"if mkdir {once} 2>/dev/null; then exec {sys.executable} {MISBEHAVING} {mode} 3; "
               f"else exec {shlex.join([*STDIO, BUILTIN])}; fi")
    started = time.monotonic()
    code, output, cases = run_driver(DRIVER, vector_tree, tmp_path, "stdio", adapter,
                                     KPURGATORY_VECTORS_CALL_TIMEOUT_MS="2000")
    print(f"adapter {mode} once: {time.monotonic() - started:.1f} s (node --test)")
    failed = [case for case in cases.values() if case["verdict"] == "fail"]
    assert code == 1 and len(failed) == 1, output[-3000:]
    assert failed[0]["reason"].startswith(reason) and failed[0]["step"] == 2
    assert all(case["verdict"] == "pass" for case in cases.values() if case["verdict"] != "skip" and case != failed[0])


def test_a_run_in_which_no_case_ran_fails(installed, vector_tree, tmp_path):
    """A timer binding following Kafka 3.9.0 on a tree of current Kafka: nothing runs, and the run says why."""
    tree = subtree(vector_tree, tmp_path / "tree", lambda entry: entry["kind"] == "scenarios")
    code, output, cases = run_driver(DRIVER, tree, tmp_path, plain_timer(tmp_path), KAFKA_VERSION="3.9.0")
    assert code == 1 and {case["verdict"] for case in cases.values()} == {"skip"}
    assert {case["reason"] for case in cases.values()} == {
        "profile purgatory is not implemented", "pinned to Kafka (current); the binding declares 3.9.0"}
    assert "not ok" in output and f"no case ran: all {len(cases)} were skipped (" in output
    assert "make a tree for it with `kpurgatory vectors DIR --kafka-version 3.9.0`" in output


@pytest.mark.parametrize("release", [None, "3.9.0"])  # the release of `release_tree`
def test_failing_as_kafka_does_is_reported_under_the_finding(installed, vector_tree, release_tree, tmp_path, release):
    """The interval-divides-by-zero finding's case, on a binding that divides by zero there as Kafka's wheel does:
    a failure under the finding's name, or a pass for a binding following Kafka 3.9.0."""
    tree = subtree(release_tree if release else vector_tree, tmp_path / "tree",
                   lambda entry: entry["finding"] == "interval-divides-by-zero")
    code, output, cases = run_driver(DRIVER, tree, tmp_path, plain_timer(tmp_path), MISBEHAVE="divide",
                                     **({"KAFKA_VERSION": release} if release else {}))
    [case] = cases.values()
    assert case["finding"] == "interval-divides-by-zero" and case["step"] == 1
    assert case["reason"].startswith("as Kafka does: interval-divides-by-zero (failed: Error: "
                                     "java.lang.ArithmeticException: / by zero")
    assert case["verdict"] == ("pass" if release else "fail") and code == (0 if release else 1), output[-3000:]
    assert "as Kafka does: interval-divides-by-zero" in output
