"""KAFKA-17848 needs a race: checkAndComplete sees an op not yet completed, waits for the op's lock while another
thread completes it under that lock, and then must not call tryComplete on it. The concurrent check finds the mutant
when its threads happen to race that way; this schedule makes the race happen every time, by holding the op's lock
(as Kafka's group coordinator does, KAFKA-6042), and counts the op's tryComplete calls."""

import threading

import pytest

from kpurgatory.conformance.adapters.builtin import BuiltinAdapter
from kpurgatory.conformance.tools.mutants import BY_ID, adapter_class
from kpurgatory.model import vocabulary as v


class Announcing:
    """A reentrant lock that says when a thread finds it held and starts to wait for it."""

    def __init__(self):
        self.lock, self.waiting = threading.RLock(), threading.Event()

    def acquire(self) -> bool:
        if not self.lock.acquire(blocking=False):
            self.waiting.set()
            self.lock.acquire()
        return True

    def release(self) -> None:
        self.lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def tries_after_completion(system) -> int:
    system.init("purgatory", v.Params())
    system.step(v.Watch("x", ("k",), 1000, None))  # two tries, neither ready: watched on k
    op = system.ops["x"]
    op.lock = lock = Announcing()  # the op's own lock (Kafka lets a caller give one)
    checking = threading.Thread(target=system.step, args=(v.Check("k"),))
    with op.lock:  # a caller completing the op under its lock (Kafka's group lock, KAFKA-6042)
        checking.start()
        assert lock.waiting.wait(60)  # the check has seen x not completed and waits for the lock
        assert system.step(v.Force("x")).result is True
        tries_at_completion = op.try_calls
    checking.join(60)
    assert not checking.is_alive()
    return op.try_calls - tries_at_completion


@pytest.mark.parametrize("system, stale_tries", [
    (BuiltinAdapter, 0),
    (adapter_class(BY_ID["kafka_17848_try_completed"]), 1),
], ids=["impl", "kafka_17848_try_completed"])
def test_check_does_not_try_an_op_completed_while_it_waited_for_the_lock(system, stale_tries):
    assert tries_after_completion(system()) == stale_tries
