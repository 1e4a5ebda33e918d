"""``kpurgatory matrix``: one row per system, one cell per check, each with its verdict, linked to its
counterexamples; the exit code says the worst. The systems are fast in-process ones (the built-in implementation and
the model with one planted difference each, defined here), never Kafka's jars: a release row is driven through a
stand-in for the Kafka adapter's module."""

import html
import json
import os
import sys
import types
from pathlib import Path
from urllib.parse import quote

import attrs
import click
import pytest
from click.testing import CliRunner

from kpurgatory.conformance.adapters.reference import ModelSystem
from kpurgatory.conformance.cli import main
from kpurgatory.conformance.tools import matrix
from kpurgatory.conformance.traces.codec import read_traces
from kpurgatory.conformance.traces.replay import format_command
from kpurgatory.model import vocabulary as v
from kpurgatory.model.releases import Release

HERE = Path(__file__).parent
BUILTIN = "kpurgatory.conformance.adapters.builtin:factory"
CRASHES = f"{sys.executable} {HERE / 'misbehaving_adapter.py'} crash 0"
#: markup that would run if the page let a system's text through unescaped
HOSTILE = '<script>document.body.dataset.pwned=1</script><img src=x onerror="document.body.dataset.pwned=1">'


class Hostile(ModelSystem):
    """Markup where a system's text goes: its name, and its answers to the timer's size."""

    def hello(self):
        return attrs.evolve(super().hello(), implementation=HOSTILE)

    def step(self, command):
        observation = super().step(command)
        if isinstance(command, v.Size) and self.model.profile == "timer":
            return attrs.evolve(observation, result=HOSTILE)
        return observation


class HostileHello(ModelSystem):
    """Markup in how it fails to introduce itself."""

    def hello(self):
        raise RuntimeError(HOSTILE)


class UncoveredRelease(click.ClickException):
    """What the Kafka adapter's module raises for a release it does not drive: a usage error."""

    exit_code = 2


class TimerOnly(ModelSystem):
    def hello(self):
        return attrs.evolve(super().hello(), profiles=("timer",))


@pytest.fixture
def importable(monkeypatch):
    """This module and planted.py importable by name (test_matrix:Hostile, planted:KafkaLike) for --impl."""
    monkeypatch.syspath_prepend(str(HERE))


#: every verdict, quickly: Kafka's findings and a wrong answer in scenarios, a crash at hello, a timer-only system
EVERY_VERDICT = ["--impl", f"ok={BUILTIN}", "--impl", "kafka-like=planted:KafkaLike", "--impl",
                 "hostile=test_matrix:Hostile", "--impl", "hostile-hello=test_matrix:HostileHello", "--impl",
                 "timer-only=test_matrix:TimerOnly", "--adapter",
                 f"crashes={CRASHES}", "--checks", "purgatory/exact,scenarios", "--examples", "8", "--max-failures",
                 "1", "--timeout", "5"]


def invoke(*args: str):
    return CliRunner().invoke(main, ["matrix", *args], terminal_width=200)


def verdicts(out: Path) -> dict[str, dict[str, str]]:
    data = json.loads((out / "matrix.json").read_text())
    return {row["name"]: {column: cell["verdict"] for column, cell in row["cells"].items()} for row in data["rows"]}


