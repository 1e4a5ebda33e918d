"""The Go vector driver (conformance/drivers/go) as the module it is published as, used the way its README tells a
user to before publication: a module of the user's own, outside the driver's folder, with the driver in a go.work
(`go work init .`, `go work use <driver>`), run with `go test`. A user's module with the stdio binding passes every
vector against the built-in implementation and fails a broken copy with the case named in go test's own output;
go-zero's TimingWheel (conformance/examples/go-zero-timingwheel), as such a module, gives the verdict its README
states, and each of its findings reproduces on the live library through the adapter built in place (where the
example reaches the driver through a replace)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
DRIVER, GO_ZERO = CONFORMANCE / "drivers" / "go", CONFORMANCE / "examples" / "go-zero-timingwheel"
STDIO = [sys.executable, "-m", "kpurgatory.conformance.adapters.stdio"]

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="needs the go command")

#: a user's test that runs the vectors against any implementation behind a stdio adapter (KPURGATORY_ADAPTER)
USER_TEST = """package myadapter

import (
	"os"
	"testing"

	vectors "{module}"
	"{module}/stdio"
)

func TestVectors(t *testing.T) {{
	b, err := stdio.Start(os.Getenv("KPURGATORY_ADAPTER"), "exact")
	if err != nil {{
		t.Fatal(err)
	}}
	defer vectors.Close(b.System)
	vectors.Run(t, b)
}}
"""


def driver_module() -> str:
    return re.search(r"^module (\S+)", (DRIVER / "go.mod").read_text(), re.MULTILINE)[1]


def go(*args: str, cwd: Path) -> None:
    done = subprocess.run(["go", *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"go {shlex.join(args)}: {done.stdout}{done.stderr}"


def use_driver(module: Path) -> Path:
    """The driver in the module's workspace, as its README says to until the driver is published."""
    go("work", "init", ".", cwd=module)
    go("work", "use", str(DRIVER), cwd=module)
    return module


def user_module(tmp: Path) -> Path:
    module = tmp / "my-adapter-vectors"
    module.mkdir()
    go("mod", "init", "example.com/myadapter", cwd=module)
    (module / "vectors_test.go").write_text(USER_TEST.format(module=driver_module()))
    return use_driver(module)


def go_zero_module(tmp: Path) -> Path:
    """The go-zero example as a user's module outside this repository: the driver through go.work instead of the
    replace (and the requirement of its unpublished version) that the example has in place."""
    module = Path(shutil.copytree(GO_ZERO, tmp / "go-zero-timingwheel", ignore=shutil.ignore_patterns("findings")))
    go("mod", "edit", f"-dropreplace={driver_module()}", f"-droprequire={driver_module()}", cwd=module)
    return use_driver(module)


def run_vectors(module: Path, tree: Path, out: Path, adapter: str | None = None):
    """`go test -v` in the module; returns (exit code, go test's output, the results file's cases by path)."""
    results = out / "results.json"
    env = {**os.environ, "KPURGATORY_VECTORS": str(tree), "KPURGATORY_VECTORS_OUT": str(out),
           "KPURGATORY_VECTORS_RESULTS": str(results)}
    if adapter is not None:
        env["KPURGATORY_ADAPTER"] = shlex.join([*STDIO, adapter])
    done = subprocess.run(["go", "test", "-count=1", "-v", "."], cwd=module, env=env, capture_output=True, text=True,
                          timeout=900)
    cases = {case["path"]: case for case in json.loads(results.read_text())["cases"]} if results.exists() else {}
    return done.returncode, done.stdout + done.stderr, cases


def runner_verdicts(output: str) -> dict[str, str]:
    """Each case's verdict as go test printed it (--- PASS/FAIL/SKIP: TestVectors/<path>)."""
    return {path: verdict.lower() for verdict, path in re.findall(r"--- (PASS|FAIL|SKIP): TestVectors/(\S+)", output)}


def index(tree: Path) -> list[dict]:
    return json.loads((tree / "index.json").read_text())["cases"]


def test_every_vector_passes_against_the_builtin_adapter(vector_tree, tmp_path):
    code, output, cases = run_vectors(user_module(tmp_path), vector_tree, tmp_path,
                                      "kpurgatory.conformance.adapters.builtin:factory")
    assert code == 0, output[-4000:]
    assert set(cases) == {case["path"] for case in index(vector_tree)}
    assert runner_verdicts(output) == {path: case["verdict"] for path, case in cases.items()}
    # only the release cases are skipped: they are about a Kafka release the builtin does not declare
    pinned = {case["path"] for case in index(vector_tree) if case["kafka_version"]}
    assert {path for path, case in cases.items() if case["verdict"] == "skip"} == pinned
    assert all(case["verdict"] == "pass" for path, case in cases.items() if path not in pinned)


