"""Unit tests of the timer: the pure-Python buckets and wheels of kpurgatory.impl.timer, then the virtual and the real
SystemTimer of the implementation under test (``KPURGATORY_IMPL``; test_implementations.py runs this file for each)."""

from __future__ import annotations

import threading

import pytest

from kpurgatory.impl import SystemTimer, TimerTask
from kpurgatory.impl import timer as python_timer
from kpurgatory.impl.timer import (
    LONG_MAX, DelayQueue, TaskCounter, TimerDomainError, TimerTaskEntry, TimerTaskList, TimingWheel, VirtualClock,
)

WAIT_S = 10  # generous bound for real-clock waits; never a timing assertion


class Recording:
    """Records (name, clock at run) into a shared list."""

    __slots__ = ()

    def __init__(self, name: str, delay_ms: int, log: list, clock=lambda: None):
        super().__init__(delay_ms)
        self.name, self.log, self.clock = name, log, clock

    def run(self) -> None:
        self.log.append((self.name, self.clock()))


class Recorder(Recording, TimerTask):
    __slots__ = ("name", "log", "clock")


class PythonRecorder(Recording, python_timer.TimerTask):
    """For the pure-Python buckets and wheels, which the compiled core does not expose."""

    __slots__ = ("name", "log", "clock")


def fresh_entry(task: TimerTask, expiration_ms: int, lock: threading.Lock) -> TimerTaskEntry:
    entry = TimerTaskEntry(task, expiration_ms, lock)
    task.entry = entry
    return entry


# --- TimerTaskList ------------------------------------------------------------------------------------------------


def test_lists_share_one_counter_and_re_adding_moves_entries() -> None:
    """Kafka's TimerTaskListTest.testAll, on the impl's buckets."""
    counter, lock = TaskCounter(), threading.Lock()
    list1, list2, list3 = (TimerTaskList(counter) for _ in range(3))
    tasks = [PythonRecorder(str(i), 10, []) for i in range(10)]
    for i, task in enumerate(tasks):
        list1.add(fresh_entry(task, 10, lock))
        assert counter.value == i + 1
    for task in tasks[:4]:  # a new entry for the same task evicts the old one
        entry = TimerTaskEntry(task, 10, lock)
        task.set_timer_task_entry(entry)
        list2.add(entry)
    assert (len(list1), len(list2), counter.value) == (6, 4, 10)
    for task in tasks[4:]:
        entry = TimerTaskEntry(task, 10, lock)
        task.set_timer_task_entry(entry)
        list3.add(entry)
    assert (len(list1), len(list2), len(list3), counter.value) == (0, 4, 6, 10)
    for task in tasks:
        task.cancel()
    assert (len(list2), len(list3), counter.value) == (0, 0, 0)
    assert all(task.entry is None for task in tasks)


def test_list_keeps_insertion_order_and_flush_empties_it() -> None:
    counter, lock = TaskCounter(), threading.Lock()
    bucket = TimerTaskList(counter)
    entries = [fresh_entry(PythonRecorder(str(i), 1, []), 5, lock) for i in range(5)]
    for entry in entries:
        bucket.add(entry)
    bucket.remove(entries[2])  # O(1) unlink from the middle
    assert list(bucket) == [entries[0], entries[1], entries[3], entries[4]]
    assert bucket.set_expiration(40) and not bucket.set_expiration(40)
    assert bucket.flush() == [entries[0], entries[1], entries[3], entries[4]]
    assert (len(bucket), counter.value, bucket.expiration_ms) == (0, 0, -1)
    assert all(entry.bucket is None and entry.next is None for entry in entries)
    bucket.remove(entries[0])  # not in this bucket: nothing happens
    assert counter.value == 0


# --- TimingWheel --------------------------------------------------------------------------------------------------


def wheel_1000() -> tuple[TimingWheel, DelayQueue, threading.Lock]:
    """Kafka's TimingWheelTest fixture: tick 10, wheel size 5, start 1000."""
    lock = threading.Lock()
    queue = DelayQueue(lock)
    return TimingWheel(10, 5, 1000, queue, TaskCounter()), queue, lock


def test_wheel_add_valid_expired_current_tick_and_cancelled() -> None:
    wheel, queue, lock = wheel_1000()
    assert wheel.add(fresh_entry(PythonRecorder("a", 0, []), 1020, lock))
    assert len(queue.heap) == 1 and wheel.counter.value == 1
    assert not wheel.add(fresh_entry(PythonRecorder("b", 0, []), 999, lock))  # expired
    assert not wheel.add(fresh_entry(PythonRecorder("c", 0, []), 1005, lock))  # inside the current tick
    cancelled = PythonRecorder("d", 0, [])
    entry = fresh_entry(cancelled, 1020, lock)
    cancelled.cancel()
    assert not wheel.add(entry)


