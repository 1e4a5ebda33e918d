"""Unit tests of kpurgatory.impl.purgatory: DelayedOperation and DelayedOperationPurgatory."""

from __future__ import annotations

import threading

import pytest

from kpurgatory.impl import DelayedOperation, DelayedOperationPurgatory, EmptyKeysError, SystemTimer, TimerDomainError
from kpurgatory.model.vocabulary import LONG_MAX

WAIT_S = 10


class Op(DelayedOperation):
    """Completes once ``ready``; records its callbacks; optional hooks run inside try_complete."""

    __slots__ = ("name", "ready", "log", "tries", "during_try")

    def __init__(self, name: str, delay_ms: int = 100_000, log: list | None = None, lock=None, during_try=None):
        super().__init__(delay_ms, lock)
        self.name, self.ready, self.log, self.tries, self.during_try = name, False, log, 0, during_try

    def try_complete(self) -> bool:
        self.tries += 1
        if self.during_try is not None:
            self.during_try(self)
        return self.ready and self.force_complete()

    def on_complete(self) -> None:
        if self.log is not None:
            self.log.append(("complete", self.name))

    def on_expiration(self) -> None:
        if self.log is not None:
            self.log.append(("expire", self.name))


def virtual_purgatory(purge_interval: int = 1000, **kwargs) -> DelayedOperationPurgatory:
    return DelayedOperationPurgatory(purge_interval=purge_interval, timer=SystemTimer.virtual(), **kwargs)


# --- Kafka's DelayedOperationTest, on the impl --------------------------------------------------------------------


def test_request_satisfaction() -> None:
    purgatory = virtual_purgatory()
    assert purgatory.check_and_complete("test1") == 0
    r1, r2 = Op("r1"), Op("r2")
    assert not purgatory.try_complete_else_watch(r1, ["test1"])
    assert not purgatory.try_complete_else_watch(r2, ["test2"])
    assert purgatory.check_and_complete("test1") == 0
    r1.ready = True
    assert (purgatory.check_and_complete("test1"), purgatory.check_and_complete("test1")) == (1, 0)
    r2.ready = True
    assert purgatory.check_and_complete("test2") == 1
    assert purgatory.watched() == 0 and purgatory.num_delayed() == 0


def test_request_expiry() -> None:
    log: list = []
    purgatory = virtual_purgatory()
    r1, r2 = Op("r1", 20, log), Op("r2", 200_000, log)
    purgatory.try_complete_else_watch(r1, ["test1"])
    purgatory.try_complete_else_watch(r2, ["test1", "test2"])
    purgatory.advance_to(19)
    assert log == []
    purgatory.advance_to(20)
    assert log == [("complete", "r1"), ("expire", "r1")]
    assert r1.completed and not r2.completed and purgatory.num_delayed() == 1


def test_request_purge_counts() -> None:
    purgatory = virtual_purgatory()
    r1, r2, r3 = Op("r1"), Op("r2"), Op("r3")
    purgatory.try_complete_else_watch(r1, ["test1"])
    purgatory.try_complete_else_watch(r2, ["test1", "test2"])
    purgatory.try_complete_else_watch(r3, ["test1", "test2", "test3"])
    assert (purgatory.num_delayed(), purgatory.watched()) == (3, 6)
    r2.ready = True
    r2.try_complete()
    assert purgatory.num_delayed() == 2
    r3.ready = True
    r3.try_complete()
    assert purgatory.num_delayed() == 1
    assert purgatory.check_and_complete("test1") == 0
    assert purgatory.watched() == 4
    purgatory.check_and_complete("test2")
    assert purgatory.watched() == 2
    purgatory.check_and_complete("test3")
    assert purgatory.watched() == 1


