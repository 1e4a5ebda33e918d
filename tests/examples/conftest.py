"""The vector tree the driver tests run: generated once per test run, small (``--quick``), with a fixed seed."""

import fcntl
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main

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
