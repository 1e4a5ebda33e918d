"""A thread-safe hierarchical timing wheel: Kafka's SystemTimer, TimingWheel, TimerTaskList and TimerTask.

This module is the library counterpart of ``kpurgatory.model.timer``; read the two side by side. The classes and
their methods carry the model's names and meanings (constructors are plain ``__init__`` rather than ``create``), and
the conformance suite checks that the two agree command by command. The model explains the wheel itself (virtual ids, lazy overflow wheels, buckets queued only when
their expiration changes, cascading); this docstring explains what the library adds: threads, locks and speed.

Two modes, one code path
------------------------
``SystemTimer()`` runs on the real monotonic clock (``time.monotonic_ns() // 10**6``, as Kafka's ``hiResClockMs``).
A reaper thread loops on ``advance_clock(200)`` — wait up to 200 ms for a bucket to fall due, then drain every due
bucket — and hands expired tasks to a single executor thread, as Kafka's SystemTimer does with its one-thread pool.
``SystemTimer.virtual()`` injects a `VirtualClock` instead: the clock moves only through ``advance_to``, expired
tasks run inline at the point where the threaded timer would hand them to the executor, and no thread exists. Both
modes share every line that touches the wheel; only the clock and the hand-off differ. The conformance adapter and
the benchmark use the virtual mode; a server uses the real one.

Locking
-------
One lock per timer guards every wheel, bucket, entry link and the delay queue. Kafka needs a read-write lock plus a
monitor per bucket and per entry because JVM threads run in parallel; under CPython's GIL finer locks buy no
parallelism and each acquisition costs about as much as the work it protects. A single lock also closes the race that
Kafka documents and accepts in ``TimerTaskEntry.remove``: there, a cancel that runs while the reaper holds the entry
between two buckets can miss it, and the cancelled entry sits in a bucket until that bucket is released. Here each
entry carries its timer's lock, so ``TimerTask.cancel`` and the reaper's flush-and-reinsert exclude each other.

No user code runs under the lock. The reaper releases it after each bucket and only then hands that bucket's expired
entries over, so a task's ``run`` may add, cancel or re-add tasks on the same timer. An entry is run only if it is
still its task's current entry when its turn comes: a cancel (or re-add) that lands between the hand-off and the run
wins, which Kafka's executor cannot promise and which is exactly the model's behaviour, where the run is inline.

What user code cannot do: lose a task
-------------------------------------
Whatever a task's ``run`` raises — any exception, ``SystemExit`` and ``KeyboardInterrupt`` included — never reaches
the reaper, the executor or the other tasks: the executor catches it and reports it to ``on_error(error, task)`` (by
default: logged on the ``kpurgatory.impl`` logger). If ``on_error`` itself raises, that is logged (at CRITICAL) and
the executor goes on; the reaper and the executor loops also survive anything that escapes them. (Kafka swallows
task exceptions in an unused Future, and its reaper thread dies on an error.) With a virtual clock tasks run inline,
so an error of ``on_error`` is raised to the caller of ``advance_to`` — after the rest of that batch has run.

A task that blocks holds up the one executor thread: every task expiring after it runs late by as long as it blocks
(as in Kafka, whose executor has one thread too); keep ``run`` short, or hand long work to your own pool. Nothing is
lost meanwhile: `TimerBase.shutdown` waits up to `EXECUTOR_CLOSE_S` for the executor, then takes back every handed-over
task it has not started and returns it with the pending ones. So every task added is run, cancelled, or returned by
``shutdown``.

Domain
------
As in the model: ``tick_ms >= 1``, ``wheel_size >= 2``, ``0 <= start_ms <= Long.MAX_VALUE``,
``tick_ms * wheel_size <= Long.MAX_VALUE`` (`TimerDomainError` code ``invalid_params``), and a task whose expiration
``now + delay_ms`` would exceed Long.MAX_VALUE is rejected with code ``delay_out_of_range`` before anything changes.
Negative delays are legal and mean "already expired", as in Kafka. Python integers do not wrap, so a level whose
interval exceeds Long.MAX_VALUE is simply the top level.

Speed
-----
Everything is ``__slots__``; a bucket is its own list sentinel, so an entry costs one object and O(1) unlinking; the
shared task counter makes ``size()`` O(1); an advance with nothing due is one heap peek, and an advance that spans
many ticks jumps straight from due bucket to due bucket through the delay queue, so its cost does not depend on how
many tasks are pending. A pending task costs its own object plus one entry and one integer (about 160 bytes).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import sys
import threading
import time
from typing import Callable, Iterable, Iterator

from kpurgatory.impl import sync
from kpurgatory.model.vocabulary import LONG_MAX

logger = logging.getLogger("kpurgatory.impl")

#: How long the reaper waits for a bucket before looping (Kafka's advanceClock(200L)).
REAPER_POLL_MS = 200
#: How long shutdown waits for the executor to finish the expired tasks already handed to it (Kafka: 5 s).
EXECUTOR_CLOSE_S = 5.0

ErrorHook = Callable[[BaseException, object], None]


def log_error(error: BaseException, source: object) -> None:
    """The default error hook: user code failed in a reaper, executor or check walk; log it and carry on."""
    logger.error("callback of %r raised", source, exc_info=error)


def report_unreported(error: BaseException, source: object) -> None:
    """The last resort when an error hook itself raised: log it (never raises)."""
    try:
        logger.critical("error hook failed while reporting an error of %r", source, exc_info=error)
    except BaseException:  # noqa: BLE001 - logging is broken too: the interpreter's own hook prints it
        sys.unraisablehook(sys.UnraisableHookArgs(type(error), error, error.__traceback__, None, source))


def report(on_error: ErrorHook, error: BaseException, source: object) -> None:
    """Give ``error`` to the hook; if the hook raises, `report_unreported` gets the hook's error."""
    try:
        on_error(error, source)
    except BaseException as hook_error:  # noqa: BLE001 - a broken hook must not take its caller down
        report_unreported(hook_error, source)


