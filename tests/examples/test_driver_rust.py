"""The Rust vector driver (conformance/drivers/rust) as the crate kpurgatory-vectors: `cargo package` ships its own
files only, and a user's crate outside the repository (the hierarchical_hash_wheel_timer binding,
conformance/examples/rust-hierarchical-hash-wheel-timer, with the packaged crate as its path dependency and the wheel
from crates.io) runs the vectors with `cargo test`: every applicable vector passes through its stdio binding on the
built-in implementation, and the wheel gives its documented verdict and findings (the example's README). The crate's
own stdio test target, run in place, fails a broken copy with the case named in libtest's own output."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.tools.vectors import tree_of, vector_trace, write_tree
from kpurgatory.conformance.traces.codec import read_traces

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
DRIVER = CONFORMANCE / "drivers" / "rust"
WHEEL = CONFORMANCE / "examples" / "rust-hierarchical-hash-wheel-timer"
STDIO = [sys.executable, "-m", "kpurgatory.conformance.adapters.stdio"]
BUILTIN = "kpurgatory.conformance.adapters.builtin:factory"
# outside the repository, kept between runs: a warm build takes seconds, a cold one about 30 s of CPU
TARGET = Path(os.environ.get("KPURGATORY_CARGO_TARGET", Path.home() / ".cache" / "kpurgatory" / "cargo-target"))
CARGO = {**os.environ, "CARGO_TARGET_DIR": str(TARGET)}
CRATE = tomllib.loads((DRIVER / "Cargo.toml").read_text())["package"]
#: the example's dependency on the driver, as a crate in a checkout of kpurgatory declares it
IN_CHECKOUT = 'kpurgatory-vectors = { path = "../../drivers/rust" }'

pytestmark = pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo is needed to build the Rust driver")


def cargo(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["cargo", *args], cwd=project, env={**CARGO, **env}, capture_output=True, text=True,
                          timeout=900)


@pytest.fixture(scope="session")
def crate(tmp_path_factory) -> Path:
    """The .crate `cargo package` makes (and builds from its own contents, as crates.io would ship it)."""
    done = cargo(DRIVER, "package", "--locked", "--allow-dirty")
    assert done.returncode == 0, done.stderr[-3000:]
    return TARGET / "package" / f"{CRATE['name']}-{CRATE['version']}.crate"


def test_the_crate_holds_its_own_files_only(crate):
    with tarfile.open(crate) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames()}
    assert names - {".cargo_vcs_info.json"} == {"Cargo.toml", "Cargo.toml.orig", "Cargo.lock", "README.md",
                                                "src/lib.rs", "src/stdio.rs", "tests/vectors.rs"}


@pytest.fixture(scope="session")
def user_crate(crate, tmp_path_factory):
    """The wheel's binding as a user's crate in a temporary folder: the example's Cargo.toml, with the packaged crate,
    unpacked, as its path dependency; its lock file (the wheel and the driver's dependencies from crates.io); its
    test. Built; its artifacts leave the shared target folder afterwards (each temporary path builds anew)."""
    unpacked = tmp_path_factory.mktemp("crate")
    with tarfile.open(crate) as tar:
        tar.extractall(unpacked, filter="data")
    project = tmp_path_factory.mktemp("user-crate")
    manifest = (WHEEL / "Cargo.toml").read_text()
    assert manifest.count(IN_CHECKOUT) == 1
    dependency = f"kpurgatory-vectors = {{ path = {json.dumps(str(unpacked / crate.name.removesuffix('.crate')))} }}"
    (project / "Cargo.toml").write_text(manifest.replace(IN_CHECKOUT, dependency))
    shutil.copy(WHEEL / "Cargo.lock", project)
    shutil.copytree(WHEEL / "tests", project / "tests")
    done = cargo(project, "test", "--locked", "--no-run")
    assert done.returncode == 0, done.stderr[-3000:]
    yield project
    cargo(project, "clean", "-p", CRATE["name"], "-p", tomllib.loads(manifest)["package"]["name"])


@pytest.fixture(scope="session")
def in_place() -> Path:
    """The crate's own stdio test target, built in its folder (the tracked Cargo.lock) into the shared target."""
    done = cargo(DRIVER, "test", "--locked", "--no-run")
    assert done.returncode == 0, done.stderr[-3000:]
    return DRIVER


def run_driver(project: Path, tree: Path, out: Path, binding: str, adapter: str | list[str] | None = None,
               **variables: str):
    """cargo test with the binding and the variables; returns (exit code, libtest's output, the results file's cases
    by path). An adapter is a factory for the stdio module or a whole command."""
    results = out / "results.json"
    env = {"KPURGATORY_VECTORS": str(tree), "KPURGATORY_BINDING": binding, "KPURGATORY_VECTORS_OUT": str(out),
           "KPURGATORY_VECTORS_RESULTS": str(results), **variables}
    if adapter is not None:
        env["KPURGATORY_ADAPTER"] = shlex.join([*STDIO, adapter] if isinstance(adapter, str) else adapter)
    done = cargo(project, "test", "--locked", "-q", "--test", "vectors", **env)
    cases = {case["path"]: case for case in json.loads(results.read_text())["cases"]} if results.exists() else {}
    return done.returncode, done.stdout + done.stderr, cases


def index(tree: Path) -> list[dict]:
    return json.loads((tree / "index.json").read_text())["cases"]


def test_every_vector_passes_on_the_builtin_implementation(vector_tree, user_crate, tmp_path):
    code, output, cases = run_driver(user_crate, vector_tree, tmp_path, "stdio", BUILTIN)
    assert code == 0, output[-3000:]
    assert set(cases) == {case["path"] for case in index(vector_tree)}
    # only the cases pinned to a Kafka release are not for the current one
    pinned = {case["path"] for case in index(vector_tree) if case["kafka_version"]}
    assert {path for path, case in cases.items() if case["verdict"] != "pass"} == pinned
    assert all(cases[path]["reason"].startswith("pinned to Kafka") for path in pinned)
    assert f"test result: ok. {len(cases) - len(pinned)} passed; 0 failed; {len(pinned)} ignored" in output


@pytest.mark.parametrize("mutant", ["expired_on_add_off_by_one", "cancel_leaves_entry"])
def test_a_broken_copy_fails_naming_the_case(vector_tree, in_place, tmp_path, mutant):
    code, output, cases = run_driver(in_place, vector_tree, tmp_path, "stdio",
                                     f"kpurgatory.conformance.tools.mutants:{mutant}")
    failed = [case for case in cases.values() if case["verdict"] == "fail"]
    assert code == 101 and failed  # cargo's exit code for failed tests
    for case in failed:
        # libtest's own report names the case, the step, and the command that replays the observed run
        name = case["path"].removesuffix(".jsonl")
        assert f"test {name} " in output and f"---- {name} ----" in output
        assert f"step {case['step']} (" in output
        assert f"kpurgatory replay {case['observed']} --level exact" in output
    # the observed run replays as the same failure
    replayed = CliRunner().invoke(main, ["replay", failed[0]["observed"], "--level", "exact"])
    assert replayed.exit_code == 1, replayed.output


def test_hierarchical_hash_wheel_timer_passes_the_tree_at_the_contract_level(vector_tree, user_crate, tmp_path):
    """The crate's wheel passes every timer vector it can run; an advance across a far entry's many 2^32 ms cycles
    is skipped as unrunnable, never failed."""
    code, output, cases = run_driver(user_crate, vector_tree, tmp_path, "hierarchical_hash_wheel_timer")
    assert code == 0, output[-3000:]
    timer = {case["path"] for case in index(vector_tree) if case["profile"] == "timer" and not case["kafka_version"]}
    passed = {path for path, case in cases.items() if case["verdict"] == "pass"}
    unrunnable = {path for path, case in cases.items() if "rounds of skip and tick" in (case["reason"] or "")}
    assert passed | unrunnable == timer and len(passed) > len(unrunnable)
    assert all(cases[path]["reason"] == "profile purgatory is not implemented" for path in cases
               if path.startswith("1/purgatory/"))


@pytest.fixture(scope="session")
def findings_tree(tmp_path_factory) -> Path:
    """The binding's minimal cases (findings.jsonl) as a vector tree."""
    traces = [vector_trace(trace.trace_id, trace.header.profile, trace.header.params, trace.commands, "scenarios",
                           description=trace.header.description)
              for trace in read_traces(WHEEL / "findings.jsonl")]
    out = tmp_path_factory.mktemp("findings") / "tree"
    write_tree(out, tree_of(traces))
    return out


def test_hierarchical_hash_wheel_timer_findings(findings_tree, user_crate, tmp_path):
    """README, "Findings": a deadline that wraps the wheels' 2^32 ms cycle fires early; a deadline on the last
    millisecond of a later cycle panics. The control case passes."""
    code, output, cases = run_driver(user_crate, findings_tree, tmp_path, "hierarchical_hash_wheel_timer")
    assert code == 101
    case = {path.split("/")[-1].removesuffix(".jsonl").removeprefix("hierarchical-hash-wheel-timer."): found
            for path, found in cases.items()}
    assert case["control-unwrapped-deadline"]["verdict"] == "pass"
    early = case["wrapped-deadline-fires-early"]
    assert early["step"] == 4 and 'on_time: task "y" ran at 256, before its window opens at 4294967296' in early["reason"]
    for name, step, command in [("last-ms-of-a-cycle-panics", 1, "timer_add"),
                                ("last-ms-of-a-cycle-panics-later", 2, "advance")]:
        assert case[name]["step"] == step
        assert f"{command} panicked: overflow when subtracting durations" in case[name]["reason"]
    replayed = CliRunner().invoke(main, ["replay", early["observed"], "--level", "contract"])
    assert replayed.exit_code == 1 and "breaks on_time" in replayed.output, replayed.output


#: an in-process timer that fires each task at its deadline (inside every firing window of the contract level), and
#: misbehaves as the environment says: add recurses without end for one task, advance never returns in cases that
#: start at a given time, deadlines wrap as Kafka's long arithmetic does, advance runs what is due by SHIFT_MS after
#: its time; it declares the Kafka release and the firing it is given
IN_PROCESS_TEST = r"""use kpurgatory_vectors::{json, Binding, Params, Rejected, Timer, TimerBinding, Unrunnable};
use std::collections::HashMap;
use std::env;
use std::time::Duration;

struct Simple {
    now: i64,
    due: HashMap<String, i64>,
    hang: bool,
}

#[allow(unconditional_recursion)]
fn recurse(n: u64) -> u64 {
    recurse(n + 1) + 1
}

impl Simple {
    fn new(params: &Params) -> Simple {
        let hang = env::var("HANG_AT_START_MS").is_ok_and(|start| start == params.start_ms.to_string());
        Simple { now: params.start_ms, due: HashMap::new(), hang }
    }

    fn fire(&mut self, to_ms: i64, ran: &mut Vec<String>) {
        self.now = to_ms;
        let mut due: Vec<(i64, String)> =
            self.due.iter().filter(|(_, &at)| at <= to_ms).map(|(task, &at)| (at, task.clone())).collect();
        due.sort();
        for (_, task) in due {
            self.due.remove(&task);
            ran.push(task);
        }
    }
}

impl Timer for Simple {
    fn add(&mut self, task: &str, delay_ms: i64, ran: &mut Vec<String>) -> Result<(), Rejected> {
        if env::var("RECURSE_ON_TASK").is_ok_and(|t| t == task) {
            recurse(0);
        }
        let at = match env::var_os("WRAP") {
            Some(_) => self.now.wrapping_add(delay_ms),
            None => self.now.checked_add(delay_ms).ok_or(Rejected)?,
        };
        self.due.insert(task.to_owned(), at);
        self.fire(self.now, ran);
        Ok(())
    }
    fn cancel(&mut self, task: &str) {
        self.due.remove(task);
    }
    fn advance(&mut self, to_ms: i64, ran: &mut Vec<String>) -> Result<(), Unrunnable> {
        if self.hang {
            std::thread::sleep(Duration::from_secs(3600));
        }
        let shift: i64 = env::var("SHIFT_MS").ok().and_then(|shift| shift.parse().ok()).unwrap_or(0);
        self.fire(to_ms.saturating_add(shift), ran);
        self.now = to_ms;
        Ok(())
    }
    fn size(&self) -> u64 {
        self.due.len() as u64
    }
    fn shutdown(&mut self) -> Vec<String> {
        self.due.drain().map(|(task, _)| task).collect()
    }
}

fn simple() -> Result<Box<dyn Binding>, String> {
    let mut declarations = json!({});
    for (name, variable) in [("kafka_version", "KAFKA_VERSION"), ("firing", "FIRING")] {
        if let Ok(value) = env::var(variable) {
            declarations[name] = json!(value);
        }
    }
    Ok(Box::new(TimerBinding::new("simple timer", Simple::new).contract(declarations)))
}

fn main() {
    kpurgatory_vectors::main(env!("CARGO_TARGET_TMPDIR"), &[("simple", simple)]);
}
"""


@pytest.fixture(scope="session")
def in_process(in_place, tmp_path_factory) -> Path:
    """A crate whose test binds the timer above in process, with the driver from this checkout."""
    project = tmp_path_factory.mktemp("in-process") / "simple-timer"
    (project / "tests").mkdir(parents=True)
    (project / "Cargo.toml").write_text(
        '[package]\nname = "simple-timer"\nversion = "0.1.0"\nedition = "2021"\n\n[dev-dependencies]\n'
        f'kpurgatory-vectors = {{ path = {json.dumps(str(DRIVER))} }}\n\n[[test]]\nname = "vectors"\nharness = false\n')
    shutil.copy(DRIVER / "Cargo.lock", project)  # the driver's dependencies as it pins them
    (project / "tests" / "vectors.rs").write_text(IN_PROCESS_TEST)
    done = cargo(project, "test", "--no-run")
    assert done.returncode == 0, done.stderr[-3000:]
    yield project
    cargo(project, "clean", "-p", "simple-timer")


def test_a_call_that_overflows_its_stack_fails_only_the_cases_reaching_it(vector_tree, timer_steps, in_process,
                                                                          tmp_path):
    """add recursing without end aborts the child serving the binding: each case adding that task fails as crashed
    with Rust's own words, and a new child serves the next case."""
    reaching = {path for path, steps in timer_steps.items() if any(s["args"].get("task") == "t3" for s in steps)}
    started = time.monotonic()
    code, output, cases = run_driver(in_process, vector_tree, tmp_path, "simple", RECURSE_ON_TASK="t3")
    elapsed = time.monotonic() - started
    crashed = {path for path, case in cases.items() if case["verdict"] == "fail"}
    assert code == 101 and crashed == reaching != set(), output[-4000:]
    for path in crashed:
        assert cases[path]["reason"].startswith("the implementation failed to answer: crashed: ")
        assert "has overflowed its stack; fatal runtime error: stack overflow" in cases[path]["reason"]
        assert f"---- {path.removesuffix('.jsonl')} ----" in output
    assert all(cases[path]["verdict"] == "pass" for path in set(timer_steps) - crashed)
    print(f"\n{len(crashed)} crashed cases of {len(timer_steps)} in {elapsed:.1f} s:\n"
          + "\n".join(line for line in output.splitlines() if "FAILED" in line or "crashed: " in line)[:3000])
    assert elapsed < 120


def test_a_call_that_never_returns_fails_its_case_and_the_run_goes_on(vector_tree, timer_steps, hanging_start,
                                                                       in_process, tmp_path):
    """advance sleeping for an hour in the cases that start at one time: each fails hung after the call timeout, and
    every other case runs and passes."""
    start_ms, hanging = hanging_start
    started = time.monotonic()
    code, output, cases = run_driver(in_process, vector_tree, tmp_path, "simple", HANG_AT_START_MS=str(start_ms),
                                     KPURGATORY_VECTORS_CALL_TIMEOUT_MS="1000")
    elapsed = time.monotonic() - started
    failed = {path for path, case in cases.items() if case["verdict"] == "fail"}
    assert code == 101 and failed == hanging, output[-4000:]
    for path in failed:
        assert cases[path]["reason"] == "the implementation failed to answer: hung: no answer to advance within 1s"
        assert re.search(rf"test {re.escape(path.removesuffix('.jsonl'))} +\.\.\. FAILED", output)
    assert all(cases[path]["verdict"] == "pass" for path in set(timer_steps) - failed)
    print(f"\n{len(failed)} hung cases of {len(timer_steps)} in {elapsed:.1f} s:\n"
          + "\n".join(line for line in output.splitlines() if "FAILED" in line or "hung: " in line)[:3000])
    assert elapsed < 60 + 2 * len(failed)


@pytest.mark.parametrize("shift, firing, step, reason", [
    (-1, "never_early_up_to_tick_late", None, None),  # hi null: never late, even after an advance to 2^63-1
    (-1, "kafka", 3, 'on_time: still pending after advance to 9223372036854775807 (kafka firing): "max" (due by '
                     '9223372036854775807)'),
    (1, "never_early_up_to_tick_late", 2,  # lo kept
     'on_time: task "max" ran at 9223372036854775806, before its window opens at 9223372036854775807 '
     '(never_early_up_to_tick_late firing)')])
def test_a_window_ending_past_long_max_is_never_late(far_deadline_tree, in_process, tmp_path, shift, firing, step,
                                                    reason):
    """A window whose hi is null (its end past 2^63-1, specs/vectors.md §2) keeps its lo and is never late; a real hi
    of 2^63-1 is late after an advance to 2^63-1."""
    code, output, cases = run_driver(in_process, far_deadline_tree, tmp_path, "simple", SHIFT_MS=str(shift),
                                     FIRING=firing)
    [case] = cases.values()
    assert (case["verdict"], case["step"], case["reason"]) == ("fail" if step else "pass", step, reason), output[-3000:]
    assert code == (101 if step else 0)


def test_a_stdio_adapter_that_hangs_once_is_restarted(vector_tree, hangs_once, in_place, tmp_path):
    code, output, cases = run_driver(in_place, vector_tree, tmp_path, "stdio", hangs_once,
                                     KPURGATORY_VECTORS_CALL_TIMEOUT_MS="2000")
    failed = [path for path, case in cases.items() if case["verdict"] == "fail"]
    assert code == 101 and len(failed) == 1, output[-4000:]
    assert cases[failed[0]]["reason"].startswith("the implementation failed to answer: hung: no answer to ")
    assert all(case["verdict"] in ("pass", "skip") for path, case in cases.items() if path != failed[0])


def test_a_run_in_which_no_case_ran_fails(vector_tree, release_tree, in_process, tmp_path):
    """A binding following a Kafka release has no case in a tree for current Kafka: the run fails, saying why and how
    to make its tree; in the tree made for it, its cases run."""
    release = json.loads((release_tree / "index.json").read_text())["kafka_version"]
    code, output, cases = run_driver(in_process, vector_tree, tmp_path, "simple", KAFKA_VERSION=release)
    assert code == 101 and cases and all(case["verdict"] == "skip" for case in cases.values())
    assert "no case ran: a run that checks nothing does not pass" in output
    assert re.search(r"\d+ skipped: profile purgatory is not implemented", output)
    assert f"`kpurgatory vectors DIR --kafka-version {release}`" in output
    code, output, cases = run_driver(in_process, release_tree, tmp_path, "simple", KAFKA_VERSION=release)
    assert code == 0, output[-4000:]
    assert {path for path, case in cases.items() if case["verdict"] == "pass"} == {
        case["path"] for case in index(release_tree) if case["profile"] == "timer" and case["kafka_version"] == release}


def test_kafka_findings_are_reported_as_kafka_does(vector_tree, release_tree, in_process, tmp_path):
    """A timer whose deadlines wrap as Kafka's long arithmetic does fails the findings cases of that class under the
    finding's name (and the other cases its wrap breaks as plain failures); declaring the Kafka release it follows,
    it passes those findings cases, in a tree made for that release."""
    code, output, cases = run_driver(in_process, vector_tree, tmp_path, "simple", WRAP="1")
    failed = {path: case for path, case in cases.items() if case["verdict"] == "fail"}
    findings = {path: case for path, case in failed.items() if "finding" in case}
    assert code == 101 and findings, output[-4000:]
    for path, case in failed.items():
        assert "/findings/" in path and case["reason"].startswith(f"as Kafka does: {case['finding']}: ") \
            if path in findings else not case["reason"].startswith("as Kafka does"), case
    names = {case["finding"] for case in findings.values()}
    assert names >= {"deadline-wraps", "far-deadline-runs-early"}
    release = json.loads((release_tree / "index.json").read_text())["kafka_version"]
    code, output, cases = run_driver(in_process, release_tree, tmp_path, "simple", WRAP="1", KAFKA_VERSION=release)
    passed = {case["finding"]: case for case in cases.values() if case.get("finding")}
    assert passed.keys() == names, output[-4000:]
    assert all(case["verdict"] == "pass" and case["reason"].startswith(f"as Kafka does: {name}: ")
               for name, case in passed.items())


def test_purgatory_cases_at_the_contract_level(vector_tree, in_place, tmp_path):
    """The built-in implementation passes every purgatory case at the contract level; a purgatory whose cancel of a
    key completes its ops fails it, naming the property it breaks."""
    code, output, cases = run_driver(in_place, vector_tree, tmp_path, "stdio", BUILTIN, KPURGATORY_LEVEL="contract")
    assert code == 0, output[-4000:]
    purgatory = {case["path"] for case in index(vector_tree) if case["profile"] == "purgatory"
                 and not case["kafka_version"]}
    assert purgatory and all(cases[path]["verdict"] == "pass" for path in purgatory)
    code, output, cases = run_driver(in_place, vector_tree, tmp_path, "stdio",
                                     "kpurgatory.conformance.tools.mutants:cancel_key_completes",
                                     KPURGATORY_LEVEL="contract")
    failed = [case for case in cases.values() if case["verdict"] == "fail"]
    assert code == 101 and failed, output[-4000:]
    assert all(case["path"].startswith("1/purgatory/") and case["reason"].startswith("justified: ") for case in failed)
    replayed = CliRunner().invoke(main, ["replay", failed[0]["observed"], "--level", "contract"])
    assert replayed.exit_code == 1 and "justified" in replayed.output, replayed.output
