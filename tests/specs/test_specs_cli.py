"""`kpurgatory prove`: table and JSON output, trace files, exit status, the generated document; premises decided
once, counterexamples with values, the table of bounds, the CPU total."""

import json
import time
from pathlib import Path

from click.testing import CliRunner
import pytest
import z3

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.traces.codec import read_traces
from kpurgatory.specs import core
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


# ---------------------------------------------------------------------------------------------------------------
# Reporting: premises decided once, counterexamples with values, the table of bounds, the CPU total
# ---------------------------------------------------------------------------------------------------------------

def toy_registry(step: int, calls: list[tuple[str, bool]], *, bound: core.Bound | None = None) -> dict:
    """A counter x from 0, advanced by ``step`` per command, with the shared invariant "x >= 0 and x is even"
    (inductive for an even step, not for an odd one) and three obligations that rest on it. ``calls`` records
    every run of a dependant (name, mutated)."""

    def invariant(mutated: bool = False):
        """x stays a non-negative even number (its mutant starts the counter at 1)."""
        x, n = z3.Int("x"), z3.Int("x'")
        start = core.find([x == (1 if mutated else 0), x % 2 != 0])
        if start.status == core.REFUTED:
            return core.Outcome(core.REFUTED, "initiation", "the initial state is odd", witness={"x": 1})
        clauses = {"nonneg": n >= 0, "even": n % 2 == 0}
        answer = core.find([x >= 0, x % 2 == 0, n == x + step, z3.Not(z3.And(*clauses.values()))])
        if answer.status != core.REFUTED:
            return core.Outcome(answer.status, "induction")
        witness = core.induction_counterexample(answer.model, {"x": x}, {"advance by": z3.IntVal(step)}, {"x": n},
                                                clauses)
        return core.Outcome(core.NOT_INDUCTIVE, "induction", "consecution fails", witness=witness)

    def dependant(name: str):
        def run(mutated: bool = False):
            calls.append((f"toy.{name}", mutated))
            held = core.premise("toy.invariant")
            if mutated:
                return core.Outcome(core.REFUTED, "BMC", "the mutant's run", witness={"x": 2 ** 63 - 5})
            return core.Outcome(core.PROVED, "induction", f"premise {held.status if held else 'not given'}")
        return run

    obligations = [core.Obligation("toy.invariant", "obligation", "x any integer; induction", core.PROVED,
                                   invariant, cost=1.0, mutant="odd step", declared_bound=bound)]
    obligations += [core.Obligation(f"toy.{name}", "obligation", "3 ops, 2 keys; induction", core.PROVED,
                                    dependant(name), mutant="a bug", rests_on="toy.invariant")
                    for name in ("even", "nonneg", "small")]
    return {ob.name: ob for ob in obligations}


@pytest.fixture
def toy(monkeypatch):
    """Install a toy registry: toy(step) -> the calls its dependants receive."""

    def install(step: int, **kwargs) -> list:
        calls: list = []
        monkeypatch.setattr(core, "load_all", lambda: toy_registry(step, calls, **kwargs))
        return calls

    return install


def test_a_broken_shared_invariant_is_decided_once_and_reported_on_one_line(toy, tmp_path):
    calls = toy(step=3)
    result = CliRunner().invoke(main, ["prove", "--jobs", "1", "--out", str(tmp_path)])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    # the dependants were not run (their mutants were: they show the teeth whatever the spec does)
    assert sorted(calls) == [("toy.even", True), ("toy.nonneg", True), ("toy.small", True)]
    grouped = [line for line in lines if "rest on toy.invariant" in line]
    assert grouped == ["3 obligations rest on toy.invariant, which is not inductive: see toy.invariant: toy.even, "
                       "toy.nonneg, toy.small"]
    assert [line for line in lines if line.startswith("toy.")] == ["toy.invariant (not inductive): consecution fails"]
    # the counterexample to induction, in values
    at = lines.index("toy.invariant (not inductive): consecution fails")
    assert lines[at + 1:at + 5] == ["    pre-state: x=0", "    command: advance by=3", "    post-state (changed): x=3",
                                    "    clause broken: even"]
    report = json.loads(CliRunner().invoke(main, ["prove", "--json", "--jobs", "2", "--out", str(tmp_path)]).output)
    rows = {row["name"]: row for row in report["obligations"]}
    assert {rows[name]["result"] for name in ("toy.even", "toy.nonneg", "toy.small")} == {"not inductive"}
    assert rows["toy.even"]["premise_failed"] == "toy.invariant" and rows["toy.invariant"]["premise_failed"] is None
    assert rows["toy.invariant"]["witness"]["clause broken"] == ["even"]


