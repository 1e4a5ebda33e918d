"""Both implementations of kpurgatory.impl are checked: this run's tests exercise the one ``KPURGATORY_IMPL`` selects
(the compiled one by default), and the test below runs the implementation-specific tests again, in a subprocess, on
the other one: the unit and stress tests, the differential test against the model, the mutants and the concurrent
check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kpurgatory.impl import IMPLEMENTATIONS, SELECTED, SELECTOR, implementation

ROOT = Path(__file__).resolve().parents[2]
PER_IMPLEMENTATION = ["tests/impl/test_timer.py", "tests/impl/test_purgatory.py", "tests/impl/test_stress.py",
                      "tests/impl/test_differential.py", "tests/mutants/test_mutants.py",
                      "tests/conformance/test_concurrent.py"]


def selected_in_subprocess(value: str | None) -> subprocess.CompletedProcess:
    env = {key: item for key, item in os.environ.items() if key != SELECTOR}
    if value is not None:
        env[SELECTOR] = value
    return subprocess.run([sys.executable, "-c", "import kpurgatory.impl as impl; print(impl.SELECTED.name)"],
                          env=env, capture_output=True, text=True, timeout=60)


def test_the_compiled_core_is_built_and_is_the_default() -> None:
    assert implementation("compiled").SystemTimer.__module__ == "kpurgatory.impl.compiled"
    default = selected_in_subprocess(None)
    assert default.stdout.strip() == "compiled" and "Warning" not in default.stderr
    assert selected_in_subprocess("python").stdout.strip() == "python"
    refused = selected_in_subprocess("java")
    assert refused.returncode != 0 and "unknown implementation 'java'" in refused.stderr


def test_the_other_implementation_passes_the_same_tests() -> None:
    other = next(name for name in IMPLEMENTATIONS if name != SELECTED.name)
    env = {**os.environ, SELECTOR: other}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *PER_IMPLEMENTATION],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{other}:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
    assert " passed" in result.stdout and " skipped" not in result.stdout.splitlines()[-1]


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
def test_each_implementation_exports_the_same_api(name: str) -> None:
    family = implementation(name)
    for cls, methods in ((family.SystemTimer, ("add", "advance_clock", "advance_to", "size", "pending", "describe",
                                               "queued_expirations", "shutdown", "virtual")),
                         (family.TimerTask, ("run", "cancel", "scheduled", "delay_ms")),
                         (family.DelayedOperation, ("force_complete", "safe_try_complete",
                                                    "safe_try_complete_or_else", "try_complete", "run")),
                         (family.DelayedOperationPurgatory, ("try_complete_else_watch", "check_and_complete",
                                                             "cancel_for_key", "watched", "num_delayed",
                                                             "watcher_keys", "advance_clock", "purge_completed"))):
        missing = [method for method in methods if not hasattr(cls, method)]
        assert not missing, f"{name} {cls.__name__} lacks {missing}"


def test_every_timer_mutant_is_seeded_in_the_compiled_core_too() -> None:
    from kpurgatory.conformance.tools.mutants import MUTANTS
    from kpurgatory.impl.compiled import FAULTS

    assert set(FAULTS) == {mutant.id for mutant in MUTANTS if mutant.profile == "timer"}