def test_each_cell_has_its_verdict_and_the_exit_code_the_worst(importable, tmp_path):
    out = tmp_path / "m"
    result = invoke(*EVERY_VERDICT, "--out", str(out))
    assert result.exit_code == 3, result.output  # a system that could not be driven outranks a failure
    shown = verdicts(out)
    assert shown["kafka-like"].pop("purgatory/exact") in ("pass", "finding")  # as far as 8 runs reach the edge
    assert shown == {
        "crashes": {"purgatory/exact": "broke", "scenarios": "skipped"},
        "ok": {"purgatory/exact": "pass", "scenarios": "pass"},
        "kafka-like": {"scenarios": "finding"},
        "hostile": {"purgatory/exact": "pass", "scenarios": "failure"},
        "hostile-hello": {"purgatory/exact": "broke", "scenarios": "skipped"},
        "timer-only": {"purgatory/exact": "n/a", "scenarios": "pass"},
    }
    data = json.loads((out / "matrix.json").read_text())
    assert data["format"] == "kpurgatory-matrix" and data["budget"]["seed"] == 1
    assert {"date", "load_average", "cores"} <= data["environment"].keys()
    assert data["totals"] == {verdict: sum(cell == verdict for row in verdicts(out).values() for cell in row.values())
                              for verdict in matrix.VERDICTS} | {"seconds": data["totals"]["seconds"]}
    rows = {row["name"]: row for row in data["rows"]}
    assert "simulated crash" in rows["crashes"]["cells"]["purgatory/exact"]["note"]
    assert HOSTILE in rows["hostile-hello"]["cells"]["purgatory/exact"]["note"]
    found = rows["kafka-like"]["cells"]["scenarios"]["findings"]
    assert "deadline-wraps" in {finding["name"] for finding in found}
    assert all(finding["ticket"] and finding["releases"] and finding["description"] and finding["scenario"]
               for finding in found)
    met = [finding for cell in rows["kafka-like"]["cells"].values() for finding in cell["findings"]]
    assert [finding["name"] for finding in data["findings"]] == list(dict.fromkeys(f["name"] for f in met))
    assert all(finding["rows"] == ["kafka-like"] for finding in data["findings"])  # the legend: each met once
    hostile = rows["hostile"]["cells"]["scenarios"]
    assert hostile["runs"] == len(matrix.scenarios()) and hostile["failures"]
    assert all(HOSTILE in failure["summary"] for failure in hostile["failures"])
    assert rows["timer-only"]["cells"]["scenarios"]["skipped"] > 0  # the purgatory's scenarios
    for line in ("ok: ", "scenarios: finding (deadline-wraps", "page: ", "matrix.json"):
        assert line in result.output


def test_every_counterexample_the_matrix_names_is_there_and_on_the_page(importable, tmp_path):
    out = tmp_path / "m"
    result = invoke("--impl", "kafka-like=planted:KafkaLike", "--impl", "hostile=test_matrix:Hostile", "--checks",
                    "timer/exact", "--examples", "12", "--steps", "10", "--max-failures", "1", "--out", str(out))
    assert result.exit_code == 1, result.output
    assert verdicts(out) == {"kafka-like": {"timer/exact": "finding"}, "hostile": {"timer/exact": "failure"}}
    data = json.loads((out / "matrix.json").read_text())
    named = [entry for row in data["rows"] for cell in row["cells"].values()
             for entry in cell["findings"] + cell["failures"]]
    assert named and all(entry["trace"] and "view" not in entry for entry in named)
    page = (out / "index.html").read_text()
    for entry in named:
        assert not Path(entry["trace"]).is_absolute()  # relative to the page, so the folder can move
        [trace] = read_traces(out / entry["trace"])
        assert f'href="{quote(entry["trace"])}"' in page  # linked, and its steps shown
        assert html.escape(format_command(trace.steps[-1].command)) in page
    finding = data["rows"][0]["cells"]["timer/exact"]["findings"][0]
    assert finding["trace"] == f"kafka-like/timer-exact/finding-timer-1-{finding['name']}.jsonl"
    assert (out / finding["trace"]).with_suffix(".txt").exists()
    assert not (out / "kafka-like" / "scenarios").exists()  # only what found something has a folder
    again = invoke("--impl", f"ok={BUILTIN}", "--checks", "timer/exact", "--out", str(out))
    assert again.exit_code == 0, again.output
    assert sorted(path.name for path in out.iterdir()) == ["index.html", "matrix.json"]  # the old rows' are gone


def outputs(out: Path) -> dict:
    """What a matrix run wrote, but for its timings and environment: the data, and every other file but the page
    (which shows the timings), byte for byte."""
    data = json.loads((out / "matrix.json").read_text())
    for key in ("environment", "command"):
        del data[key]
    del data["totals"]["seconds"]
    for row in data["rows"]:
        del row["seconds"], row["date"]
        for result in row["cells"].values():
            del result["seconds"]
    files = {path.relative_to(out).as_posix(): path.read_bytes() for path in sorted(out.rglob("*"))
             if path.is_file() and path.name not in ("matrix.json", "index.html")}
    return {"data": data, "files": files}


