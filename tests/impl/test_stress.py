"""Stress: 8 threads hammer one real-clock purgatory (reaper and executor threads running) with watch, check,
cancel_for_key, advance and force, for 1,000,000 operations in total. Then everything is drained and accounted for:
no op completes twice, none is lost, the lists and the timer end empty, and no thread is left behind."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, deque

import pytest

from kpurgatory.impl import DelayedOperation, DelayedOperationPurgatory

THREADS = 8
OPERATIONS = 1_000_000
KEYS = [f"k{i}" for i in range(48)]


class Ledger:
    """What every thread saw, in structures whose single operations are atomic (list.append / extend)."""

    def __init__(self) -> None:
        self.completed: list[int] = []  # op ids, one per on_complete
        self.expired: list[int] = []  # op ids, one per on_expiration
        self.cancelled: list[int] = []  # op ids returned by cancel_for_key
        self.wins: list[int] = []  # per thread: completions its own calls reported (watch/check/force)
        self.created: list[int] = []  # per thread: ops created
        self.errors: list[BaseException] = []
        self.all_ready = False


class StressOp(DelayedOperation):
    __slots__ = ("op_id", "ready", "ledger")

    def __init__(self, op_id: int, delay_ms: int, ready: bool, ledger: Ledger):
        super().__init__(delay_ms)
        self.op_id, self.ready, self.ledger = op_id, ready, ledger

    def try_complete(self) -> bool:
        return (self.ready or self.ledger.all_ready) and self.force_complete()

    def on_complete(self) -> None:
        self.ledger.completed.append(self.op_id)

    def on_expiration(self) -> None:
        self.ledger.expired.append(self.op_id)


def worker(purgatory: DelayedOperationPurgatory, ledger: Ledger, index: int, iterations: int,
           start: threading.Barrier) -> None:
    rng = random.Random(index)
    recent: deque[tuple[StressOp, tuple[str, ...]]] = deque(maxlen=64)
    wins = created = 0
    start.wait()
    for step in range(iterations):
        roll = rng.random()
        if roll < 0.30:
            op = StressOp(index * iterations + step, rng.randint(1, 20), rng.random() < 0.1, ledger)
            keys = tuple(rng.sample(KEYS, rng.randint(1, 3)))
            created += 1
            wins += purgatory.try_complete_else_watch(op, keys)
            recent.append((op, keys))
        elif roll < 0.62:
            if recent and rng.random() < 0.7:
                op, keys = recent[rng.randrange(len(recent))]
                op.ready = True
                key = rng.choice(keys)
            else:
                key = rng.choice(KEYS)
            wins += purgatory.check_and_complete(key)
        elif roll < 0.66:
            ledger.cancelled.extend(op.op_id for op in purgatory.cancel_for_key(rng.choice(KEYS)))
        elif roll < 0.95:
            purgatory.advance_clock(0)
        elif recent:
            wins += recent[rng.randrange(len(recent))][0].force_complete()
    ledger.wins.append(wins)
    ledger.created.append(created)


@pytest.mark.slow
def test_eight_threads_one_million_operations() -> None:
    ledger = Ledger()
    purgatory = DelayedOperationPurgatory("stress", purge_interval=100,
                                          on_error=lambda error, source: ledger.errors.append(error))
    ours = {purgatory._reaper.thread, purgatory.timer._executor.thread}
    start = threading.Barrier(THREADS)
    threads = [threading.Thread(target=worker, args=(purgatory, ledger, i, OPERATIONS // THREADS, start))
               for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Drain: every op still watched becomes ready and is completed by a check of its keys; ops that are only in the
    # timer (their keys were all cancelled) expire within their 20 ms.
    ledger.all_ready = True
    drain_wins = sum(purgatory.check_and_complete(key) for key in KEYS)
    deadline = time.monotonic() + 10
    while purgatory.num_delayed() and time.monotonic() < deadline:
        time.sleep(0.01)
    for key in KEYS:  # drop the stale entries left by completions through other keys
        purgatory.check_and_complete(key)
    assert purgatory.watched() == 0
    assert purgatory.num_delayed() == 0
    dropped = purgatory.shutdown()

    assert not ledger.errors
    completions = Counter(ledger.completed)
    assert completions and max(completions.values()) == 1, "an op completed twice"
    expirations = Counter(ledger.expired)
    assert not expirations or max(expirations.values()) == 1, "an op expired twice"
    assert set(expirations) <= set(completions), "on_expiration without on_complete"
    # every completion was won by exactly one caller: a watch, check or force that reported it, or the timer
    assert sum(ledger.wins) + drain_wins + len(expirations) == len(completions)
    created = sum(ledger.created)
    accounted = set(completions) | set(ledger.cancelled) | {op.op_id for op in dropped}
    assert len(accounted) == created, f"{created - len(accounted)} ops lost"
    assert created > 250_000
    assert not any(thread.is_alive() for thread in ours), "a purgatory thread survived shutdown"
