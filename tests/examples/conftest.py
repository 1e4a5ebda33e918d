"""The vector tree the driver tests run: generated once per test run, small (``--quick``), with a fixed seed."""

import fcntl
import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.tools import vectors
from kpurgatory.model import vocabulary as v

SEED = 7


@pytest.fixture(scope="session")
def vector_tree(tmp_path_factory) -> Path:
    """The root of a vector tree (specs/vectors.md): index.json and 1/<profile>/<kind>/<id>.jsonl. pytest-xdist's
    workers share it: the first to get the lock generates it into the folder that holds this run's workers' own."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out = shared / f"vectors-seed-{SEED}"
    with open(shared / f"vectors-seed-{SEED}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "index.json").exists():
            result = CliRunner().invoke(main, ["vectors", str(out), "--quick", "--seed", str(SEED)])
            assert result.exit_code == 0, result.output
    return out


#: the Kafka release of `release_tree`
RELEASE = "3.9.0"


@pytest.fixture(scope="session")
def release_tree(tmp_path_factory) -> Path:
    """A tree like `vector_tree` made for Kafka `RELEASE` (``--kafka-version``): for a binding that declares it."""
    out = tmp_path_factory.mktemp("release") / f"vectors-kafka-{RELEASE}"
    result = CliRunner().invoke(main, ["vectors", str(out), "--quick", "--seed", str(SEED), "--kafka-version", RELEASE])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def far_deadline_tree(tmp_path_factory) -> Path:
    """A tree of one timer case (start 1, tick 1): the task "max" added due at 2^63-1, then advances to 2^63-2 (step
    2) and to 2^63-1 (step 3), size and shutdown. Its window under never_early_up_to_tick_late is [2^63-1, null], its
    end past 2^63-1 (specs/vectors.md §2): never late; under kafka [2^63-1, 2^63-1], late after the advance to it."""
    long_max = 2**63 - 1
    case = vectors.vector_trace("far-deadline", "timer", v.Params(start_ms=1), [
        v.TimerAdd("max", long_max - 1), v.Advance(long_max - 1), v.Advance(long_max), v.Size(), v.Shutdown()],
        "scenarios")
    out = tmp_path_factory.mktemp("far-deadline")
    vectors.write_tree(out, vectors.tree_of([case]))
    assert b'"never_early_up_to_tick_late":[9223372036854775807,null]' in next(out.rglob("*.jsonl")).read_bytes()
    return out


@pytest.fixture(scope="session")
def timer_steps(vector_tree) -> dict[str, list[dict]]:
    """The steps of each timer case of `vector_tree` for current Kafka, by path."""
    cases = json.loads((vector_tree / "index.json").read_text())["cases"]
    return {case["path"]: [json.loads(line) for line in (vector_tree / case["path"]).read_text().splitlines()[1:]]
            for case in cases if case["profile"] == "timer" and not case["kafka_version"]}


@pytest.fixture(scope="session")
def hanging_start(vector_tree) -> tuple[int, set[str]]:
    """A start time that a few timer cases with an advance share (two at least), and those cases: a binding whose
    advance hangs in the cases starting then hangs in those."""
    by_start: dict[int, set[str]] = {}
    for case in json.loads((vector_tree / "index.json").read_text())["cases"]:
        if case["profile"] == "timer" and not case["kafka_version"] and "advance" in case["commands"]:
            by_start.setdefault(case["params"]["start_ms"], set()).add(case["path"])
    return min(((start, paths) for start, paths in by_start.items() if len(paths) > 1), key=lambda s: len(s[1]))


@pytest.fixture
def hangs_once(tmp_path) -> list[str]:
    """The command of an adapter over the model that does not answer the first command of its first run (a marker
    file says it did that already) and answers everything else."""
    script = tmp_path / "hangs_once.py"
    script.write_text(
        "import json, sys, time\n"
        "from pathlib import Path\n"
        "from kpurgatory.conformance.adapters.reference import ModelSystem\n"
        "from kpurgatory.conformance.adapters.stdio import handle\n"
        "marker, system = Path(sys.argv[1]), ModelSystem()\n"
        "for line in sys.stdin:\n"
        "    request = json.loads(line)\n"
        "    if request['cmd'] not in ('hello', 'init') and not marker.exists():\n"
        "        marker.touch()\n"
        "        time.sleep(3600)\n"
        "    print(json.dumps(handle(system, request)), flush=True)\n")
    return [sys.executable, str(script), str(tmp_path / "hung")]