def test_cells_run_on_worker_processes_give_the_serial_matrix(importable, tmp_path):
    """-j 2 runs the cells in worker processes, each writing its counterexamples to a folder of its own that comes
    back to --out: the same matrix and files as -j 1. The concurrent check's threads meet a race or not depending on
    timing, so it runs on a system that has none."""
    for name, args in (("every-verdict", [*EVERY_VERDICT, "--steps", "10"]),
                       ("threads", ["--impl", f"ok={BUILTIN}", "--impl", "timer-only=test_matrix:TimerOnly",
                                    "--checks", "timer/contract,purgatory/threads", "--thread-runs", "3",
                                    "--examples", "5", "--steps", "10"])):
        serial, parallel = (invoke(*args, *jobs, "--out", str(tmp_path / name / how))
                            for how, jobs in (("serial", []), ("parallel", ["-j", "2"])))
        assert serial.exit_code == parallel.exit_code, parallel.output
        assert outputs(tmp_path / name / "parallel") == outputs(tmp_path / name / "serial")
        environment = json.loads((tmp_path / name / "parallel" / "matrix.json").read_text())["environment"]
        assert environment["runner"] == "on 2 local worker processes (-j 2)" and environment["wall_s"] > 0
    found = outputs(tmp_path / "every-verdict" / "parallel")
    assert any(name.startswith("kafka-like/scenarios/") for name in found["files"])  # shipped back from a worker
    threads = outputs(tmp_path / "threads" / "parallel")["data"]
    assert threads["budget"]["thread_runs"] == 3 and threads["rows"][0]["cells"]["purgatory/threads"]["runs"] == 3
    assert "wall time on 2 local worker processes" in (tmp_path / "threads" / "parallel" / "index.html").read_text()


def test_a_release_row_names_no_path_of_this_machine(tmp_path):
    """A release's adapter command names the jars in ~/.m2 and the adapter's script: the matrix gives the jars'
    Maven coordinates and the script's path relative to the page."""
    out = tmp_path / "docs" / "matrix"
    repository = Path.home() / ".m2" / "repository"
    command = (f"bash {HERE.parents[1] / 'conformance' / 'kafka' / 'run.sh'} --era java-purgatory "
               f"--kafka-version 4.4.0 {repository}/org/apache/kafka/kafka-clients/4.4.0/kafka-clients-4.4.0.jar:"
               f"{repository}/com/yammer/metrics/metrics-core/2.2.0/metrics-core-2.2.0.jar")
    expected = (f"bash {os.path.relpath(HERE.parents[1], out.resolve())}/conformance/kafka/run.sh --era "
                f"java-purgatory --kafka-version 4.4.0 "
                f"org.apache.kafka:kafka-clients:4.4.0,com.yammer.metrics:metrics-core:2.2.0")
    assert matrix.portable(command, out) == expected
    assert matrix.portable(BUILTIN, out) == BUILTIN


def test_only_passes_and_findings_exit_0_and_a_failure_exits_1(importable, tmp_path):
    passing = invoke("--impl", f"ok={BUILTIN}", "--impl", "kafka-like=planted:KafkaLike", "--checks",
                     "scenarios", "--timeout", "5", "--out", str(tmp_path / "a"))
    assert passing.exit_code == 0, passing.output
    failing = invoke("--impl", f"ok={BUILTIN}", "--impl", "hostile=test_matrix:Hostile", "--checks", "scenarios",
                     "--out", str(tmp_path / "b"))
    assert failing.exit_code == 1, failing.output


@pytest.mark.parametrize("args, message", [
    (["--checks", "timer/fast"], "unknown checks timer/fast"),
    (["--impl", "no-name"], "expected NAME=..."),
    (["--impl", f"a={BUILTIN}", "--adapter", "a=true"], "two systems named 'a'"),
    (["--releases", "4.x"], "not a Kafka release number"),
    (["--releases", "0.8.2.2"], "predates the hierarchical timing wheel"),
    (["--impl", "a=no.such.module:factory"], "cannot import"),
    (["-j", "2", "--master", "local[2]"], "not both"),
    (["--conf", "spark.ui.enabled=false"], "only with --master"),
])
def test_usage_errors_exit_2(tmp_path, args, message):
    result = invoke(*args, "--out", str(tmp_path))
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "matrix.json").exists()