def test_cancel_for_key_returns_the_list_and_cancels_timeouts() -> None:
    purgatory = virtual_purgatory()
    ops = [Op("o1"), Op("o2"), Op("o3")]
    purgatory.try_complete_else_watch(ops[0], ["test1"])
    purgatory.try_complete_else_watch(ops[1], ["test1", "test2"])
    purgatory.try_complete_else_watch(ops[2], ["test2"])
    assert purgatory.cancel_for_key("test1") == ops[:2]
    assert (purgatory.num_delayed(), purgatory.watched()) == (1, 2)
    assert not any(op.completed for op in ops)
    assert purgatory.cancel_for_key("unknown") == []
    ops[1].ready = True  # a cancelled op still completes through its other keys
    assert purgatory.check_and_complete("test2") == 1


def test_try_complete_runs_under_the_op_lock_and_never_through_safe_try_complete() -> None:
    lock = threading.RLock()
    held: list[bool] = []

    class Checked(Op):
        __slots__ = ()

        def safe_try_complete(self) -> bool:
            raise AssertionError("not expected")

    op = Checked("o", lock=lock, during_try=lambda _: held.append(lock._is_owned()))
    purgatory = virtual_purgatory()
    assert not purgatory.try_complete_else_watch(op, ["k"])
    assert held == [True, True] and op.lock is lock


def test_safe_try_complete_or_else() -> None:
    actions: list[str] = []
    op = Op("o")
    assert not op.safe_try_complete_or_else(lambda: actions.append("watch"))
    assert actions == ["watch"] and op.tries == 2
    ready = Op("q")
    ready.ready = True
    assert ready.safe_try_complete_or_else(lambda: actions.append("never"))
    assert actions == ["watch"]


# --- semantics ----------------------------------------------------------------------------------------------------


def test_force_complete_wins_exactly_once_under_concurrency() -> None:
    for _ in range(50):
        log: list = []
        op = Op("o", log=log)
        barrier = threading.Barrier(8)
        results: list[bool] = []

        def race() -> None:
            barrier.wait()
            results.append(op.force_complete())

        threads = [threading.Thread(target=race) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results.count(True) == 1 and log == [("complete", "o")]


def test_ready_on_the_second_try_stays_watched_but_not_timed() -> None:
    purgatory = virtual_purgatory()
    op = Op("o", during_try=lambda self: setattr(self, "ready", self.tries >= 2))
    assert purgatory.try_complete_else_watch(op, ["a", "b", "c"])
    assert (purgatory.watched(), purgatory.num_delayed(), purgatory.estimated_total_operations) == (3, 0, 1)


def test_immediately_ready_op_is_neither_watched_nor_timed() -> None:
    purgatory = virtual_purgatory()
    op = Op("o")
    op.ready = True
    assert purgatory.try_complete_else_watch(op, ["a"])
    assert (op.tries, purgatory.watched(), purgatory.num_delayed(), purgatory.estimated_total_operations) == \
        (1, 0, 0, 0)


def test_duplicate_keys_complete_once() -> None:
    log: list = []
    purgatory = virtual_purgatory()
    op = Op("o", log=log)
    purgatory.try_complete_else_watch(op, ["k", "k"])
    assert purgatory.watched() == 2
    op.ready = True
    assert purgatory.check_and_complete("k") == 1
    assert purgatory.watched() == 0 and log == [("complete", "o")]


def test_rewatching_a_completed_op_adds_no_watches_but_counts() -> None:
    purgatory = virtual_purgatory()
    op = Op("o")
    purgatory.try_complete_else_watch(op, ["a"])
    op.force_complete()
    assert not purgatory.try_complete_else_watch(op, ["b", "c"])
    assert (purgatory.watched(), purgatory.num_delayed(), purgatory.estimated_total_operations) == (1, 0, 2)


def test_rewatching_resets_the_deadline() -> None:
    log: list = []
    purgatory = virtual_purgatory()
    op = Op("r", 50, log)
    purgatory.try_complete_else_watch(op, ["k"])
    purgatory.advance_to(10)
    purgatory.try_complete_else_watch(op, ["k"])
    purgatory.advance_to(59)
    assert log == []
    purgatory.advance_to(60)
    assert log == [("complete", "r"), ("expire", "r")]


def test_purge_rule_is_strict() -> None:
    purgatory = virtual_purgatory(purge_interval=2)
    ops = [Op(str(i)) for i in range(4)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["a", "b"])
    for op in ops[:2]:
        op.force_complete()
    assert purgatory.advance_to(1) is None  # 4 - 2 = 2 is not > 2
    ops[2].force_complete()
    assert purgatory.advance_to(2) == 6  # 4 - 1 = 3 > 2: three ops, two keys each
    assert (purgatory.estimated_total_operations, purgatory.watched()) == (1, 2)
    zero = virtual_purgatory(purge_interval=0)
    op = Op("o")
    zero.try_complete_else_watch(op, ["a"])
    op.ready = True
    zero.check_and_complete("a")
    assert zero.advance_to(1) == 0  # 1 > 0: a purge that finds nothing


def test_emptied_lists_are_removed() -> None:
    purgatory = virtual_purgatory()
    ops = [Op("o1"), Op("o2")]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["k"])
        op.ready = True
    purgatory.check_and_complete("k")
    assert purgatory.watcher_keys() == [] and purgatory.watched() == 0