def test_a_proved_premise_is_handed_to_its_dependants(toy, tmp_path):
    calls = toy(step=2)
    result = CliRunner().invoke(main, ["prove", "--json", "--jobs", "1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)["obligations"]}
    assert rows["toy.invariant"]["result"] == "proved"
    assert {rows[name]["detail"] for name in ("toy.even", "toy.nonneg", "toy.small")} == {"premise proved"}
    assert ("toy.even", False) in calls
    # on its own a dependant is run as it is, without the premise
    alone = json.loads(CliRunner().invoke(main, ["prove", "--json", "--only", "toy.even"]).output)
    assert alone["obligations"][0]["detail"] == "premise not given"


def test_refuted_outcomes_print_their_values_readably(toy, tmp_path):
    toy(step=2)
    result = CliRunner().invoke(main, ["prove", "--json", "--jobs", "1", "--out", str(tmp_path)])
    mutant = json.loads(result.output)["obligations"][1]["mutant"]
    assert mutant["result"] == "refuted" and mutant["witness"] == {"x": 2 ** 63 - 5}
    assert core.render_witness({"x": 2 ** 63 - 5, "y": -2 ** 63, "z": 7}) == ["x: Long.MAX_VALUE - 4",
                                                                             "y: Long.MIN_VALUE", "z: 7"]


def test_a_refutation_names_its_trace_file_under_its_values(tmp_path):
    table = CliRunner().invoke(main, ["prove", "--only", "mutant.wheel.bucket_rounded_up", "--out", str(tmp_path)])
    lines = table.output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("mutant.wheel.bucket_rounded_up (refuted)"))
    (path,) = tmp_path.iterdir()
    assert lines[-2] == f"    trace: {path}" and all(line.startswith("    ") for line in lines[at + 1:-1])


def test_smallest_minimises_named_values_in_order():
    x, y = z3.BitVec("x", 64), z3.Int("y")
    answer, values = core.smallest([x > 1000, x < 5000, y > 0, z3.BV2Int(x) + y > 2000], {"x": x})
    assert answer.status == core.REFUTED and values == {"x": 1001}
    assert answer.model.eval(y).as_long() >= 1000
    answer, values = core.smallest([y > 5, y < 3], {"y": y})
    assert answer.status == core.PROVED and values == {}


def test_a_refuted_proof_query_carries_the_models_values():
    x, big = z3.BitVec("x", 64), z3.BitVec("big", 64)
    outcome = core.verdict(core.prove([x > 5, big == x], x + x > 0), "QF_BV")
    assert outcome.status == core.REFUTED and set(outcome.witness) == {"big", "x"}
    assert outcome.witness["x"] >= 2 ** 62  # x + x wraps
    named = core.verdict(core.prove([x > 5, big == x], x + x > 0), "QF_BV", values={"doubled": x + x})
    assert list(named.witness) == ["doubled"] and named.witness["doubled"] < 0


def test_list_prints_the_bounds_of_every_obligation():
    result = CliRunner().invoke(main, ["prove", "--list", "--only", "purgatory.exactly_once",
                                       "--only", "interleaving.no_lost_wakeup"])
    assert result.exit_code == 0, result.output
    for text in ("method", "unbounded", "bounded, and how", "trusted", "purgatory.exactly_once", "3 ops; 2 keys",
                 "run length (induction)", "exhaustive: every"):
        assert text in result.output
    listed = json.loads(CliRunner().invoke(main, ["prove", "--list", "--json"]).output)["obligations"]
    assert len(listed) == len(core.select())
    for row in listed:
        assert row["bound"]["method"] and row["statement"] and row["domain"], row
        assert row["trusted"] != "not stated", row["name"]
    by_name = {row["name"]: row["bound"] for row in listed}
    assert by_name["purgatory.exactly_once"]["bounded"].startswith("3 ops; 2 keys")
    assert by_name["interleaving.no_lost_wakeup"]["unbounded"] == "-"
    assert "2 threads; 2 calls; 1 key" in by_name["interleaving.no_lost_wakeup"]["bounded"]
    # what ties each family's encoding to model/: the refinements, model/ itself, or nothing
    trusted = {row["name"]: row["trusted"] for row in listed}
    assert "refinement.purgatory.inductive ties the two one step at a time" in trusted["purgatory.exactly_once"]
    assert "refinement.wheel.lifted ties each level's decisions" in trusted["wheel.levels.not_early"] \
        == trusted["mutant.wheel.bucket_rounded_up"]
    assert trusted["refinement.purgatory"].startswith("nothing but Python: model/ itself is run")
    assert "nothing ties it to model/" in trusted["interleaving.no_lost_wakeup"]
    assert "fairness read as a count" in trusted["purgatory.liveness.fair"]
    assert "the timer as a deadline per op" in trusted["refinement.purgatory.inductive"]
    assert by_name["refinement.purgatory.inductive"]["unbounded"].endswith("run length (induction)")


def test_a_declared_bound_replaces_the_one_read_from_the_domain(toy):
    toy(step=2, bound=core.Bound("induction", "x", "nothing"))
    listed = json.loads(CliRunner().invoke(main, ["prove", "--list", "--json"]).output)["obligations"]
    assert listed[0]["bound"] == {"method": "induction", "unbounded": "x", "bounded": "nothing"}
    assert listed[1]["bound"] == {"method": "induction", "unbounded": "run length (induction)",
                                  "bounded": "3 ops; 2 keys"}
    assert listed[1]["rests_on"] == "toy.invariant"


def test_the_cpu_total_counts_every_process(monkeypatch, tmp_path):
    """The workers' CPU is in the total: two obligations that each compute for a while in their own process."""

    def compute(mutated: bool = False):
        """Burns CPU for a while."""
        end = time.process_time() + 0.5
        while time.process_time() < end:
            pass
        return core.Outcome(core.BOUND, "sample")

    registry = {name: core.Obligation(name, "support", "a sample", core.BOUND, compute, mutant="none")
                for name in ("cpu.a", "cpu.b")}
    monkeypatch.setattr(core, "load_all", lambda: registry)
    result = CliRunner().invoke(main, ["prove", "--json", "--jobs", "2", "--out", str(tmp_path)])
    report = json.loads(result.output)
    rows = report["obligations"]
    assert all(row["cpu_seconds"] >= 1.0 for row in rows)  # obligation and mutant, 0.5 s each
    assert report["cpu_seconds"] >= sum(row["cpu_seconds"] for row in rows) >= 2.0
    table = CliRunner().invoke(main, ["prove", "--jobs", "1", "--out", str(tmp_path)])
    (line,) = [line for line in table.output.splitlines() if line.startswith("CPU: ")]
    assert float(line.split()[1].rstrip("s")) >= 2.0