def test_merge_keeps_the_rows_this_run_does_not_redo(importable, tmp_path):
    out = tmp_path / "m"
    assert invoke("--impl", f"a={BUILTIN}", "--impl", "b=test_matrix:TimerOnly", "--checks", "timer/contract",
                  "--out", str(out)).exit_code == 0
    first = json.loads((out / "matrix.json").read_text())
    assert invoke("--impl", "b=test_matrix:TimerOnly", "--impl", "c=test_matrix:TimerOnly", "--checks",
                  "purgatory/exact", "--merge", "--out", str(out)).exit_code == 0
    data = json.loads((out / "matrix.json").read_text())
    assert [row["name"] for row in data["rows"]] == ["a", "b", "c"]
    assert data["rows"][0] == first["rows"][0]
    assert verdicts(out)["b"] == {"purgatory/exact": "n/a"}  # redone with this run's checks
    assert [column["id"] for column in data["columns"]] == ["timer/contract", "purgatory/exact"]
    assert invoke("--impl", f"a={BUILTIN}", "--checks", "timer/contract", "--out", str(out)).exit_code == 0
    assert verdicts(out) == {"a": {"timer/contract": "pass"}}  # without --merge: this run's rows only
    (out / "index.html").unlink()
    rendered = invoke("--page-only", "--out", str(out))
    assert rendered.exit_code == 0, rendered.output
    assert (out / "index.html").read_text() == matrix.page(json.loads((out / "matrix.json").read_text()), out)
    (out / "matrix.json").write_text("{}")
    refused = invoke("--impl", "b=test_matrix:TimerOnly", "--merge", "--out", str(out))
    assert refused.exit_code == 2 and "is not a kpurgatory-matrix" in refused.output
    assert invoke("--page-only", "--out", str(tmp_path / "none")).exit_code == 2


def test_a_release_row_runs_its_adapter_and_says_which_rules_it_lacks(tmp_path, monkeypatch):
    """The Kafka adapter's module stands in: 2.6.3's adapter is the built-in implementation over the stdio adapter;
    a release whose jars cannot be resolved broke, one the adapter does not cover is not applicable."""
    def adapter_command(version):
        if version == "3.9.2":
            raise click.ClickException("Maven could not resolve Kafka 3.9.2's jars (in this test)")
        if version == "0.10.0.1":
            raise UncoveredRelease("the adapter does not cover 0.10.0.1 (in this test)")
        return f"{sys.executable} -m kpurgatory.conformance.adapters.stdio {BUILTIN}"

    stand_in = types.ModuleType("kpurgatory.conformance.adapters.kafka")
    stand_in.adapter_command = adapter_command
    monkeypatch.setitem(sys.modules, stand_in.__name__, stand_in)
    out = tmp_path / "m"
    result = invoke("--releases", "3.9.2,2.6.3,0.10.0.1", "--checks", "timer/contract,purgatory/threads", "--out",
                    str(out))
    assert result.exit_code == 3, result.output
    assert verdicts(out) == {"0.10.0.1": {"timer/contract": "n/a", "purgatory/threads": "n/a"},  # by version
                             "2.6.3": {"timer/contract": "pass", "purgatory/threads": "n/a"},  # not concurrent
                             "3.9.2": {"timer/contract": "broke", "purgatory/threads": "skipped"}}
    rows = {row["name"]: row for row in json.loads((out / "matrix.json").read_text())["rows"]}
    assert rows["2.6.3"]["lacks"] == [rule.ticket for rule in Release.parse("2.6.3").differences()]
    assert "KAFKA-8334" in rows["2.6.3"]["lacks"] and rows["2.6.3"]["kind"] == "release"
    assert "could not resolve Kafka 3.9.2" in rows["3.9.2"]["cells"]["timer/contract"]["note"]
    assert "does not cover 0.10.0.1" in rows["0.10.0.1"]["note"]
    page = (out / "index.html").read_text()
    grid = {row.partition('">')[0]: row for row in page.split('<tr data-row="')[1:4]}  # the grid: releases by version
    assert list(grid) == ["0.10.0.1", "2.6.3", "3.9.2"] and 'id="bug-KAFKA-8334"' in page
    assert 'data-state="unmet" title="2.6.3, before KAFKA-8334: has it' in grid["2.6.3"]  # it lacks the rule
    assert 'data-state="fixed" title="3.9.2, before KAFKA-8334' in grid["3.9.2"]
    assert 'class="badge broke"' in grid["3.9.2"] and "badge" not in grid["2.6.3"]


