"""The Java vector driver (conformance/drivers/java) as the library it is published as: `mvn install` puts
io.github.kpurgatory:kpurgatory-vectors, with its sources and javadoc jars, into the local Maven repository, and
projects outside the driver's folder depend on it as on any library and run the vectors with `mvn test`. A user's
project with the stdio binding passes every vector against the built-in implementation and fails a broken copy with
the case named in Surefire's output; the registry bindings' projects (conformance/examples/agrona-deadlinetimerwheel
and caffeine-timerwheel, whose poms resolve Agrona and Caffeine from Maven Central) give the verdicts their READMEs
state."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.tools import vectors
from kpurgatory.model import vocabulary as v

sys.path.insert(0, str(Path(__file__).parent))  # small_trees.py
from small_trees import boom_tree, subtree  # noqa: E402

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
DRIVER, EXAMPLES = CONFORMANCE / "drivers" / "java", CONFORMANCE / "examples"
pytestmark = pytest.mark.skipif(shutil.which("mvn") is None or shutil.which("java") is None,
                                reason="Maven and a JDK are needed to build the Java driver")
ADAPTER = f"{sys.executable} -m kpurgatory.conformance.adapters.stdio"
BUILTIN = f"{ADAPTER} kpurgatory.conformance.adapters.builtin:factory"
MISBEHAVING = Path(__file__).resolve().parents[1] / "conformance" / "misbehaving_adapter.py"
POM = "{http://maven.apache.org/POM/4.0.0}"

#: a user's project that runs the vectors against any implementation behind a stdio adapter (KPURGATORY_ADAPTER)
USER_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>example</groupId>
  <artifactId>my-adapter-vectors</artifactId>
  <version>1.0</version>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencies>
    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
      <scope>test</scope>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-compiler-plugin</artifactId>
        <version>3.13.0</version>
      </plugin>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-surefire-plugin</artifactId>
        <version>3.5.4</version>
      </plugin>
    </plugins>
  </build>
</project>
"""
USER_TEST = """package example;

import io.github.kpurgatory.vectors.Binding;
import io.github.kpurgatory.vectors.StdioBinding;
import io.github.kpurgatory.vectors.VectorTests;

class AdapterVectorsTest extends VectorTests {
    @Override
    protected Binding binding() throws Exception {
        return new StdioBinding();
    }
}
"""