def monotonic_ms() -> int:
    """The real clock: monotonic milliseconds (Kafka's Time.SYSTEM.hiResClockMs)."""
    return time.monotonic_ns() // 1_000_000


class TimerDomainError(ValueError):
    """A timer input outside the domain where the wheel's arithmetic is sound; ``code`` names the rule."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class VirtualClock:
    """A clock that moves only when told to: injecting one makes a `SystemTimer` deterministic and thread-free."""

    __slots__ = ("now_ms",)

    def __init__(self, start_ms: int = 0):
        self.now_ms = start_ms

    def now(self) -> int:
        return self.now_ms

    __call__ = now

    def advance_to(self, to_ms: int) -> None:
        if to_ms < self.now_ms:
            raise TimerDomainError("clock_backwards", f"advance to {to_ms} is before now ({self.now_ms})")
        if to_ms > LONG_MAX:
            raise TimerDomainError("clock_out_of_range", f"advance to {to_ms} exceeds Long.MAX_VALUE")
        self.now_ms = to_ms


# ---------------------------------------------------------------------------------------------------------------
# TimerTask and TimerTaskEntry
# ---------------------------------------------------------------------------------------------------------------


class TimerTask:
    """Something the timer runs once ``delay_ms`` has passed; subclasses define `run`. ``entry`` is its current
    place in a timer: set by `SystemTimer.add`, cleared by `cancel`, kept after a plain task has run (as in Kafka)."""

    __slots__ = ("delay_ms", "entry")

    def __init__(self, delay_ms: int):
        if type(delay_ms) is not int and (not isinstance(delay_ms, int) or isinstance(delay_ms, bool)):
            raise TypeError(f"delay_ms must be an int, got {delay_ms!r}")
        self.delay_ms = delay_ms
        self.entry: TimerTaskEntry | None = None

    def run(self) -> None:
        raise NotImplementedError("TimerTask subclasses define run()")

    def cancel(self) -> None:
        """Take the task out of its timer (O(1)); a task that is not pending is left as it is."""
        entry = self.entry
        while entry is not None:
            with entry.lock:
                if self.entry is entry:
                    self.entry = None
                    if entry.bucket is not None:
                        entry.bucket.remove(entry)
                    return
            entry = self.entry  # re-added meanwhile: cancel the new entry instead

    @property
    def scheduled(self) -> bool:
        """Whether the task is in a timer's bucket (pending)."""
        entry = self.entry
        return entry is not None and entry.bucket is not None

    def set_timer_task_entry(self, entry: TimerTaskEntry) -> None:
        """A task has at most one live entry: a new one evicts the old. The caller holds the entry's lock."""
        old = self.entry
        if old is not None and old is not entry and old.bucket is not None:
            old.bucket.remove(old)
        self.entry = entry


