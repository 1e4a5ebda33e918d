"""The real-clock library never loses an operation to user code, on both implementations: whatever a callback or
the error hook raises (SystemExit and KeyboardInterrupt included) or however long it blocks, every op accepted
completes (once), or is returned by shutdown; errors are reported; num_delayed stays right. Ends with an 8-thread
stress whose callbacks raise, exit and block."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter

import pytest

from kpurgatory.impl import IMPLEMENTATIONS, implementation
from kpurgatory.impl import timer as timer_module

WAIT_S = 10  # generous bound for real-clock waits; never a timing assertion


class Failure(BaseException):
    """A BaseException that is neither Exception, SystemExit nor KeyboardInterrupt."""


RAISES = {"exception": RuntimeError, "system_exit": SystemExit, "keyboard_interrupt": KeyboardInterrupt,
          "base_exception": Failure}


class Ledger:
    def __init__(self) -> None:
        self.completed: list[int] = []  # one per on_complete call (appended before the callback misbehaves)
        self.reported: list[BaseException] = []
        self.done = threading.Condition()

    def complete(self, op_id: int) -> None:
        with self.done:
            self.completed.append(op_id)
            self.done.notify_all()

    def wait_for(self, count: int) -> bool:
        with self.done:
            return self.done.wait_for(lambda: len(self.completed) >= count, WAIT_S)


def operation_class(family):
    class Op(family.DelayedOperation):
        """on_complete records the completion, then misbehaves as ``behaviour`` says."""

        __slots__ = ("op_id", "ledger", "behaviour", "ready")

        def __init__(self, op_id: int, delay_ms: int, ledger: Ledger, behaviour: str = "ok"):
            super().__init__(delay_ms)
            self.op_id, self.ledger, self.behaviour, self.ready = op_id, ledger, behaviour, False

        def try_complete(self) -> bool:
            return self.ready and self.force_complete()

        def on_complete(self) -> None:
            self.ledger.complete(self.op_id)
            if self.behaviour in RAISES:
                raise RAISES[self.behaviour](f"op {self.op_id}")
            if self.behaviour.startswith("block"):
                time.sleep(float(self.behaviour.split(":")[1]))

        def on_expiration(self) -> None:
            pass

    return Op


@pytest.fixture(params=IMPLEMENTATIONS)
def family(request):
    return implementation(request.param)


@pytest.mark.parametrize("behaviour", sorted(RAISES))
@pytest.mark.parametrize("hook", ["records", "raises"])
def test_a_raising_callback_or_hook_loses_no_op(family, behaviour, hook, caplog) -> None:
    ledger = Ledger()

    def on_error(error: BaseException, source: object) -> None:
        ledger.reported.append(error)
        if hook == "raises":
            raise SystemExit("the hook exits too")

    Op = operation_class(family)
    caplog.set_level(logging.CRITICAL, logger="kpurgatory.impl")
    with family.DelayedOperationPurgatory("robust", on_error=on_error) as purgatory:
        bad = [Op(i, 1 + i, ledger, behaviour) for i in range(3)]
        for op in bad:
            assert not purgatory.try_complete_else_watch(op, [f"k{op.op_id}"])
        assert ledger.wait_for(3)
        later = [Op(10 + i, 5 + i, ledger) for i in range(5)]  # accepted after the failures: must still expire
        for op in later:
            assert not purgatory.try_complete_else_watch(op, ["later"])
        assert purgatory.num_delayed() >= 0
        assert ledger.wait_for(8), f"only {sorted(ledger.completed)} completed"
        deadline = time.monotonic() + WAIT_S
        while purgatory.num_delayed() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert purgatory.num_delayed() == 0
        dropped = purgatory.shutdown()
    assert dropped == [] and sorted(ledger.completed) == [0, 1, 2, *range(10, 15)]
    assert [type(error) for error in ledger.reported] == [RAISES[behaviour]] * 3
    if hook == "raises":
        assert sum("error hook failed" in record.getMessage() for record in caplog.records) == 3


def test_a_blocking_callback_delays_later_ops_and_shutdown_returns_those_it_held_up(family, monkeypatch) -> None:
    monkeypatch.setattr(timer_module, "EXECUTOR_CLOSE_S", 0.2)
    ledger, release = Ledger(), threading.Event()
    Op = operation_class(family)

    class Stuck(Op):
        __slots__ = ()

        def on_expiration(self) -> None:
            release.wait(WAIT_S)

    purgatory = family.DelayedOperationPurgatory("stuck")
    stuck = Stuck(0, 1, ledger)
    purgatory.try_complete_else_watch(stuck, ["a"])
    assert ledger.wait_for(1)
    held_up = [Op(i, 2, ledger) for i in range(1, 4)]
    for op in held_up:
        purgatory.try_complete_else_watch(op, ["b"])
    pending = Op(9, 60_000, ledger)
    purgatory.try_complete_else_watch(pending, ["c"])
    deadline = time.monotonic() + WAIT_S
    while purgatory.num_delayed() > 1 and time.monotonic() < deadline:  # the held-up ops left the wheel...
        time.sleep(0.005)
    assert ledger.completed == [0]  # ...but the executor cannot run them
    returned = purgatory.shutdown()
    release.set()
    assert sorted(op.op_id for op in returned) == [1, 2, 3, 9]
    time.sleep(0.05)
    assert ledger.completed == [0]  # taken back: never run later either


def test_stress_eight_threads_with_callbacks_that_raise_exit_and_block(family, caplog) -> None:
    """8 threads watch, check and force ops on one real-clock purgatory for ~2 s; a quarter of the ops raise an
    exception, SystemExit or KeyboardInterrupt from on_complete, a few block it for a few ms, and the error hook itself
    raises now and then. Afterwards every op completed exactly once or was returned by shutdown."""
    caplog.set_level(logging.CRITICAL, logger="kpurgatory.impl")
    ledger = Ledger()
    hook_calls = Counter()

    def on_error(error: BaseException, source: object) -> None:
        hook_calls[type(error).__name__] += 1
        if hook_calls[type(error).__name__] % 7 == 0:
            raise RuntimeError("the hook fails too")

    Op = operation_class(family)
    behaviours = ["ok"] * 12 + ["exception", "system_exit", "keyboard_interrupt", "block:0.003"]
    created: list[list] = [[] for _ in range(8)]
    purgatory = family.DelayedOperationPurgatory("stress", on_error=on_error, purge_interval=50)
    start, stop_at = threading.Barrier(8), time.monotonic() + 2.0

    def worker(index: int) -> None:
        rng = random.Random(index)
        mine = created[index]
        start.wait()
        while time.monotonic() < stop_at:
            roll = rng.random()
            try:
                if roll < 0.5 or not mine:
                    op = Op(index * 10**6 + len(mine), rng.randint(1, 30), ledger, rng.choice(behaviours))
                    mine.append(op)
                    purgatory.try_complete_else_watch(op, [f"k{rng.randrange(16)}", f"k{rng.randrange(16)}"])
                elif roll < 0.85:
                    rng.choice(mine[-32:]).ready = True
                    purgatory.check_and_complete(f"k{rng.randrange(16)}")
                else:
                    rng.choice(mine[-32:]).force_complete()
            except (Exception, SystemExit, KeyboardInterrupt, Failure):
                pass  # the caller's own op misbehaved in the caller's thread: propagated, as documented

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [op for ops in created for op in ops]
    time.sleep(0.1)  # let the last short delays expire
    dropped = purgatory.shutdown()
    completions = Counter(ledger.completed)
    doubles = [op_id for op_id, count in completions.items() if count > 1]
    returned = {op.op_id for op in dropped}
    lost = [op.op_id for op in everything if op.op_id not in completions and op.op_id not in returned]
    assert len(everything) > 1000
    assert (len(lost), len(doubles)) == (0, 0), f"lost {lost[:10]}, double {doubles[:10]}"
    assert all(op.completed for op in everything if op.op_id in completions)
    assert purgatory.num_delayed() == 0
    assert hook_calls["SystemExit"] and hook_calls["KeyboardInterrupt"]
