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
import xml.etree.ElementTree as ElementTree
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.tools import vectors
from kpurgatory.model import vocabulary as v

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
DRIVER, EXAMPLES = CONFORMANCE / "drivers" / "java", CONFORMANCE / "examples"
pytestmark = pytest.mark.skipif(shutil.which("mvn") is None or shutil.which("java") is None,
                                reason="Maven and a JDK are needed to build the Java driver")
ADAPTER = f"{sys.executable} -m kpurgatory.conformance.adapters.stdio"
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


def run_vectors(project: Path, tree: Path, tmp: Path, *,
                adapter: str | None = None) -> tuple[subprocess.CompletedProcess, dict, dict]:
    """`mvn test` in the project; its output, the results file and Surefire's counts."""
    env = {**os.environ, "KPURGATORY_VECTORS": str(tree), "KPURGATORY_VECTORS_OUT": str(tmp / "observed"),
           "KPURGATORY_VECTORS_RESULTS": str(tmp / "results.json")}
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
    completed, results, counts = run_vectors(user_project(tmp_path), vector_tree, tmp_path,
                                             adapter=f"{ADAPTER} kpurgatory.conformance.adapters.builtin:factory")
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
    # its one divergence (README, Findings) needs an advance to Long.MAX_VALUE, which this tree may or may not hold
    failed = [case for case in results["cases"] if case["verdict"] == "fail"]
    assert all("agrona timer id" in case["reason"] for case in failed), failed
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
