"""One run of every obligation per test session (in two processes, as `kpurgatory prove` does); the tests read it."""

import pytest

from kpurgatory.specs.cli import run_obligations
from kpurgatory.specs.core import load_all


@pytest.fixture(scope="session")
def registry():
    return load_all()


@pytest.fixture(scope="session")
def outcomes(registry):
    return run_obligations(list(registry.values()), jobs=2)