class TimerTaskEntry:
    """One scheduling of a task: the task, its absolute expiration, the bucket holding it with its list links, and
    the lock of the timer it belongs to."""

    __slots__ = ("task", "expiration_ms", "bucket", "next", "prev", "lock")

    def __init__(self, task: TimerTask, expiration_ms: int, lock: threading.Lock):
        self.task = task
        self.expiration_ms = expiration_ms
        self.lock = lock
        self.bucket = self.next = self.prev = None

    def cancelled(self) -> bool:
        """An entry is cancelled once its task no longer points at it (cancelled or re-added)."""
        return self.task.entry is not self

    def remove(self) -> None:
        with self.lock:
            if self.bucket is not None:
                self.bucket.remove(self)


# ---------------------------------------------------------------------------------------------------------------
# TimerTaskList: a bucket
# ---------------------------------------------------------------------------------------------------------------


class TaskCounter:
    """The entry count shared by all buckets of one timer (Kafka's AtomicInteger taskCounter); guarded by the
    timer's lock like everything else."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class TimerTaskList:
    """A bucket: an intrusive circular doubly linked list of entries in insertion order, whose sentinel is the bucket
    itself (``next`` is the head, ``prev`` the tail), and the expiration of the tick it holds (-1 when unused).
    Callers hold the timer's lock."""

    __slots__ = ("next", "prev", "expiration_ms", "counter")

    def __init__(self, counter: TaskCounter):
        self.next = self.prev = self
        self.expiration_ms = -1
        self.counter = counter

    def add(self, entry: TimerTaskEntry) -> None:
        if entry.bucket is not None:  # an entry lives in at most one bucket
            entry.bucket.remove(entry)
        tail = self.prev
        entry.next, entry.prev, entry.bucket = self, tail, self
        tail.next = self.prev = entry
        self.counter.value += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        if entry.bucket is self:
            entry.prev.next = entry.next
            entry.next.prev = entry.prev
            entry.next = entry.prev = entry.bucket = None
            self.counter.value -= 1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Returns whether the expiration changed: only then must the bucket be (re)queued."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def flush(self) -> list[TimerTaskEntry]:
        """Empty the bucket, returning its entries in insertion order, and mark it unused."""
        flushed = []
        entry = self.next
        while entry is not self:
            flushed.append(entry)
            following = entry.next
            entry.next = entry.prev = entry.bucket = None  # no dangling links keep neighbours alive
            entry = following
        self.next = self.prev = self
        self.counter.value -= len(flushed)
        self.expiration_ms = -1
        return flushed

    def __iter__(self) -> Iterator[TimerTaskEntry]:
        entry = self.next
        while entry is not self:
            yield entry
            entry = entry.next

    def __len__(self) -> int:
        return sum(1 for _ in self)


