"""The time limit on the caller's thread (conformance/adapters/timed.py) that guards the reference model in check,
replay and prove: a loop in a limited block is stopped; a block's clock limits its parts one by one; a forked
child (prove's and check's workers) is limited too, though the watchdog thread of its parent is not copied; and a
limit that fired leaves the interpreter as it was, so the threads of a concurrent check that follows run as before."""

import multiprocessing
import time

import pytest

from kpurgatory.conformance.adapters.builtin import BuiltinAdapter
from kpurgatory.conformance.adapters.timed import INTERRUPT_S, TimeLimit, limited
from kpurgatory.conformance.check.concurrent import run_concurrent_check


def spin() -> None:
    while True:
        pass


def spun_for(timeout: float) -> float:
    """How long a spinning loop in a block limited to ``timeout`` ran before the limit stopped it."""
    start = time.monotonic()
    with pytest.raises(TimeLimit), limited(timeout):
        spin()
    return time.monotonic() - start


def test_a_loop_in_a_limited_block_is_stopped_at_its_limit():
    assert 0.2 <= spun_for(0.2) < 0.2 + 2 * INTERRUPT_S


def test_a_stopped_clock_lets_a_part_run_past_the_limit_and_a_restarted_one_limits_the_next():
    with limited(0.2) as clock:
        clock.stop()
        time.sleep(0.6)  # the system's part of a replay's step: not the model's limit
        clock.restart()
        start = time.monotonic()
        with pytest.raises(TimeLimit):
            spin()
    assert 0.2 <= time.monotonic() - start < 0.2 + 2 * INTERRUPT_S


def test_the_limit_holds_in_a_forked_child_of_a_process_whose_watchdog_runs():
    assert spun_for(0.1) < 1  # the parent's watchdog thread is running
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(spun_for, (0.2,)).get(timeout=30) < 0.2 + 2 * INTERRUPT_S


def test_a_concurrent_check_after_a_limit_fired_runs_as_before():
    """Clearing the TimeLimit still on its way to a block that ended must not leave CPython's "asynchronous exception
    pending" flag set: with it set, the check's threads stalled under its short switch interval, and every call of
    the implementation read as a deadlock."""
    spun_for(0.1)
    result = run_concurrent_check(BuiltinAdapter, threads=3, runs=3, steps=20, seed=2, timeout=3)
    assert result.passed, result.violations