@pytest.mark.parametrize("mutant", ["expired_on_add_off_by_one", "cancel_leaves_entry"])
def test_a_broken_copy_fails_naming_the_case(vector_tree, tmp_path, mutant):
    code, output, cases = run_vectors(user_module(tmp_path), vector_tree, tmp_path,
                                      f"kpurgatory.conformance.tools.mutants:{mutant}")
    failed = [case for case in cases.values() if case["verdict"] == "fail"]
    assert code == 1 and failed, output[-4000:]
    for case in failed:
        assert f"--- FAIL: TestVectors/{case['path']}" in output
        assert f"{case['path']}: step {case['step']} (" in output
        assert f"kpurgatory replay {case['observed']} --level exact" in output
    # the observed trace is a trace kpurgatory reads: replayed, it fails as the driver said
    replay = CliRunner().invoke(main, ["replay", failed[0]["observed"], "--level", "exact"])
    assert replay.exit_code == 1, replay.output


def test_the_stdio_server_answers_a_batch_as_one_request_at_a_time():
    """stdio.Serve's own go test: a batch's answers are the requests' answers alone, skipped after a failure up to the
    next init."""
    done = subprocess.run(["go", "test", "-count=1", "-v", "./stdio/"], cwd=DRIVER, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and "--- PASS: TestBatch" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]


#: go-zero's divergences (its README, "Findings"), as the contract judge words them
GO_ZERO_FINDINGS = (
    r'error "delay_out_of_range"; the contract expects none here',  # delay 0 rejected
    r'task "[^"]+" ran at \d+, early: ',  # a delay truncated to whole ticks; a move a round early
    r"still pending after advance to \d+",  # a move a round late
)
GO_ZERO_SKIPS = (r"profile purgatory is not implemented", r"about Kafka release", r"delay_ms \d+ is beyond time\.Duration",
                 r"the advance to \d+ needs \d+ more ticks with tasks pending")


def test_go_zero_gives_its_documented_verdict(vector_tree, tmp_path):
    code, output, cases = run_vectors(go_zero_module(tmp_path), vector_tree, tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["level"] == "contract" and results["implementation"].startswith("go-zero")
    assert runner_verdicts(output) == {path: case["verdict"] for path, case in cases.items()}
    failed = [case for case in cases.values() if case["verdict"] == "fail"]
    assert code == 1 and failed, output[-4000:]
    assert all(any(re.search(finding, case["reason"]) for finding in GO_ZERO_FINDINGS) for case in failed), \
        [case["reason"] for case in failed]
    # Kafka's own test of delays 0..499 stops at its first add: SetTimer rejects a delay of 0
    expiration = cases["1/timer/scenarios/kafka.TimerTest.testTaskExpiration.jsonl"]
    assert expiration["verdict"] == "fail" and expiration["step"] == 1
    skipped = [case["reason"] for case in cases.values() if case["verdict"] == "skip"]
    assert all(any(re.search(reason, skip) for reason in GO_ZERO_SKIPS) for skip in skipped), skipped
    assert any(case["verdict"] == "pass" for case in cases.values())


@pytest.fixture(scope="module")
def go_zero_adapter(tmp_path_factory) -> Path:
    """go-zero's binding served on stdin/stdout, for kpurgatory replay --adapter."""
    binary = tmp_path_factory.mktemp("go-zero") / "adapter"
    subprocess.run(["go", "build", "-o", str(binary), "./cmd/adapter"], cwd=GO_ZERO, check=True, timeout=600)
    return binary


@pytest.mark.parametrize("finding", sorted(path.name for path in (GO_ZERO / "findings").glob("*.jsonl")))
def test_each_go_zero_finding_reproduces_on_the_library(go_zero_adapter, tmp_path, finding):
    trace = tmp_path / finding  # replay writes its page next to the trace
    shutil.copy(GO_ZERO / "findings" / finding, trace)
    recorded = CliRunner().invoke(main, ["replay", str(trace), "--level", "contract"])
    live = CliRunner().invoke(main, ["replay", str(trace), "--adapter", str(go_zero_adapter), "--level", "contract"])
    assert recorded.exit_code == live.exit_code == 1, recorded.output + live.output
    # the live library breaks the contract at the same step, in the same way, as the recorded answers
    failure = re.compile(r"FAIL \S+ at step \d+ .*|  - system breaks .*")
    assert failure.findall(live.output) == failure.findall(recorded.output) != []