class DelayQueue:
    """Kafka's DelayQueue of buckets: a heap ordered by (expiration, offer order) and a condition on the timer's lock
    for the reaper to wait on. Callers hold the timer's lock."""

    __slots__ = ("heap", "_offers", "_condition", "_waiters", "_interrupted")

    def __init__(self, lock: threading.Lock):
        self.heap: list[tuple[int, int, TimerTaskList]] = []
        self._offers = itertools.count()
        self._condition = sync.condition(lock)
        self._waiters = 0
        self._interrupted = False

    def offer(self, bucket: TimerTaskList) -> None:
        item = (bucket.expiration_ms, next(self._offers), bucket)
        heapq.heappush(self.heap, item)
        if self._waiters and self.heap[0] is item:  # a new earliest bucket: the reaper's wait is too long now
            self._condition.notify()

    def expirations(self) -> list[int]:
        """The expirations of the queued buckets, sorted; a bucket queued twice counts twice."""
        return sorted(expiration for expiration, _, _ in self.heap)

    def poll_due(self, now_ms: int) -> TimerTaskList | None:
        """The earliest bucket whose expiration is at or before ``now_ms``, removed from the queue; else None."""
        heap = self.heap
        if heap and heap[0][0] <= now_ms:
            return heapq.heappop(heap)[2]
        return None

    def poll(self, clock: Callable[[], int], timeout_ms: float) -> TimerTaskList | None:
        """Like `poll_due`, but wait (in real time) up to ``timeout_ms`` for a bucket to fall due or for
        `interrupt`. Assumes ``clock`` runs at real speed."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            now = clock()
            bucket = self.poll_due(now)
            if bucket is not None or self._interrupted:
                self._interrupted = False
                return bucket
            wait_s = deadline - time.monotonic()
            if self.heap:
                wait_s = min(wait_s, (self.heap[0][0] - now) / 1000)
            if wait_s <= 0:
                return None
            self._waiters += 1
            try:
                self._condition.wait(wait_s)
            finally:
                self._waiters -= 1

    def interrupt(self) -> None:
        """End the current (or next) `poll` wait at once; used to stop the reaper promptly."""
        self._interrupted = True
        self._condition.notify_all()


# ---------------------------------------------------------------------------------------------------------------
# TimingWheel
# ---------------------------------------------------------------------------------------------------------------


class TimingWheel:
    """One level: ``wheel_size`` buckets of ``tick_ms``, covering [current_time_ms, current_time_ms + interval).
    Callers hold the timer's lock."""

    __slots__ = ("tick_ms", "wheel_size", "interval", "current_time_ms", "queue", "counter", "buckets",
                 "overflow_wheel")

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, queue: DelayQueue, counter: TaskCounter):
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval = tick_ms * wheel_size
        self.current_time_ms = start_ms - start_ms % tick_ms  # rounded down to a multiple of the tick
        self.queue = queue
        self.counter = counter
        self.buckets = [TimerTaskList(counter) for _ in range(wheel_size)]
        self.overflow_wheel: TimingWheel | None = None

    def add(self, entry: TimerTaskEntry) -> bool:
        """Place ``entry`` in this wheel or an overflow wheel. False means: cancelled, or due now (run it)."""
        expiration = entry.expiration_ms
        if entry.task.entry is not entry:
            return False  # cancelled
        if expiration < self.current_time_ms + self.tick_ms:
            return False  # already expired: within the current tick
        # Kafka recurses and re-tests "expired" on every level; a loop is cheaper, and the test cannot succeed above
        # the first level, since an overflow wheel's time never passes the time of the wheel below it.
        wheel = self
        while expiration >= wheel.current_time_ms + wheel.interval:
            wheel = wheel.overflow_wheel or wheel.add_overflow_wheel()
        virtual_id = expiration // wheel.tick_ms
        bucket = wheel.buckets[virtual_id % wheel.wheel_size]
        bucket.add(entry)
        if bucket.set_expiration(virtual_id * wheel.tick_ms):
            wheel.queue.offer(bucket)
        return True

    def add_overflow_wheel(self) -> TimingWheel:
        """Created on first use: tick = this wheel's interval, start = this wheel's current time."""
        if self.overflow_wheel is None:
            self.overflow_wheel = TimingWheel(self.interval, self.wheel_size, self.current_time_ms, self.queue,
                                              self.counter)
        return self.overflow_wheel

    def advance_clock(self, time_ms: int) -> None:
        """Move to the tick containing ``time_ms`` if that is a later tick; overflow wheels follow."""
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - time_ms % self.tick_ms
            if self.overflow_wheel is not None:
                self.overflow_wheel.advance_clock(self.current_time_ms)

    def levels(self) -> Iterator[TimingWheel]:
        wheel: TimingWheel | None = self
        while wheel is not None:
            yield wheel
            wheel = wheel.overflow_wheel


# ---------------------------------------------------------------------------------------------------------------
# Threads: the executor of expired tasks and the reaper
# ---------------------------------------------------------------------------------------------------------------