def test_a_walk_does_not_drop_a_list_that_replaced_its_own() -> None:
    """Kafka's identity rule: while a check walks key k, k's list is cancelled and a new op watches k; the walk
    must leave the new list in place when it removes what it completed."""
    purgatory = virtual_purgatory()
    newcomer = Op("new")

    def replace_list(self: Op) -> None:
        purgatory.cancel_for_key("k")
        purgatory.try_complete_else_watch(newcomer, ["k"])

    walker = Op("walker", during_try=None)
    purgatory.try_complete_else_watch(walker, ["k"])
    walker.during_try, walker.ready = replace_list, True
    assert purgatory.check_and_complete("k") == 1
    assert purgatory.watched() == 1 and purgatory.cancel_for_key("k") == [newcomer]


def test_ops_appended_during_a_walk_are_kept() -> None:
    purgatory = virtual_purgatory()
    late, first = Op("late"), Op("first")
    purgatory.try_complete_else_watch(first, ["k"])
    first.ready = True
    first.during_try = lambda _: purgatory.try_complete_else_watch(late, ["k"])
    assert purgatory.check_and_complete("k") == 1
    assert purgatory.cancel_for_key("k") == [late]


# --- domain and errors --------------------------------------------------------------------------------------------


def test_key_and_parameter_checks() -> None:
    purgatory = virtual_purgatory()
    op = Op("o")
    with pytest.raises(EmptyKeysError) as caught:
        purgatory.try_complete_else_watch(op, [])
    assert caught.value.code == "empty_keys" and op.tries == 0
    with pytest.raises(TypeError, match="not the single str"):
        purgatory.try_complete_else_watch(op, "topic")
    with pytest.raises(TypeError, match="hashable"):
        purgatory.try_complete_else_watch(op, ["ok", ["unhashable"]])
    with pytest.raises(TypeError, match="hashable"):
        purgatory.check_and_complete({"a": 1})
    with pytest.raises(ValueError, match="empty strings"):
        purgatory.try_complete_else_watch(op, ["ok", ""])
    assert op.tries == 0 and purgatory.watched() == 0
    assert not purgatory.try_complete_else_watch(op, [("topic", 0), 7])  # any hashable key
    for bad in (-1, 2**31, 1.0, True):
        with pytest.raises(ValueError, match="purge_interval"):
            virtual_purgatory(purge_interval=bad)
    with pytest.raises(ValueError, match="power of two"):
        virtual_purgatory(shards=3)
    with pytest.raises(ValueError, match="reaper"):
        timer = SystemTimer()
        try:
            DelayedOperationPurgatory(timer=timer)
        finally:
            timer.shutdown()


