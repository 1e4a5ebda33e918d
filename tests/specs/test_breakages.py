"""Every one-edit breakage of model/ and specs/ in breakages.toml is caught by `kpurgatory prove`.

For each breakage the package is copied, the edit is made in the copy, and `kpurgatory prove --only <its globs>`
runs on the copy (in a subprocess whose PYTHONPATH puts the copy first, so the copy is what is imported). The
breakage is caught when prove exits non-zero and an obligation matching its globs does not have its expected result
(refuted, not inductive, failed), with a counterexample that shows values, not just "z3 found a model". The
unbroken copy must pass the same globs, so what fails is the edit. When an obligation comparing model/ with the
encodings catches an edit of model/, its counterexample is a short trace whose replay fails on the broken copy. A breakage whose
obligation stays green is an escape: the assertion message names it and what prove said.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kpurgatory.specs.core import render_witness

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = tomllib.loads((Path(__file__).parent / "breakages.toml").read_text())["breakage"]
#: the subpackages `prove` imports (the repository's folders are the package's subpackages, see pyproject.toml)
PACKAGES = ("model", "specs", "conformance")
#: what `prove` never imports: large, and copied for every breakage otherwise
SKIPPED = shutil.ignore_patterns("__pycache__", "examples", "drivers", "kafka", "live", "spark", "*.jar")
#: a breakage that hangs prove is not caught; this bounds the wait (the slowest narrow subset takes about a minute)
PROVE_TIMEOUT_S = 900
#: the project's command line, run by the copy's interpreter
CLI = "from kpurgatory.conformance.cli import main; main(prog_name='kpurgatory')"
#: the obligations that compare model/ with the encodings (their refutations are traces of model/ commands)
REFINEMENT = ("refinement.", "wheel.model.expiration_guard")
#: what a counterexample shows when it shows values: an assignment (now=3), a command with arguments
#: (advance(9), Check(key='k1')) or a numbered step of a run ("step 3 Delayed(): symbolic 0, model 1")
CONCRETE = re.compile(r"\w\s*=\s*[-\w'\"(]|\b\w+\([^()\s][^()]*\)|\bstep \d+")


def copy_package(root: Path) -> Path:
    """The package as an importable tree under ``root``: root/kpurgatory/{model,specs,conformance}."""
    for name in PACKAGES:
        shutil.copytree(REPO / name, root / "kpurgatory" / name, ignore=SKIPPED)
    return root


def break_copy(root: Path, breakage: dict) -> None:
    """Make the breakage's one edit in the copy under ``root``."""
    path = root / "kpurgatory" / breakage["file"]
    text = path.read_text()
    occurrences = text.count(breakage["old"])
    assert occurrences == 1, (f"{breakage['id']}: the catalogue is stale: its old text occurs {occurrences} times in "
                              f"{breakage['file']}, not once")
    path.write_text(text.replace(breakage["old"], breakage["new"]))


def environment(root: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "180"}


def imported_from(root: Path) -> list[str]:
    """Where the copy's interpreter imports the model and the specs from."""
    code = "import kpurgatory.model, kpurgatory.specs; print(kpurgatory.model.__file__); print(kpurgatory.specs.__file__)"
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=environment(root), capture_output=True,
                          text=True, check=True)
    return done.stdout.split()