class TaskExecutor:
    """Kafka's one-thread executor: runs handed-off expired batches in order, off the reaper's thread.

    Nothing a task does can stop it: ``run`` reports every failure of user code itself, and anything that still
    escapes (a bug, or the last-resort report failing) is logged and the loop goes on with the next batch. A task
    that blocks stalls the tasks handed over after it (their expiry is late by as long as it blocks), as in Kafka.
    `close` gives the executor a bounded time to finish; what it has not reached by then is claimed back and
    returned, so a stuck task cannot make shutdown lose the tasks queued behind it."""

    def __init__(self, name: str, run: Callable[[list], None]):
        self._batches: queue.SimpleQueue = queue.SimpleQueue()
        self._run = run
        self.current: list | None = None  # the batch being run, for close to claim what it has not reached
        self.thread = threading.Thread(target=self._loop, name=f"executor-{name}", daemon=True)
        self.thread.start()

    def submit(self, batch: list) -> None:
        self._batches.put(batch)

    def _loop(self) -> None:
        while (batch := self._batches.get()) is not None:
            self.current = batch
            try:
                self._run(batch)
            except BaseException as error:  # noqa: BLE001 - the executor must outlive any bug it meets
                report_unreported(error, self)
            self.current = None

    def close(self) -> list:
        """Let the batches already handed over run (for up to `EXECUTOR_CLOSE_S`), then stop. Returns the batches it
        did not finish in time (the caller claims the tasks in them that did not run)."""
        self._batches.put(None)
        if threading.current_thread() is self.thread:
            return []
        timeout_s = EXECUTOR_CLOSE_S
        self.thread.join(timeout_s)
        if not self.thread.is_alive():
            return []
        logger.warning("%s still running a task after %.1f s; abandoning it", self.thread.name, timeout_s)
        left = [self.current] if self.current is not None else []
        while True:
            try:
                batch = self._batches.get_nowait()
            except queue.Empty:
                break
            if batch is not None:
                left.append(batch)
        self._batches.put(None)  # if the stuck task ever returns, the thread ends
        return left


