"""`kpurgatory prove`: table and JSON output, trace files, exit status, the generated document."""

import json
from pathlib import Path

from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.traces.codec import read_traces
from kpurgatory.specs.document import render

SPECS = Path(__file__).resolve().parents[2] / "specs"


def test_prove_json_and_traces(tmp_path):
    result = CliRunner().invoke(main, ["prove", "--json", "--jobs", "1", "--out", str(tmp_path),
                                       "--only", "wheel.refusal.*", "--only", "mutant.purgatory.*"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"]
    rows = {row["name"]: row for row in report["obligations"]}
    assert set(rows) == {"wheel.refusal.exact", "mutant.purgatory.purge_ge"}
    assert rows["wheel.refusal.exact"]["result"] == "proved"
    assert rows["mutant.purgatory.purge_ge"]["result"] == "refuted"
    for row in rows.values():
        assert row["domain"] and row["statement"] and row["seconds"] >= 0
    (path,) = rows["mutant.purgatory.purge_ge"]["traces"]
    (trace,) = read_traces(path)
    assert trace.trace_id == "specs.mutant.purgatory.purge_ge"
    replayed = CliRunner().invoke(main, ["replay", path])
    assert replayed.exit_code == 0, replayed.output


def test_prove_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["prove", "--jobs", "1", "--only", "wheel.placement.*",
                                       "--only", "mutant.wheel.*"])
    assert result.exit_code == 0, result.output
    for text in ("wheel.placement.index_in_range", "wheel.placement.bucket_expiration", "proved", "its mutant",
                 "refuted", "domain"):
        assert text in result.output
    assert list(tmp_path.iterdir()) == [], "traces go to a temporary directory unless --out is given"
    assert "kpurgatory-prove-" in result.output


def test_prove_rejects_an_unknown_pattern():
    result = CliRunner().invoke(main, ["prove", "--only", "nothing.matches"])
    assert result.exit_code != 0


def test_list():
    result = CliRunner().invoke(main, ["prove", "--list", "--only", "interleaving.*"])
    assert result.exit_code == 0 and "interleaving.no_lost_wakeup" in result.output


def test_obligations_md_is_generated_from_the_code():
    assert (SPECS / "obligations.md").read_text() == render(), "run: kpurgatory prove --markdown > specs/obligations.md"


def test_a_resource_limit_hit_is_reported_as_such(tmp_path, monkeypatch):
    """z3's budget is counted in its own steps, so a query that needs more than it is 'unknown: resource limit' on
    every machine: neither proved nor refuted nor 'not inductive', and prove fails."""
    from kpurgatory.specs import core

    monkeypatch.setattr(core, "DEFAULT_RLIMIT", 20_000)
    result = CliRunner().invoke(main, ["prove", "--json", "--jobs", "1", "--out", str(tmp_path),
                                       "--only", "purgatory.cleanup.map", "--only", "wheel.refusal.exact"])
    assert result.exit_code == 1, result.output
    rows = {row["name"]: row for row in json.loads(result.output)["obligations"]}
    assert {row["result"] for row in rows.values()} == {"unknown: resource limit"}, rows


def test_prove_names_the_obligations_it_is_discharging_on_a_terminal_only(monkeypatch):
    only = ["--only", "wheel.refusal.*", "--only", "mutant.purgatory.purge_ge"]
    quiet = CliRunner().invoke(main, ["prove", "--json", "--jobs", "2", *only])
    assert quiet.exit_code == 0 and quiet.stderr == ""  # a log or a pipe gets the report alone
    monkeypatch.setenv("FORCE_COLOR", "1")  # stderr counts as a terminal
    shown = CliRunner().invoke(main, ["prove", "--json", "--jobs", "2", *only])
    assert shown.exit_code == 0, shown.output
    assert [row["name"] for row in json.loads(shown.stdout)["obligations"]] == \
        [row["name"] for row in json.loads(quiet.stdout)["obligations"]]  # stdout is the same report
    for text in ("proving", "wheel.refusal.exact", "mutant.purgatory.purge_ge", "0/2"):
        assert text in shown.stderr