def coordinates() -> dict[str, str]:
    pom = ElementTree.parse(DRIVER / "pom.xml").getroot()
    return {name: pom.find(f"{POM}{tag}").text for name, tag in
            [("group", "groupId"), ("artifact", "artifactId"), ("version", "version")]}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """`mvn install` of the driver into the user's local repository, built outside the source tree; its build folder."""
    build = tmp_path_factory.mktemp("driver-build")
    done = subprocess.run(["mvn", "-q", "-f", str(DRIVER / "pom.xml"), "install", f"-Dkpurgatory.target={build}"],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return build


def user_project(tmp: Path) -> Path:
    project = tmp / "my-adapter-vectors"
    (project / "src/test/java/example").mkdir(parents=True)
    (project / "pom.xml").write_text(USER_POM.format(**coordinates()))
    (project / "src/test/java/example/AdapterVectorsTest.java").write_text(USER_TEST)
    return project


def example_project(tmp: Path, name: str) -> Path:
    """A registry binding's project, as a user would have it: a folder of its own, apart from the driver's."""
    return Path(shutil.copytree(EXAMPLES / name, tmp / name, ignore=shutil.ignore_patterns("target")))


def run_vectors(project: Path, tree: Path, tmp: Path, *, adapter: str | None = None,
                **settings: str) -> tuple[subprocess.CompletedProcess, dict, dict]:
    """`mvn test` in the project, with more environment variables (``settings``); its output, the results file and
    Surefire's counts."""
    env = {**os.environ, "KPURGATORY_VECTORS": str(tree), "KPURGATORY_VECTORS_OUT": str(tmp / "observed"),
           "KPURGATORY_VECTORS_RESULTS": str(tmp / "results.json"), **settings}
    if adapter:
        env["KPURGATORY_ADAPTER"] = adapter
    completed = subprocess.run(["mvn", "-q", "test"], cwd=project, env=env, capture_output=True, text=True,
                               timeout=1200)
    results = json.loads((tmp / "results.json").read_text()) if (tmp / "results.json").exists() else {}
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for report in (project / "target" / "surefire-reports").glob("TEST-*.xml"):
        suite = ElementTree.parse(report).getroot()
        for name in counts:
            counts[name] += int(suite.get(name, 0))
    return completed, results, counts


def verdicts(results: dict) -> dict[str, list[str]]:
    by: dict[str, list[str]] = {"pass": [], "fail": [], "skip": []}
    for case in results["cases"]:
        by[case["verdict"]].append(case["path"])
    return by


def test_install_builds_the_jar_with_its_sources_and_javadoc(installed):
    jars = {kind: installed / f"{coordinates()['artifact']}-{coordinates()['version']}{kind}.jar"
            for kind in ("", "-sources", "-javadoc")}
    with zipfile.ZipFile(jars[""]) as jar:
        assert "io/github/kpurgatory/vectors/VectorTests.class" in jar.namelist()
    with zipfile.ZipFile(jars["-sources"]) as jar:
        assert "io/github/kpurgatory/vectors/VectorTests.java" in jar.namelist()
    with zipfile.ZipFile(jars["-javadoc"]) as jar:
        assert "io/github/kpurgatory/vectors/VectorTests.html" in jar.namelist()


def test_every_vector_passes_against_the_builtin_adapter(installed, vector_tree, tmp_path):
    completed, results, counts = run_vectors(user_project(tmp_path), vector_tree, tmp_path, adapter=BUILTIN)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    index = json.loads((vector_tree / "index.json").read_text())
    by = verdicts(results)
    assert results["implementation"] and results["level"] == "exact" and results["driver"] == "java"
    assert not by["fail"]
    # only the release cases are skipped: they are about a Kafka release the builtin does not declare
    assert sorted(by["skip"]) == sorted(case["path"] for case in index["cases"] if case["kafka_version"])
    assert counts == {"tests": len(index["cases"]), "failures": 0, "errors": 0, "skipped": len(by["skip"])}


@pytest.mark.parametrize("mutant", ["expired_on_add_off_by_one", "cancel_leaves_entry"])
def test_a_broken_copy_fails_naming_the_case(installed, vector_tree, tmp_path, mutant):
    completed, results, counts = run_vectors(user_project(tmp_path), vector_tree, tmp_path,
                                             adapter=f"{ADAPTER} kpurgatory.conformance.tools.mutants:{mutant}")
    assert completed.returncode == 1
    failed = [case for case in results["cases"] if case["verdict"] == "fail"]
    assert failed and counts["failures"] == len(failed) and counts["errors"] == 0
    output = completed.stdout + completed.stderr
    for case in failed:
        assert case["path"] in output
        assert f"kpurgatory replay {case['observed']} --level exact" in output
    # the observed trace is a trace kpurgatory reads: replayed, it fails as the driver said
    replay = CliRunner().invoke(main, ["replay", failed[0]["observed"], "--level", "exact"])
    assert replay.exit_code == 1, replay.output


def test_agrona_passes_every_timer_case_at_the_contract_level(installed, vector_tree, tmp_path):
    project = example_project(tmp_path, "agrona-deadlinetimerwheel")
    completed, results, counts = run_vectors(project, vector_tree, tmp_path)
    by = verdicts(results)
    assert results["level"] == "contract" and results["implementation"].startswith("agrona DeadlineTimerWheel")
    # its one divergence (README, Findings) needs an advance to Long.MAX_VALUE, which this tree may or may not hold:
    # the wheel expires a timer id it never scheduled or, empty, polls without end (hung)
    failed = [case for case in results["cases"] if case["verdict"] == "fail"]
    assert all("agrona timer id" in case["reason"] or case["reason"] == "hung: no answer to advance within 10 s"
               and json.loads(Path(case["observed"]).read_text().splitlines()[-1])["args"]["to_ms"] == v.LONG_MAX
               for case in failed), failed
    assert (completed.returncode == 0) == (not failed), completed.stdout[-4000:]
    assert by["pass"] and {case["reason"] for case in results["cases"] if case["verdict"] == "skip"} == {
        "profile purgatory is not implemented"}
    assert counts["tests"] == len(results["cases"]) and counts["failures"] == len(failed) and counts["errors"] == 0


def test_agrona_poll_at_long_max_expires_empty_slots(installed, tmp_path):
    """The minimal case of its finding: one timer, then an advance to Long.MAX_VALUE, which poll() compares with
    NULL_DEADLINE, the marker of an empty slot: every empty slot of the spoke 'expires'."""
    case = vectors.vector_trace("agrona.poll-at-long-max", "timer", v.Params(),
                                [v.TimerAdd("a", 5), v.Advance(v.LONG_MAX)], "coverage")
    path = vectors.case_path(case)
    vectors.write_tree(tmp_path / "tree", vectors.tree_of([case]))
    project = example_project(tmp_path, "agrona-deadlinetimerwheel")
    completed, results, counts = run_vectors(project, tmp_path / "tree", tmp_path)
    assert completed.returncode == 1 and counts["failures"] == 1
    [failed] = results["cases"]
    assert failed["step"] == 2 and "agrona timer id" in failed["reason"]
    assert f"{path}: step 2 advance" in completed.stdout


def test_caffeine_passes_every_timer_case_at_the_contract_level(installed, vector_tree, tmp_path):
    project = example_project(tmp_path, "caffeine-timerwheel")
    completed, results, counts = run_vectors(project, vector_tree, tmp_path)
    by = verdicts(results)
    assert completed.returncode == 0, completed.stdout[-4000:]
    assert results["level"] == "contract" and results["implementation"].startswith("caffeine TimerWheel")
    assert by["pass"] and not by["fail"] and {case["reason"] for case in results["cases"]
                                              if case["verdict"] == "skip"} == {"profile purgatory is not implemented"}
    assert counts["tests"] == len(results["cases"]) and counts["failures"] == 0 and counts["errors"] == 0


def test_caffeine_re_put_of_a_due_entry_runs_it_and_keeps_the_new_one(installed, tmp_path):
    """The minimal case of its finding: a due entry stays until the wheel passes its bucket; a put on it evicts the old
    value as EXPIRED (a run) and inserts the new one, where a move would have left one pending entry and no run."""
    case = vectors.vector_trace("caffeine.re-put-of-a-due-entry", "timer", v.Params(),
                                [v.TimerAdd("a", 0), v.TimerAdd("a", 0), v.Size()], "coverage")
    path = vectors.case_path(case)
    vectors.write_tree(tmp_path / "tree", vectors.tree_of([case]))
    project = example_project(tmp_path, "caffeine-timerwheel")
    completed, results, counts = run_vectors(project, tmp_path / "tree", tmp_path)
    assert completed.returncode == 1 and counts["failures"] == 1
    [failed] = results["cases"]
    assert failed["step"] == 3 and failed["reason"] == "counters: size 1, expected 0"
    assert f"{path}: step 3 size" in completed.stdout


#: a plain timer (a map of deadlines) as an in-process binding at the contract level, misbehaving as MISBEHAVE says
#: on the task "boom": its add recurses without end, or an advance with it pending never returns; or, with "divide",
#: every add past 2^62 ms divides by zero as Kafka's wheel does there; an advance runs what is due by SHIFT_MS after
#: its time. It declares KAFKA_VERSION and FIRING, if set.
PLAIN_TIMER_TEST = """package example;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import io.github.kpurgatory.vectors.Binding;
import io.github.kpurgatory.vectors.Params;
import io.github.kpurgatory.vectors.TimerUnderTest;
import io.github.kpurgatory.vectors.VectorTests;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

class PlainTimerVectorsTest extends VectorTests {
    static final String MISBEHAVE = System.getenv().getOrDefault("MISBEHAVE", "");
    static final long SHIFT_MS = Long.parseLong(System.getenv().getOrDefault("SHIFT_MS", "0"));

    static final class PlainTimer implements TimerUnderTest {
        private final Map<String, Long> due = new HashMap<>();
        private long now;
        private Consumer<String> run;

        public void init(Params params, Consumer<String> run) {
            now = params.startMs();
            this.run = run;
        }

        public void add(String task, long delayMs) {
            if (MISBEHAVE.equals("recurse") && task.equals("boom")) {
                deeper(0);
            }
            if (MISBEHAVE.equals("divide") && now > Long.MAX_VALUE / 2) {
                throw new ArithmeticException("/ by zero");
            }
            due.remove(task);
            if (delayMs <= 0) {
                run.accept(task);
            } else {
                due.put(task, now + delayMs);
            }
        }

        public void cancel(String task) {
            due.remove(task);
        }

        public void advance(long toMs) {
            while (MISBEHAVE.equals("hang") && due.containsKey("boom")) {
                Thread.onSpinWait();  // never returns, deaf to interrupts
            }
            now = toMs;
            long upTo = SHIFT_MS > 0 && toMs > Long.MAX_VALUE - SHIFT_MS ? Long.MAX_VALUE : toMs + SHIFT_MS;
            due.entrySet().stream().filter(e -> e.getValue() <= upTo).sorted(Map.Entry.comparingByValue())
                    .map(Map.Entry::getKey).toList().forEach(task -> {
                        due.remove(task);
                        run.accept(task);
                    });
        }

        public long size() {
            return due.size();
        }

        public List<String> shutdown() {
            return new ArrayList<>(due.keySet());
        }

        private static long deeper(long n) {
            return deeper(n + 1) + 1;
        }
    }

    @Override
    protected Binding binding() {
        var declarations = JsonNodeFactory.instance.objectNode();
        if (System.getenv("KAFKA_VERSION") != null) {
            declarations.put("kafka_version", System.getenv("KAFKA_VERSION"));
        }
        if (System.getenv("FIRING") != null) {
            declarations.put("firing", System.getenv("FIRING"));
        }
        return TimerUnderTest.binding("plain timer", "contract", declarations, true, params -> null, PlainTimer::new);
    }
}
"""


def plain_timer_project(tmp: Path) -> Path:
    project = tmp / "plain-timer-vectors"
    (project / "src/test/java/example").mkdir(parents=True)
    (project / "pom.xml").write_text(USER_POM.format(**coordinates()))
    (project / "src/test/java/example/PlainTimerVectorsTest.java").write_text(PLAIN_TIMER_TEST)
    return project


def case_lines(output: str, results: dict) -> list[str]:
    """Per case, the runner's first output line about it when it did not pass, and its verdict and reason."""
    return [line for case in results["cases"] for line in
            ([next((line for line in output.splitlines() if case["path"] in line), "")] * (case["verdict"] != "pass")
             + [f"{case['path']}: {case['verdict']} {case['reason'] or ''}"]) if line]


def test_a_binding_that_overflows_its_stack_fails_that_case_only(installed, tmp_path):
    started = time.monotonic()
    completed, results, counts = run_vectors(plain_timer_project(tmp_path), boom_tree(tmp_path / "tree"), tmp_path,
                                             MISBEHAVE="recurse")
    elapsed = time.monotonic() - started
    print(f"stack overflow: {elapsed:.1f} s (mvn test), the runner says:", *case_lines(completed.stdout, results),
          sep="\n  ")
    assert completed.returncode == 1 and counts["failures"] == 1 and counts["errors"] == 0, completed.stdout[-3000:]
    by = {case["path"].split("/")[-1]: case for case in results["cases"]}
    assert by["1.boom.jsonl"]["reason"] == "failed: java.lang.StackOverflowError" and by["1.boom.jsonl"]["step"] == 2
    assert [case["verdict"] for name, case in sorted(by.items()) if name != "1.boom.jsonl"] == ["pass"] * 4
    assert "1.boom.jsonl: step 2 timer_add" in completed.stdout and "StackOverflowError" in completed.stdout


def test_a_call_that_never_returns_fails_as_hung_and_the_run_goes_on(installed, tmp_path):
    started = time.monotonic()
    completed, results, counts = run_vectors(plain_timer_project(tmp_path), boom_tree(tmp_path / "tree"), tmp_path,
                                             MISBEHAVE="hang", KPURGATORY_VECTORS_CALL_TIMEOUT_MS="2000")
    elapsed = time.monotonic() - started
    print(f"hung advance: {elapsed:.1f} s (mvn test, a 2 s limit), the runner says:",
          *case_lines(completed.stdout, results), sep="\n  ")
    assert completed.returncode == 1 and counts["failures"] == 1, completed.stdout[-3000:]
    by = {case["path"].split("/")[-1]: case for case in results["cases"]}
    assert by["1.boom.jsonl"]["reason"] == "hung: no answer to advance within 2 s" and by["1.boom.jsonl"]["step"] == 3
    # the cases after it ran on a new instance, while the abandoned thread spins on
    assert [case["verdict"] for name, case in sorted(by.items()) if name != "1.boom.jsonl"] == ["pass"] * 4


@pytest.mark.parametrize("shift, firing, step, reason", [
    (-1, "never_early_up_to_tick_late", None, None),  # hi null: never late, even after an advance to 2^63-1
    (-1, "kafka", 3, "on_time: still pending after advance to 9223372036854775807, past their firing window "
                     "(kafka): max"),
    (1, "never_early_up_to_tick_late", 2,  # lo kept
     "on_time: max ran at 9223372036854775806, before its window opens at 9223372036854775807")])
def test_a_window_ending_past_long_max_is_never_late(installed, far_deadline_tree, tmp_path, shift, firing, step,
                                                    reason):
    """A window whose hi is null (its end past 2^63-1, specs/vectors.md §2) keeps its lo and is never late; a real hi
    of 2^63-1 is late after an advance to 2^63-1."""
    completed, results, counts = run_vectors(plain_timer_project(tmp_path), far_deadline_tree, tmp_path,
                                             SHIFT_MS=str(shift), FIRING=firing)
    [case] = results["cases"]
    assert (case["verdict"], case["step"], case["reason"]) == ("fail" if step else "pass", step, reason), \
        completed.stdout[-3000:]
    assert completed.returncode == (1 if step else 0)


@pytest.mark.parametrize("mode, reason", [("hang", "hung: no answer to "),
                                          ("crash", "crashed: the adapter exited (status 3); its stderr ends: "
                                                    "simulated crash")])
def test_an_adapter_that_breaks_once_is_replaced(installed, vector_tree, tmp_path, mode, reason):
    """The first adapter breaks at its first run's second command; the driver kills it and starts the next one,
    which behaves: every other case passes, and the run ends."""
    once = tmp_path / "broke-once"
    adapter = (f"if mkdir {once} 2>/dev/null; then exec {sys.executable} {MISBEHAVING} {mode} 3; "
               f"else exec {BUILTIN}; fi")
    started = time.monotonic()
    completed, results, counts = run_vectors(user_project(tmp_path), vector_tree, tmp_path, adapter=adapter,
                                             KPURGATORY_VECTORS_CALL_TIMEOUT_MS="2000")
    print(f"adapter {mode} once: {time.monotonic() - started:.1f} s (mvn test)")
    failed = [case for case in results["cases"] if case["verdict"] == "fail"]
    assert completed.returncode == 1 and len(failed) == 1, completed.stdout[-3000:]
    assert failed[0]["reason"].startswith(reason) and failed[0]["step"] == 2
    assert all(case["verdict"] == "pass" for case in results["cases"] if case["verdict"] != "skip" and case != failed[0])


def test_a_run_in_which_no_case_ran_fails(installed, vector_tree, tmp_path):
    """A timer binding following Kafka 3.9.0 on a tree of current Kafka: nothing runs, and the run says why."""
    tree = subtree(vector_tree, tmp_path / "tree", lambda entry: entry["kind"] == "scenarios")
    completed, results, counts = run_vectors(plain_timer_project(tmp_path), tree, tmp_path, KAFKA_VERSION="3.9.0")
    skips = {case["reason"] for case in results["cases"]}
    assert completed.returncode == 1 and counts["failures"] == 1 and {case["verdict"] for case in results["cases"]} \
        == {"skip"}, completed.stdout[-3000:]
    assert skips == {"profile purgatory is not implemented",
                     "the case is about Kafka (current); the binding declares 3.9.0"}
    assert f"no case ran: all {len(results['cases'])} were skipped (" in completed.stdout
    assert "make a tree for it with `kpurgatory vectors DIR --kafka-version 3.9.0`" in completed.stdout


@pytest.mark.parametrize("release", [None, "3.9.0"])  # the release of `release_tree`
def test_failing_as_kafka_does_is_reported_under_the_finding(installed, vector_tree, release_tree, tmp_path, release):
    """The interval-divides-by-zero finding's case, on a binding that divides by zero there as Kafka's wheel does:
    a failure under the finding's name, or a pass for a binding following Kafka 3.9.0."""
    tree = subtree(release_tree if release else vector_tree, tmp_path / "tree",
                   lambda entry: entry["finding"] == "interval-divides-by-zero")
    completed, results, counts = run_vectors(plain_timer_project(tmp_path), tree, tmp_path, MISBEHAVE="divide",
                                             **({"KAFKA_VERSION": release} if release else {}))
    [case] = results["cases"]
    assert case["finding"] == "interval-divides-by-zero" and case["step"] == 1
    assert case["reason"].startswith("as Kafka does: interval-divides-by-zero (failed: java.lang.ArithmeticException: "
                                     "/ by zero")
    assert case["verdict"] == ("pass" if release else "fail")
    assert completed.returncode == (0 if release else 1), completed.stdout[-3000:]
    assert "as Kafka does: interval-divides-by-zero" in completed.stdout


def test_purgatory_cases_are_judged_at_the_contract_level(installed, vector_tree, tmp_path):
    completed, results, counts = run_vectors(user_project(tmp_path), vector_tree, tmp_path, adapter=BUILTIN,
                                             KPURGATORY_LEVEL="contract")
    assert completed.returncode == 0, completed.stdout[-3000:]
    purgatory = [case for case in results["cases"] if case["path"].startswith("1/purgatory/")]
    assert {case["verdict"] for case in purgatory if "/releases/" not in case["path"]} == {"pass"}


def test_a_purgatory_mutant_fails_the_contract_naming_the_property(installed, vector_tree, tmp_path):
    completed, results, counts = run_vectors(
        user_project(tmp_path), vector_tree, tmp_path, KPURGATORY_LEVEL="contract",
        adapter=f"{ADAPTER} kpurgatory.conformance.tools.mutants:double_completion")
    failed = [case for case in results["cases"] if case["verdict"] == "fail"]
    assert completed.returncode == 1 and failed
    assert all(case["reason"].startswith("exactly_once: ") and "completed a second time" in case["reason"]
               for case in failed), failed
    assert f"kpurgatory replay {failed[0]['observed']} --level contract" in completed.stdout