class Reaper:
    """Kafka's ExpiredOperationReaper / SystemTimerReaper: a daemon thread calling ``work(REAPER_POLL_MS)`` until
    stopped. ``work`` waits inside the timer's delay queue, so `stop` interrupts that wait. Anything escaping
    ``work`` is reported and the loop goes on (Kafka's reaper thread would die); if the report itself fails, that is
    logged."""

    def __init__(self, name: str, work: Callable[[int], object], timer: TimerBase, on_error: ErrorHook):
        self._work = work
        self._timer = timer
        self._on_error = on_error
        self._stopping = False
        self.thread = threading.Thread(target=self._loop, name=f"ExpirationReaper-{name}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self._stopping:
            try:
                self._work(REAPER_POLL_MS)
            except BaseException as error:  # noqa: BLE001 - the reaper must outlive any bug it meets
                report(self._on_error, error, self)

    def stop(self) -> None:
        self._stopping = True
        self._timer.interrupt()
        if threading.current_thread() is not self.thread:
            self.thread.join()


# ---------------------------------------------------------------------------------------------------------------
# SystemTimer
# ---------------------------------------------------------------------------------------------------------------


def check_expiration(now_ms: int, delay_ms: int) -> int:
    """``now + delay``, refused beyond Long.MAX_VALUE (where Kafka's long arithmetic wraps and fires at once)."""
    expiration = now_ms + delay_ms
    if expiration > LONG_MAX:
        raise TimerDomainError(
            "delay_out_of_range",
            f"delay_ms={delay_ms} at now={now_ms} gives expiration {expiration} > Long.MAX_VALUE ({LONG_MAX})",
        )
    return expiration


def validate_timer_params(tick_ms: int, wheel_size: int, start_ms: int) -> None:
    """The domain where the wheel is well defined (Kafka checks none of these)."""
    for field, value in (("tick_ms", tick_ms), ("wheel_size", wheel_size), ("start_ms", start_ms)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TimerDomainError("invalid_params", f"{field} must be an int, got {value!r}")
    if tick_ms < 1:
        raise TimerDomainError("invalid_params", f"tick_ms must be >= 1, got {tick_ms}")
    if wheel_size < 2:  # a one-bucket wheel's overflow wheel has the same interval
        raise TimerDomainError("invalid_params", f"wheel_size must be >= 2, got {wheel_size}")
    if not 0 <= start_ms <= LONG_MAX:
        raise TimerDomainError("invalid_params", f"start_ms must be in [0, Long.MAX_VALUE], got {start_ms}")
    if tick_ms * wheel_size > LONG_MAX:
        raise TimerDomainError("invalid_params", "tick_ms * wheel_size must not exceed Long.MAX_VALUE")


class TimerBase:
    """What every SystemTimer shares, whatever holds its wheels (this module's classes or the compiled core): the
    clock, the domain checks, the error hook, the executor and reaper threads, shutdown and the context manager.
    Subclasses build their wheels in `_build` and define ``add``, ``advance_clock``, ``_run_expired``,
    ``_drop_pending``, ``_claim`` and the read-outs.

    With the default clock (real monotonic ms) the timer owns an executor thread and, unless ``reaper=False``, a
    reaper thread; call `shutdown` to stop them (or use the timer as a context manager). With a `VirtualClock`
    (see `virtual`) there are no threads: `advance_to` moves the clock and drains, and expired tasks run inline.
    """

    def __init__(self, tick_ms: int = 1, wheel_size: int = 20, start_ms: int | None = None, *,
                 clock: Callable[[], int] | None = None, reaper: bool = True, name: str = "kpurgatory",
                 on_error: ErrorHook | None = None):
        self.clock = clock if clock is not None else monotonic_ms
        start = self.clock() if start_ms is None else start_ms
        validate_timer_params(tick_ms, wheel_size, start)
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.virtual = isinstance(clock, VirtualClock)
        self.on_error = on_error if on_error is not None else log_error
        self._build(start)
        self._executor = None if self.virtual else TaskExecutor(name, self._run_expired)
        if self._executor is not None:
            self._hand_off = self._executor.submit
        self._reaper = Reaper(name, self.advance_clock, self, self.on_error) if reaper and not self.virtual else None

    def _build(self, start_ms: int) -> None:
        raise NotImplementedError

    @classmethod
    def virtual(cls, tick_ms: int = 1, wheel_size: int = 20, start_ms: int = 0, **kwargs) -> TimerBase:
        """A deterministic, thread-free timer whose clock starts at ``start_ms`` and moves only by `advance_to`."""
        return cls(tick_ms, wheel_size, start_ms, clock=VirtualClock(start_ms), **kwargs)

    @property
    def has_reaper(self) -> bool:
        return self._reaper is not None

    def shutdown(self) -> list[TimerTask]:
        """Stop the reaper, let the executor finish what it was handed (for up to `EXECUTOR_CLOSE_S`), and drop
        every pending task, neither run nor cancelled. Returns the dropped tasks, and those handed to an executor
        that did not reach them in time (a task blocking it): an accepted task always runs, is cancelled, or is
        returned here. Idempotent."""
        if self._reaper is not None:
            self._reaper.stop()
        unrun = []
        if self._executor is not None:
            unrun = [task for batch in self._executor.close() for task in self._claim(batch)]
        return unrun + self._drop_pending()

    def __enter__(self) -> TimerBase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()


class SystemTimer(TimerBase):
    """SystemTimer(tickMs, wheelSize, startMs) over a clock, in pure Python (see `TimerBase`)."""

    def _build(self, start_ms: int) -> None:
        self._now = self.clock.now if self.virtual else self.clock  # a bound method is cheaper to call
        self._lock = sync.lock("timer")
        self.counter = TaskCounter()
        self.queue = DelayQueue(self._lock)
        self.timing_wheel = TimingWheel(self.tick_ms, self.wheel_size, start_ms, self.queue, self.counter)
        self._closed = False
        self._hand_off = self._run_expired

    # --- scheduling -------------------------------------------------------------------------------------------

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` at now + its delay; re-adding a pending task moves it (its deadline restarts)."""
        if self._closed:
            raise RuntimeError("the timer is shut down")
        lock = self._lock
        now, old = self._now(), task.entry
        expiration = now + task.delay_ms
        if expiration > LONG_MAX:
            check_expiration(now, task.delay_ms)  # raises
        if old is not None and old.lock is not lock:
            task.cancel()  # moving from another timer
        entry = TimerTaskEntry(task, expiration, lock)
        with lock:
            if task.entry is None:  # the common case, a task not pending: nothing to evict
                task.entry = entry
            else:
                task.set_timer_task_entry(entry)
            placed = self.timing_wheel.add(entry)
        if not placed:
            self._hand_off((entry,))  # Kafka: taskExecutor.submit(task)

    def advance_clock(self, timeout_ms: float = 0) -> bool:
        """Release every bucket due by the clock, earliest first: advance the wheels to it and re-insert its entries
        (cascading them down a level, or handing them over to run). If none is due, first wait up to ``timeout_ms``
        for one (never for a virtual timer). Returns whether any bucket was released (Kafka's return value)."""
        lock, delay_queue, wheel, now = self._lock, self.queue, self.timing_wheel, self._now
        wait = timeout_ms > 0 and not self.virtual
        if not wait:
            try:  # nothing due: done without the lock (the peek is a valid linearization point)
                if delay_queue.heap[0][0] > now():
                    return False
            except IndexError:
                return False
        wheel_add = wheel.add
        released = False
        while True:
            with lock:
                if wait and not released:
                    bucket = delay_queue.poll(now, timeout_ms)
                else:
                    bucket = delay_queue.poll_due(now())
                if bucket is None:
                    return released
                wheel.advance_clock(bucket.expiration_ms)
                expired = [entry for entry in bucket.flush() if not wheel_add(entry)]  # cancelled: skipped later
            released = True
            if expired:  # outside the lock: tasks may use the timer
                self._hand_off(expired)

    def advance_to(self, to_ms: int) -> bool:
        """Virtual timers only: move the clock to ``to_ms`` and release everything due by then."""
        if not self.virtual:
            raise RuntimeError("advance_to needs a VirtualClock; the real clock moves by itself")
        self.clock.advance_to(to_ms)
        return self.advance_clock()

    def _run_expired(self, entries: Iterable[TimerTaskEntry]) -> None:
        """Run expired entries in order, skipping any cancelled or re-added since the hand-off (or claimed back by
        shutdown). Whatever a task raises (SystemExit included) goes to ``on_error`` and the batch goes on. If
        ``on_error`` raises too: on an executor thread that is logged; inline (virtual clock), the first such error
        is raised to the caller once the batch is done."""
        failure = None
        for entry in entries:
            with self._lock:  # the claim: exactly one of this run and shutdown takes the entry
                task = entry.task
                if task is None or task.entry is not entry:
                    entry.task = None  # spent for good: break the task <-> entry cycle so refcounting frees both
                    continue
                entry.task = None
            try:
                task.run()
            except BaseException as error:  # noqa: BLE001 - one failing task must not stop the others
                try:
                    self.on_error(error, task)
                except BaseException as hook_error:  # noqa: BLE001
                    if self._executor is not None:
                        report_unreported(hook_error, task)
                    elif failure is None:
                        failure = hook_error
        if failure is not None:
            raise failure

    def interrupt(self) -> None:
        """Wake a reaper waiting in `advance_clock` (so it can see it is being stopped)."""
        with self._lock:
            self.queue.interrupt()

    # --- read-outs --------------------------------------------------------------------------------------------

    def size(self) -> int:
        """Entries currently in buckets, at any level (O(1): the shared counter)."""
        return self.counter.value

    def pending(self) -> list[TimerTask]:
        with self._lock:
            return [entry.task for wheel in self.timing_wheel.levels() for bucket in wheel.buckets
                    for entry in bucket]

    def queued_expirations(self) -> list[int]:
        """The delay queue read-out: expirations of the queued buckets, sorted, duplicates kept."""
        with self._lock:
            return self.queue.expirations()

    def describe(self, label: Callable[[TimerTask], object] = repr) -> dict:
        """The wheel read-out of the model's ``describe``: levels finest first, non-empty buckets by slot, each entry
        shown as ``label(task)``."""
        with self._lock:
            return {
                "levels": [
                    {
                        "tick_ms": wheel.tick_ms,
                        "wheel_size": wheel.wheel_size,
                        "current_ms": wheel.current_time_ms,
                        "buckets": [
                            {"slot": slot, "expiration_ms": bucket.expiration_ms,
                             "entries": [label(entry.task) for entry in bucket]}
                            for slot, bucket in enumerate(wheel.buckets) if bucket.next is not bucket
                        ],
                    }
                    for wheel in self.timing_wheel.levels()
                ]
            }

    # --- shutdown ---------------------------------------------------------------------------------------------

    def _drop_pending(self) -> list[TimerTask]:
        with self._lock:
            self._closed = True
            return [entry.task for wheel in self.timing_wheel.levels() for bucket in wheel.buckets
                    for entry in bucket.flush()]

    def _claim(self, entries: list[TimerTaskEntry]) -> list[TimerTask]:
        """The tasks of a hand-off the executor did not run, taken back so that it never will."""
        claimed = []
        for entry in entries:
            with self._lock:
                task = entry.task
                if task is not None and task.entry is entry:
                    entry.task = None
                    claimed.append(task)
        return claimed