def test_delay_out_of_range_is_refused_before_anything_happens() -> None:
    purgatory = virtual_purgatory()
    purgatory.advance_to(10)
    op = Op("o", LONG_MAX)
    with pytest.raises(TimerDomainError) as caught:
        purgatory.try_complete_else_watch(op, ["k"])
    assert caught.value.code == "delay_out_of_range"
    assert (op.tries, purgatory.watched(), purgatory.estimated_total_operations) == (0, 0, 0)


def test_callback_exceptions_in_a_walk_are_reported_and_the_walk_goes_on() -> None:
    errors: list = []
    log: list = []
    purgatory = virtual_purgatory(on_error=lambda error, op: errors.append((type(error), op.name)))

    class BrokenTry(Op):
        __slots__ = ()

        def try_complete(self) -> bool:
            if self.ready:
                raise RuntimeError("try")
            return False

    class BrokenComplete(Op):
        __slots__ = ()

        def on_complete(self) -> None:
            raise KeyError("complete")

    ops = [BrokenTry("t", log=log), BrokenComplete("c", log=log), Op("fine", log=log)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["k"])
        op.ready = True
    assert purgatory.check_and_complete("k") == 1  # "fine"; "c" completed but its on_complete raised
    assert errors == [(RuntimeError, "t"), (KeyError, "c")] and log == [("complete", "fine")]
    assert purgatory.watched() == 1 and purgatory.num_delayed() == 1  # "t" stays, watched and timed
    mine = BrokenTry("mine")
    mine.ready = True
    with pytest.raises(RuntimeError):  # the caller's own op: its exception is the caller's
        purgatory.try_complete_else_watch(mine, ["k"])
    assert purgatory.watched() == 1 and purgatory.num_delayed() == 1  # the first try failed: nothing changed


def test_a_failing_second_try_still_leaves_the_op_timed() -> None:
    purgatory = virtual_purgatory()

    def fail_second(self: Op) -> None:
        if self.tries == 2:
            raise RuntimeError("second try")

    op = Op("o", during_try=fail_second)
    with pytest.raises(RuntimeError):
        purgatory.try_complete_else_watch(op, ["k"])
    assert (purgatory.watched(), purgatory.num_delayed()) == (1, 1)


def test_shutdown_returns_what_was_pending() -> None:
    purgatory = virtual_purgatory()
    ops = [Op(str(i), 10 * (i + 1)) for i in range(3)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["k"])
    ops[0].force_complete()
    assert sorted(purgatory.shutdown(), key=lambda op: op.name) == ops[1:]
    assert not any(op.completed for op in ops[1:])


# --- real clock ---------------------------------------------------------------------------------------------------


class Waiting(Op):
    __slots__ = ("done",)

    def __init__(self, name: str, delay_ms: int, log: list):
        super().__init__(name, delay_ms, log)
        self.done = threading.Event()

    def on_expiration(self) -> None:
        super().on_expiration()
        self.done.set()


def test_real_purgatory_expires_through_its_reaper_and_stops_cleanly() -> None:
    log: list = []
    errors: list = []

    class Exploding(Waiting):
        __slots__ = ()

        def on_expiration(self) -> None:
            raise RuntimeError("expiry")

    with DelayedOperationPurgatory("unit", on_error=lambda error, op: errors.append(error)) as purgatory:
        threads = (purgatory._reaper.thread, purgatory.timer._executor.thread)
        assert [thread.name for thread in threads] == ["ExpirationReaper-unit", "executor-unit"]
        purgatory.try_complete_else_watch(Exploding("boom", 1, log), ["k"])
        op = Waiting("o", 30, log)
        purgatory.try_complete_else_watch(op, ["k"])
        pending = Waiting("p", 600_000, log)
        purgatory.try_complete_else_watch(pending, ["k"])
        assert op.done.wait(WAIT_S)  # the reaper outlived the failing expiration
    assert ("complete", "o") in log and ("complete", "boom") in log
    assert len(errors) == 1 and not pending.completed
    assert not any(thread.is_alive() for thread in threads)
    assert purgatory.shutdown() == []
