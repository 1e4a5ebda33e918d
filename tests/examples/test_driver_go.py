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
import time
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
	level := os.Getenv("KPURGATORY_LEVEL")
	if level == "" {{
		level = "exact"
	}}
	b, err := stdio.Start(os.Getenv("KPURGATORY_ADAPTER"), level)
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


def run_vectors(module: Path, tree: Path, out: Path, adapter: str | list[str] | None = None, verbose: bool = True,
                **variables: str):
    """`go test` (-v unless told) in the module, with the environment's variables; returns (exit code, go test's
    output, the results file's cases by path). An adapter is a factory for the stdio module or a whole command."""
    results = out / "results.json"
    env = {**os.environ, "KPURGATORY_VECTORS": str(tree), "KPURGATORY_VECTORS_OUT": str(out),
           "KPURGATORY_VECTORS_RESULTS": str(results), **variables}
    if adapter is not None:
        env["KPURGATORY_ADAPTER"] = shlex.join([*STDIO, adapter] if isinstance(adapter, str) else adapter)
    done = subprocess.run(["go", "test", "-count=1", *(["-v"] if verbose else []), "."], cwd=module, env=env,
                          capture_output=True, text=True, timeout=900)
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


def test_the_stdio_servers_own_tests_pass():
    """stdio.Serve's own go tests: a batch's answers are the requests' answers alone, skipped after a failure up to
    the next init; a concurrent binding's scheduled requests stop at each lock and run on at the harness's go."""
    done = subprocess.run(["go", "test", "-count=1", "-v", "./stdio/"], cwd=DRIVER, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert {"TestBatch", "TestScheduledRequestsRunOnlyAtTheHarnesssGo"} <= set(re.findall(r"--- PASS: (\w+)",
                                                                                          done.stdout))


@pytest.fixture(scope="module")
def go_purgatory(tmp_path_factory) -> Path:
    """The driver's example purgatory (examples/purgatory: Kafka's shape, its locks the driver's vectors.Mutex),
    built as a user builds a command of a module."""
    binary = tmp_path_factory.mktemp("go-purgatory") / "purgatory"
    go("build", "-o", str(binary), "./examples/purgatory", cwd=DRIVER)
    return binary


def scheduled_check(adapter: str, out: Path, *flags: str):
    return CliRunner().invoke(main, ["check", "--adapter", adapter, "--threads", "4", "--scheduler", "random",
                                     "--steps", "30", "--out", str(out), *flags], terminal_width=200)


def test_a_go_purgatory_on_the_drivers_locks_is_scheduled_and_a_seed_replays_it(go_purgatory, tmp_path):
    """Through stdio.Serve a Go purgatory whose locks are vectors.Mutex is driven one goroutine at a time at the
    harness's go: the same seed gives the same interleavings twice, and the points name the Go functions that take
    each lock."""
    outputs = [scheduled_check(str(go_purgatory), tmp_path / f"out{attempt}", "--examples", "10", "--seed", "3")
               for attempt in range(2)]
    for result in outputs:
        assert result.exit_code == 0, result.output
    digests = [re.search(r"interleavings: 10 distinct .*\(digest (\w+)\)", result.output) for result in outputs]
    assert digests[0] and digests[1] and digests[0][1] == digests[1][1], [result.output for result in outputs]
    reached = next(line for line in outputs[0].output.splitlines() if line.startswith("switch points reached: "))
    for point in ("acquire op in Watch", "acquire op in safeTryComplete", "acquire watcher shard in Check"):
        assert point in reached, reached


def test_a_race_planted_in_the_go_purgatory_is_caught_and_replays_call_for_call(go_purgatory, tmp_path):
    """A check that writes back the list it walked drops what was watched on the key meanwhile: a lost wakeup only an
    interleaving shows. The scheduler finds it, the history names its schedule, and replaying it through the same
    adapter gives the same history, call for call; through the correct one, another history that passes."""
    planted = f"{go_purgatory} -plant check-rewrites-list"
    result = scheduled_check(planted, tmp_path / "out", "--examples", "20", "--seed", "0", "--max-failures", "1")
    assert result.exit_code == 1, result.output
    assert "breaks no_lost_wakeup" in result.output
    [history] = (tmp_path / "out").glob("concurrent-*.jsonl")
    assert '"schedule":{"strategy":"random"' in history.read_text().splitlines()[0]
    replayed = CliRunner().invoke(main, ["replay", str(history), "--adapter", planted], terminal_width=200)
    assert replayed.exit_code == 1 and "the same history, call for call" in replayed.output, replayed.output
    fixed = CliRunner().invoke(main, ["replay", str(history), "--adapter", str(go_purgatory)], terminal_width=200)
    assert fixed.exit_code == 0 and "differs from the recording" in fixed.output, fixed.output


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


#: an in-process timer that fires each task at its deadline (inside every firing window of the contract level), and
#: misbehaves as the environment says: Add recurses without end for one task, Advance never returns in cases that
#: start at a given time, deadlines wrap as Kafka's long arithmetic does, Advance runs what is due by SHIFT_MS after
#: its time; it declares the Kafka release and the firing it is given
IN_PROCESS_TEST = """package mytimer

import (
	"math"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	vectors "{module}"
)

type timer struct {{
	now  int64
	due  map[string]int64
	hang bool
}}

func (t *timer) Init(p vectors.Params) error {{
	t.now, t.due = p.StartMs, map[string]int64{{}}
	t.hang = os.Getenv("HANG_AT_START_MS") == strconv.FormatInt(p.StartMs, 10)
	return nil
}}

func recurse(n int) int {{ return recurse(n+1) + 1 }}

func (t *timer) Add(task string, delayMs int64) ([]string, error) {{
	if task == os.Getenv("RECURSE_ON_TASK") {{
		recurse(0)
	}}
	if os.Getenv("WRAP") == "" && delayMs > math.MaxInt64-t.now {{
		return nil, vectors.ErrDelayOutOfRange
	}}
	t.due[task] = t.now + delayMs
	return t.fire(t.now)
}}

func (t *timer) Cancel(task string) ([]string, error) {{
	delete(t.due, task)
	return nil, nil
}}

func (t *timer) Advance(toMs int64) ([]string, error) {{
	if t.hang {{
		time.Sleep(time.Hour)
	}}
	shift, _ := strconv.ParseInt(os.Getenv("SHIFT_MS"), 10, 64)
	ran, err := t.fire(toMs + shift)
	t.now = toMs
	return ran, err
}}

func (t *timer) fire(toMs int64) (ran []string, err error) {{
	t.now = toMs
	for task, due := range t.due {{
		if due <= toMs {{
			ran = append(ran, task)
		}}
	}}
	slices.SortFunc(ran, func(a, b string) int {{ return int(t.due[a]>>1 - t.due[b]>>1) }})
	for _, task := range ran {{
		delete(t.due, task)
	}}
	return ran, nil
}}

func (t *timer) Size() (int64, error) {{ return int64(len(t.due)), nil }}

func (t *timer) Shutdown() (pending []string, err error) {{
	for task := range t.due {{
		pending = append(pending, task)
	}}
	return pending, nil
}}

func TestVectors(t *testing.T) {{
	vectors.Run(t, vectors.Binding{{Name: "test timer", Level: "contract", Profiles: []string{{"timer"}},
		Declarations: vectors.Declarations{{KafkaVersion: os.Getenv("KAFKA_VERSION"), Firing: os.Getenv("FIRING")}},
		System: vectors.TimerSystem(&timer{{}})}})
}}
"""


@pytest.fixture(scope="module")
def in_process(tmp_path_factory) -> Path:
    module = tmp_path_factory.mktemp("in-process") / "my-timer-vectors"
    module.mkdir()
    go("mod", "init", "example.com/mytimer", cwd=module)
    (module / "vectors_test.go").write_text(IN_PROCESS_TEST.format(module=driver_module()))
    return use_driver(module)


def test_a_call_that_overflows_its_stack_fails_only_the_cases_reaching_it(vector_tree, timer_steps, in_process,
                                                                          tmp_path):
    """Add recursing without end takes the child serving the binding down: each case adding that task fails as
    crashed with Go's own words, and a new child serves the next case."""
    reaching = {path for path, steps in timer_steps.items() if any(s["args"].get("task") == "t3" for s in steps)}
    started = time.monotonic()
    code, output, cases = run_vectors(in_process, vector_tree, tmp_path, RECURSE_ON_TASK="t3")
    elapsed = time.monotonic() - started
    crashed = {path for path, case in cases.items() if case["verdict"] == "fail"}
    assert code == 1 and crashed == reaching != set(), output[-4000:]
    assert all(cases[path]["reason"].startswith("the system failed: crashed: ") and
               "fatal error: stack overflow" in cases[path]["reason"] for path in crashed)
    assert all(cases[path]["verdict"] == "pass" for path in set(timer_steps) - crashed)
    print(f"\n{len(crashed)} crashed cases of {len(timer_steps)} in {elapsed:.1f} s:\n"
          + "\n".join(line for line in output.splitlines() if "--- FAIL" in line or "crashed: " in line)[:3000])
    assert elapsed < 120


def test_a_call_that_never_returns_fails_its_case_and_the_run_goes_on(vector_tree, timer_steps, hanging_start,
                                                                       in_process, tmp_path):
    """Advance blocking for ever in the cases that start at one time: each fails hung after the call timeout, go test
    (without -v) names it, and every other case runs and passes."""
    start_ms, hanging = hanging_start
    started = time.monotonic()
    code, output, cases = run_vectors(in_process, vector_tree, tmp_path, verbose=False,
                                      HANG_AT_START_MS=str(start_ms), KPURGATORY_VECTORS_CALL_TIMEOUT_MS="1000")
    elapsed = time.monotonic() - started
    failed = {path for path, case in cases.items() if case["verdict"] == "fail"}
    assert code == 1 and failed == hanging, output[-4000:]
    for path in failed:
        assert cases[path]["reason"] == "the system failed: hung: no answer to advance within 1s"
        assert f"--- FAIL: TestVectors/{path}" in output
    assert all(cases[path]["verdict"] == "pass" for path in set(timer_steps) - failed)
    print(f"\n{len(failed)} hung cases of {len(timer_steps)} in {elapsed:.1f} s:\n{output[:3000]}")
    assert elapsed < 60 + 2 * len(failed)


@pytest.mark.parametrize("shift, firing, step, reason", [
    (-1, "never_early_up_to_tick_late", None, None),  # hi null: never late, even after an advance to 2^63-1
    (-1, "kafka", 3, 'on_time: still pending after advance to 9223372036854775807, past the end of their kafka '
                     'firing window: ["max" (window [9223372036854775807, 9223372036854775807])]'),
    (1, "never_early_up_to_tick_late", 2,  # lo kept
     'on_time: task "max" ran at 9223372036854775806, early: its never_early_up_to_tick_late firing window is '
     '[9223372036854775807, null]')])
def test_a_window_ending_past_long_max_is_never_late(far_deadline_tree, in_process, tmp_path, shift, firing, step,
                                                    reason):
    """A window whose hi is null (its end past 2^63-1, specs/vectors.md §2) keeps its lo and is never late; a real hi
    of 2^63-1 is late after an advance to 2^63-1."""
    code, output, cases = run_vectors(in_process, far_deadline_tree, tmp_path, SHIFT_MS=str(shift), FIRING=firing)
    [case] = cases.values()
    assert (case["verdict"], case["step"], case["reason"]) == ("fail" if step else "pass", step, reason), output[-3000:]
    assert code == (1 if step else 0)


def test_a_stdio_adapter_that_hangs_once_is_restarted(vector_tree, hangs_once, tmp_path):
    started = time.monotonic()
    code, output, cases = run_vectors(user_module(tmp_path), vector_tree, tmp_path, hangs_once, verbose=False,
                                      KPURGATORY_VECTORS_CALL_TIMEOUT_MS="2000")
    failed = [path for path, case in cases.items() if case["verdict"] == "fail"]
    assert code == 1 and len(failed) == 1, output[-4000:]
    assert cases[failed[0]]["reason"].startswith("the system failed: hung: no answer to ")
    assert f"--- FAIL: TestVectors/{failed[0]}" in output
    later = [case for path, case in cases.items() if path > failed[0]]
    assert later and all(case["verdict"] in ("pass", "skip") for case in later)
    assert time.monotonic() - started < 120


def test_a_run_in_which_no_case_ran_fails(vector_tree, release_tree, in_process, tmp_path):
    """A binding following a Kafka release has no case in a tree for current Kafka: the run fails, saying why and how
    to make its tree; in the tree made for it, its cases run."""
    release = json.loads((release_tree / "index.json").read_text())["kafka_version"]
    code, output, cases = run_vectors(in_process, vector_tree, tmp_path, KAFKA_VERSION=release)
    assert code == 1 and cases and all(case["verdict"] == "skip" for case in cases.values())
    assert "no case ran: a run that checks nothing does not pass" in output
    assert re.search(r"\d+ skipped: profile purgatory is not implemented", output)
    assert f"`kpurgatory vectors DIR --kafka-version {release}`" in output
    code, output, cases = run_vectors(in_process, release_tree, tmp_path, KAFKA_VERSION=release)
    assert code == 0, output[-4000:]
    assert {path for path, case in cases.items() if case["verdict"] == "pass"} == {
        case["path"] for case in index(release_tree) if case["profile"] == "timer" and case["kafka_version"] == release}


def test_kafka_findings_are_reported_as_kafka_does(vector_tree, release_tree, in_process, tmp_path):
    """A timer whose deadlines wrap as Kafka's long arithmetic does fails the findings cases of that class under the
    finding's name (and the other cases its wrap breaks as plain failures); declaring the Kafka release it follows,
    it passes those findings cases, in a tree made for that release."""
    code, output, cases = run_vectors(in_process, vector_tree, tmp_path, WRAP="1")
    failed = {path: case for path, case in cases.items() if case["verdict"] == "fail"}
    findings = {path: case for path, case in failed.items() if "finding" in case}
    assert code == 1 and findings, output[-4000:]
    for path, case in failed.items():
        assert "/findings/" in path and case["reason"].startswith(f"as Kafka does: {case['finding']}: ") \
            if path in findings else not case["reason"].startswith("as Kafka does"), case
    names = {case["finding"] for case in findings.values()}
    assert names >= {"deadline-wraps", "far-deadline-runs-early"}
    assert f"--- FAIL: TestVectors/{next(iter(findings))}" in output
    release = json.loads((release_tree / "index.json").read_text())["kafka_version"]
    code, output, cases = run_vectors(in_process, release_tree, tmp_path, WRAP="1", KAFKA_VERSION=release)
    passed = {case["finding"]: case for case in cases.values() if case.get("finding")}
    assert passed.keys() == names, output[-4000:]
    assert all(case["verdict"] == "pass" and case["reason"].startswith(f"as Kafka does: {name}: ")
               for name, case in passed.items())


def test_purgatory_cases_at_the_contract_level(vector_tree, tmp_path):
    """The built-in implementation passes every purgatory case at the contract level; a purgatory whose cancel of a
    key completes its ops fails it, naming the property it breaks."""
    module = user_module(tmp_path)
    code, output, cases = run_vectors(module, vector_tree, tmp_path, "kpurgatory.conformance.adapters.builtin:factory",
                                      KPURGATORY_LEVEL="contract")
    assert code == 0, output[-4000:]
    purgatory = {case["path"] for case in index(vector_tree) if case["profile"] == "purgatory"
                 and not case["kafka_version"]}
    assert purgatory and all(cases[path]["verdict"] == "pass" for path in purgatory)
    code, output, cases = run_vectors(module, vector_tree, tmp_path,
                                      "kpurgatory.conformance.tools.mutants:cancel_key_completes",
                                      KPURGATORY_LEVEL="contract")
    failed = [case for case in cases.values() if case["verdict"] == "fail"]
    assert code == 1 and failed, output[-4000:]
    assert all(case["path"].startswith("1/purgatory/") and case["reason"].startswith("justified: ") for case in failed)
    replay = CliRunner().invoke(main, ["replay", failed[0]["observed"], "--level", "contract"])
    assert replay.exit_code == 1 and "justified" in replay.output, replay.output