def test_wheel_overflow_created_lazily_and_reused() -> None:
    wheel, queue, lock = wheel_1000()
    assert wheel.overflow_wheel is None
    assert wheel.add(fresh_entry(PythonRecorder("a", 0, []), 1060, lock))
    overflow = wheel.overflow_wheel
    assert overflow is not None and (overflow.tick_ms, overflow.current_time_ms) == (50, 1000)
    assert wheel.add(fresh_entry(PythonRecorder("b", 0, []), 1061, lock))
    assert wheel.overflow_wheel is overflow and overflow.overflow_wheel is None


def test_wheel_advance_rounds_down_and_moves_overflow() -> None:
    wheel, queue, lock = wheel_1000()
    wheel.advance_clock(1005)
    assert wheel.current_time_ms == 1000
    wheel.advance_clock(1010)
    assert wheel.current_time_ms == 1010
    wheel.add(fresh_entry(PythonRecorder("a", 0, []), 1070, lock))
    wheel.advance_clock(1060)
    assert (wheel.current_time_ms, wheel.overflow_wheel.current_time_ms) == (1060, 1050)


def test_bucket_queued_once_per_round() -> None:
    wheel, queue, lock = wheel_1000()
    for i in range(5):
        wheel.add(fresh_entry(PythonRecorder(str(i), 0, []), 1021, lock))
    assert len(queue.heap) == 1


# --- SystemTimer, virtual clock -----------------------------------------------------------------------------------


def virtual(tick_ms: int = 1, wheel_size: int = 20, start_ms: int = 0, **kwargs) -> tuple[SystemTimer, list]:
    return SystemTimer.virtual(tick_ms, wheel_size, start_ms, **kwargs), []


def test_tick_one_fires_every_task_exactly_at_its_expiration() -> None:
    """Kafka's TimerTest.testTaskExpiration mix (wheel size 3), stepped 1 ms at a time."""
    timer, log = virtual(1, 3, 0)
    delays = list(range(5)) + [d for d in range(10, 100) for _ in (0, 1)] + list(range(100, 500))
    for i, delay in enumerate(delays):
        timer.add(Recorder(f"{i}:{delay}", delay, log, timer.clock))
    assert [name for name, _ in log] == ["0:0"]  # only delay 0 runs on add
    for now in range(1, 500):
        timer.advance_to(now)
    assert len(log) == len(delays)
    assert all(int(name.split(":")[1]) == at for name, at in log[1:])
    assert timer.size() == 0


def test_already_expired_tasks_run_on_add() -> None:
    timer, log = virtual(1, 3, 100)
    for delay in range(-5, 0):
        timer.add(Recorder(str(delay), delay, log))
    assert sorted(name for name, _ in log) == sorted(str(d) for d in range(-5, 0))
    assert timer.size() == 0


def test_tasks_run_at_the_start_of_their_tick() -> None:
    timer, log = virtual(10, 20, 0)
    for delay in (9, 10, 15, 19, 205):
        timer.add(Recorder(str(delay), delay, log, timer.clock))
    assert log == [("9", 0)]  # within the current tick: runs on add
    timer.advance_to(10)
    assert sorted(log[1:]) == [("10", 10), ("15", 10), ("19", 10)]
    timer.advance_to(199)
    assert len(log) == 4
    timer.advance_to(200)
    assert log[-1] == ("205", 200)


def test_one_advance_jumps_over_empty_ticks_and_drains_in_order() -> None:
    timer, log = virtual(1, 20, 0)
    for delay in (30_000, 5, 400, 8_001):
        timer.add(Recorder(str(delay), delay, log, timer.clock))
    assert timer.advance_to(10**9)
    assert [name for name, _ in log] == ["5", "400", "8001", "30000"]
    assert not timer.advance_to(10**9 + 1)  # nothing due: no bucket released


def test_cancel_and_re_add() -> None:
    timer, log = virtual()
    task = Recorder("a", 50, log, timer.clock)
    timer.add(task)
    assert timer.size() == 1
    task.cancel()
    assert timer.size() == 0 and not task.scheduled
    task.cancel()  # idempotent
    timer.add(task)
    timer.advance_to(10)
    timer.add(task)  # re-adding moves the deadline to 60
    assert timer.size() == 1
    timer.advance_to(59)
    assert log == []
    timer.advance_to(60)
    assert log == [("a", 60)]


def test_a_task_cancelled_by_an_earlier_task_of_its_bucket_does_not_run() -> None:
    timer, log = virtual()
    victim = Recorder("victim", 5, log)

    class Killer(TimerTask):
        __slots__ = ()

        def run(self) -> None:
            log.append(("killer", None))
            victim.cancel()

    timer.add(Killer(5))
    timer.add(victim)
    timer.advance_to(5)
    assert log == [("killer", None)]


def test_a_task_may_re_add_itself_while_running() -> None:
    timer, log = virtual()

    class Periodic(TimerTask):
        __slots__ = ()

        def run(self) -> None:
            log.append(timer.clock())
            if len(log) < 3:
                timer.add(self)

    timer.add(Periodic(7))
    for now in range(1, 100):
        timer.advance_to(now)
    assert log == [7, 14, 21] and timer.size() == 0