def prove(root: Path, globs: list[str]) -> tuple[int, dict | None, str]:
    """Run `kpurgatory prove --json --jobs 1 --only ...` on the copy: (exit code, report or None, stderr)."""
    only = [arg for glob in globs for arg in ("--only", glob)]
    try:
        done = subprocess.run([sys.executable, "-c", CLI, "prove", "--json", "--jobs", "1", "--out",
                               str(root / "traces"), *only], cwd=root, env=environment(root), capture_output=True,
                              text=True, timeout=PROVE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, None, f"prove did not finish within {PROVE_TIMEOUT_S} s"
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        report = None
    return done.returncode, report, done.stderr[-2000:]


def replay(root: Path, trace: Path) -> int:
    """`kpurgatory replay TRACE` on the copy: its exit code."""
    return subprocess.run([sys.executable, "-c", CLI, "replay", str(trace)], cwd=root, env=environment(root),
                          capture_output=True, timeout=PROVE_TIMEOUT_S).returncode


def counterexample(row: dict, via: str) -> str:
    """What prove says about a failed obligation: its detail (its mutant's, when the mutant is what survived)."""
    if via == "mutant":
        mutant = row["mutant"] or {}
        return f"its mutant ({mutant.get('bug')}) was not refuted: {mutant.get('result')}: {mutant.get('detail')}"
    return f"{row['result']}: {row['detail']}"


def concrete(row: dict) -> bool:
    """The refutation's text, as `prove` prints it, shows values: its detail, or the witness it prints under the
    table (`render_witness`: the counterexample's values, a counterexample to induction's states and command)."""
    printed = [row["detail"] or "", *render_witness(row.get("witness") or {})]
    return any(CONCRETE.search(line) for line in printed)


def readable(row: dict, via: str) -> bool:
    """The failed obligation says what broke: a claim refuted (or not inductive) with values, a finding that is no
    longer refuted, or (for a weakened statement) the obligation's own mutant surviving."""
    if via == "mutant":
        return bool(row["mutant"]) and row["mutant"]["result"] != "refuted"
    if row["expected"] == "refuted" and row["result"] in ("proved", "bound"):
        return True
    return row["result"] not in ("proved", "bound", "error") and concrete(row)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    root = copy_package(tmp_path_factory.mktemp("pristine"))
    assert imported_from(root) == [str(root / "kpurgatory" / name / "__init__.py") for name in ("model", "specs")]
    return root


#: the unbroken copy's result, by the globs run (each set of globs once per session)
BASELINES: dict[tuple[str, ...], tuple[int, dict | None, str]] = {}


def baseline(pristine: Path, globs: list[str]) -> tuple[int, dict | None, str]:
    key = tuple(globs)
    if key not in BASELINES:
        BASELINES[key] = prove(pristine, globs)
    return BASELINES[key]


def verdict(code: int, report: dict | None, stderr: str) -> tuple[list[dict], str]:
    """The failing rows matching the breakage's globs, and why it escaped ("" when it was caught)."""
    if report is None:
        return [], f"prove printed no report (exit {code}): {stderr}"
    failed = [row for row in report["obligations"] if not row["as_expected"]]
    if code == 0 or not failed:
        results = ", ".join(f"{row['name']} {row['result']}" for row in report["obligations"])
        return [], f"prove exited {code} and every obligation had its expected result ({results})"
    return failed, ""


@pytest.mark.parametrize("breakage", CATALOGUE, ids=[b["id"] for b in CATALOGUE])
def test_breakage_is_caught(breakage, pristine, tmp_path):
    code, report, stderr = baseline(pristine, breakage["catch"])
    assert code == 0 and report is not None and report["ok"], (
        f"the unbroken copy does not pass {breakage['catch']} (exit {code}): "
        f"{[r['name'] + ' ' + r['result'] for r in (report or {}).get('obligations', []) if not r['as_expected']]} "
        f"{stderr}")
    root = tmp_path / "copy"
    shutil.copytree(pristine / "kpurgatory", root / "kpurgatory")
    break_copy(root, breakage)

    code, report, stderr = prove(root, breakage["catch"])
    failed, escaped = verdict(code, report, stderr)
    assert not escaped, f"ESCAPED {breakage['id']} ({breakage['breaks']}): {escaped}"
    via = breakage.get("via", "counterexample")
    assert any(readable(row, via) for row in failed), (
        f"UNREADABLE {breakage['id']}: caught by {[row['name'] for row in failed]}, but nothing says what broke with "
        f"values: {[row['name'] + ' ' + counterexample(row, via) for row in failed]}")
    model_broken = breakage["file"].startswith("model/")
    for row in (row for row in failed if model_broken and row["name"].startswith(REFINEMENT)):
        # a divergence of model/ from the encoding is a short trace whose replay fails on the broken model; a run on
        # which the broken model hangs or raises is one whose replay stops there, the reference broken (exit 3)
        assert row["traces"], f"{breakage['id']}: {row['name']} wrote no trace"
        broke = row["method"].startswith("model/ under")
        for path in map(Path, row["traces"]):
            assert len(path.read_text().splitlines()) - 1 <= 8, f"{breakage['id']}: {path.name} is not short"
            assert replay(root, path) == (3 if broke else 1), (
                f"{breakage['id']}: {path.name} replays on the broken model")