def test_the_committed_matrix_page_is_the_page_of_its_data():
    folder = HERE.parents[1] / "docs" / "matrix"
    if not (folder / "matrix.json").exists():
        pytest.skip("no committed matrix")
    data = json.loads((folder / "matrix.json").read_text())
    assert (folder / "index.html").read_text() == matrix.page(data, folder), \
        "docs/matrix/index.html is stale: kpurgatory matrix --page-only --out docs/matrix"
    entries = [entry for row in data["rows"] for cell in row["cells"].values()
               for entry in cell["findings"] + cell["failures"] if entry.get("trace")]
    assert entries and all((folder / entry["trace"]).is_file() for entry in entries)


def test_page_only_makes_the_committed_page_from_what_the_repository_keeps(tmp_path):
    """A fresh clone has the matrix's data and traces, and no counterexample's page: that is all the page needs."""
    folder = HERE.parents[1] / "docs" / "matrix"
    if not (folder / "matrix.json").exists():
        pytest.skip("no committed matrix")
    copy = tmp_path / "docs" / "matrix"
    for path in [folder / "matrix.json", *folder.glob("*/*/*.jsonl")]:
        (copy / path.relative_to(folder)).parent.mkdir(parents=True, exist_ok=True)
        (copy / path.relative_to(folder)).write_bytes(path.read_bytes())
    result = CliRunner().invoke(main, ["matrix", "--page-only", "--out", str(copy)])
    assert result.exit_code == 0, result.output
    assert (copy / "index.html").read_text() == (folder / "index.html").read_text()
    assert sorted(path.suffix for path in copy.rglob("*") if path.is_file() and path.suffix != ".jsonl") == \
        [".html", ".json"]  # nothing else written


def test_the_command_is_recorded_as_typed_in_its_folder(importable, tmp_path, monkeypatch):
    """The page's Regenerate line: no absolute path of the folder the matrix ran in, nor of the home directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["kpurgatory", "matrix", "--impl", f"ok={BUILTIN}", "--checks", "timer/contract",
                                      "--examples", "3", "--out", str(tmp_path / "docs" / "m")])
    assert invoke(*sys.argv[2:]).exit_code == 0
    data = json.loads((tmp_path / "docs" / "m" / "matrix.json").read_text())
    assert data["command"] == f"kpurgatory matrix --impl ok={BUILTIN} --checks timer/contract --examples 3 --out docs/m"
    assert "kpurgatory matrix --page-only --out docs/m" in (tmp_path / "docs" / "m" / "index.html").read_text()
    home = Path.home()
    assert matrix.typed(["--out", str(home / "m"), f"--adapter=a=python {tmp_path / 'a.py'} x", "--out=/srv/m"],
                        tmp_path) == "kpurgatory matrix --out '~/m' '--adapter=a=python a.py x' --out=/srv/m"


def test_a_kept_row_names_its_traces_once(tmp_path):
    """--merge keeps a driver's words with the copy beside the page for the path it named, and leaves a path it
    already rewrote alone."""
    trace = "impl/vectors-timer-scenarios/case.observed.jsonl"
    row = {"kind": "vectors", "target": "go driver, /tmp/x/results.json", "cells": {"vectors timer/scenarios": {
        "note": "first: observed run: /tmp/drv/case.observed.jsonl", "findings": [], "failures": [
            {"trace": trace, "view": trace.replace(".jsonl", ".html"),
             "summary": f"observed run: /tmp/drv/case.observed.jsonl\nreplay it: kpurgatory replay {trace}"}]}}}
    matrix.kept(row, tmp_path)
    cell = row["cells"]["vectors timer/scenarios"]
    assert cell["failures"][0] == {"trace": trace, "summary": f"observed run: {trace}\nreplay it: kpurgatory replay "
                                                              f"{trace}"}
    assert cell["note"] == f"first: observed run: {trace}" and row["target"] == "go driver, results.json"