def test_task_exceptions_are_reported_and_do_not_stop_other_tasks() -> None:
    errors: list = []
    timer, log = virtual(on_error=lambda error, task: errors.append((error, task)))

    class Broken(TimerTask):
        __slots__ = ()

        def run(self) -> None:
            raise RuntimeError("boom")

    broken = Broken(3)
    timer.add(broken)
    timer.add(Recorder("after", 3, log))
    timer.add(Broken(-1))  # expired on add: reported too, add itself does not raise
    timer.advance_to(3)
    assert log == [("after", None)]
    assert [task for _, task in errors][1] is broken and all(isinstance(e, RuntimeError) for e, _ in errors)


def test_size_pending_and_describe() -> None:
    timer, log = virtual(1, 2, 0)
    for name, delay in (("a", 1), ("b", 3), ("c", 9)):
        timer.add(Recorder(name, delay, log))
    assert timer.size() == 3
    assert sorted(task.name for task in timer.pending()) == ["a", "b", "c"]
    described = timer.describe(label=lambda task: task.name)
    assert [level["tick_ms"] for level in described["levels"]] == [1, 2, 4, 8]
    assert described["levels"][0] == {"tick_ms": 1, "wheel_size": 2, "current_ms": 0,
                                      "buckets": [{"slot": 1, "expiration_ms": 1, "entries": ["a"]}]}


def test_domain_checks() -> None:
    for args in ((0, 20, 0), (1, 1, 0), (1, 20, -1), (2**62, 4, 0), (1.5, 20, 0), (1, 20, LONG_MAX + 1)):
        with pytest.raises(TimerDomainError) as caught:
            SystemTimer.virtual(*args)
        assert caught.value.code == "invalid_params"
    timer, log = virtual(1, 20, 5)
    with pytest.raises(TimerDomainError) as caught:
        timer.add(Recorder("huge", LONG_MAX, log))
    assert caught.value.code == "delay_out_of_range" and timer.size() == 0
    with pytest.raises(TypeError):
        Recorder("float", 1.5, log)
    with pytest.raises(TimerDomainError) as caught:
        timer.advance_to(4)
    assert caught.value.code == "clock_backwards"
    with pytest.raises(TimerDomainError) as caught:
        timer.advance_to(LONG_MAX + 1)
    assert caught.value.code == "clock_out_of_range"


def test_virtual_clock() -> None:
    clock = VirtualClock(7)
    assert clock() == clock.now() == 7
    clock.advance_to(9)
    assert clock() == 9


def test_shutdown_drops_pending_tasks_and_refuses_new_ones() -> None:
    timer, log = virtual()
    tasks = [Recorder(str(d), d, log) for d in (5, 50, 5000)]
    for task in tasks:
        timer.add(task)
    assert sorted(timer.shutdown(), key=lambda task: task.delay_ms) == tasks
    assert timer.size() == 0 and timer.shutdown() == []
    with pytest.raises(RuntimeError):
        timer.add(tasks[0])
    timer.advance_to(10_000)
    assert log == []


def test_a_task_moves_between_timers() -> None:
    first, log = virtual()
    second, _ = virtual()
    task = Recorder("a", 5, log)
    first.add(task)
    second.add(task)
    assert (first.size(), second.size()) == (0, 1)
    first.advance_to(5)
    assert log == []
    second.advance_to(5)
    assert log == [("a", None)]


# --- SystemTimer, real clock ----------------------------------------------------------------------------------------


class Signal(TimerTask):
    __slots__ = ("event", "thread")

    def __init__(self, delay_ms: int):
        super().__init__(delay_ms)
        self.event, self.thread = threading.Event(), None

    def run(self) -> None:
        self.thread = threading.current_thread().name
        self.event.set()


def test_real_timer_fires_on_the_executor_and_stops_its_threads() -> None:
    with SystemTimer(name="unit") as timer:
        assert timer.has_reaper and not timer.virtual
        soon, later = Signal(5), Signal(60_000)
        timer.add(soon)
        timer.add(later)
        assert soon.event.wait(WAIT_S)
        assert soon.thread == "executor-unit"
        threads = (timer._reaper.thread, timer._executor.thread)
    assert not later.event.is_set()
    assert not any(thread.is_alive() for thread in threads)
    with pytest.raises(RuntimeError):
        timer.advance_to(5)


def test_real_reaper_survives_a_failing_task() -> None:
    errors: list = []

    class Broken(TimerTask):
        __slots__ = ()

        def run(self) -> None:
            raise RuntimeError("boom")

    with SystemTimer(on_error=lambda error, task: errors.append(error)) as timer:
        timer.add(Broken(1))
        after = Signal(20)
        timer.add(after)
        assert after.event.wait(WAIT_S)
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)


def test_real_timer_without_reaper_is_advanced_by_hand() -> None:
    with SystemTimer(reaper=False) as timer:
        assert not timer.has_reaper
        task = Signal(1)
        timer.add(task)
        while not task.event.wait(0.001):
            timer.advance_clock(50)  # waits for the bucket inside the delay queue
        assert task.event.is_set()
