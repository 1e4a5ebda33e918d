"""The Rust vector driver (conformance/drivers/rust) as the crate kpurgatory-vectors: `cargo package` ships its own
files only, and a user's crate outside the repository (the hierarchical_hash_wheel_timer binding,
conformance/examples/rust-hierarchical-hash-wheel-timer, with the packaged crate as its path dependency and the wheel
from crates.io) runs the vectors with `cargo test`: every applicable vector passes through its stdio binding on the
built-in implementation, and the wheel gives its documented verdict and findings (the example's README). The crate's
own stdio test target, run in place, fails a broken copy with the case named in libtest's own output."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
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


def run_driver(project: Path, tree: Path, out: Path, binding: str, adapter: str | None = None):
    """cargo test with the binding; returns (exit code, libtest's output, the results file's cases by path)."""
    results = out / "results.json"
    env = {"KPURGATORY_VECTORS": str(tree), "KPURGATORY_BINDING": binding, "KPURGATORY_VECTORS_OUT": str(out),
           "KPURGATORY_VECTORS_RESULTS": str(results)}
    if adapter is not None:
        env["KPURGATORY_ADAPTER"] = shlex.join([*STDIO, adapter])
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
