"""What a Python programmer would write instead of a timing wheel: the benchmark's yardsticks.

* `HeapqTimer` — the textbook timer: a ``heapq`` of ``[expiration, sequence, task]`` items with lazy cancellation (the
  priority-queue recipe of the ``heapq`` documentation: a cancelled item is blanked and skipped when it surfaces).
  Adding is O(log n) with a small constant; cancelling is O(1) but the item stays in the heap until its expiration.
* `AsyncioTimer` — asyncio's own timers: ``loop.call_at`` handles in the loop's heap, ``handle.cancel()``, and the
  loop's ``_run_once`` releasing what is due. The loop's clock is replaced by a virtual one and its selector never
  waits, so the loop is stepped exactly like the other timers. asyncio has no public call that runs one iteration;
  ``_run_once`` is the loop's own iteration, so everything measured is asyncio's code (including its periodic heap
  rebuild once more than half of the scheduled handles are cancelled).
* `SimplePurgatory` — a single-threaded purgatory with the same rules as Kafka's (try, watch, try again, timeout;
  check walks a key's list; the same purge trigger) over either timer, with no locks and no shards.

All three run on a virtual millisecond clock moved by ``advance_to``, and share the task protocol of kpurgatory's
timers: a task has ``delay_ms`` and ``run()``; the timer remembers its pending ``handle``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import selectors
from typing import Hashable, Iterable


class BaselineTask:
    """A task for the baseline timers: its delay, and the timer's handle while it is pending."""

    __slots__ = ("delay_ms", "handle")

    def __init__(self, delay_ms: int):
        self.delay_ms = delay_ms
        self.handle = None

    def run(self) -> None:
        raise NotImplementedError


class HeapqTimer:
    """heapq with lazy cancellation on a virtual clock."""

    def __init__(self, start_ms: int = 0):
        self.now_ms = start_ms
        self.heap: list[list] = []
        self.sequence = itertools.count()
        self.live = 0

    def add(self, task: BaselineTask) -> None:
        if task.handle is not None:
            self.cancel(task)
        task.handle = item = [self.now_ms + task.delay_ms, next(self.sequence), task]
        heapq.heappush(self.heap, item)
        self.live += 1

    def cancel(self, task: BaselineTask) -> None:
        item = task.handle
        if item is not None:
            item[2] = None
            task.handle = None
            self.live -= 1

    def advance_to(self, to_ms: int) -> None:
        self.now_ms = to_ms
        heap = self.heap
        while heap and heap[0][0] <= to_ms:
            task = heapq.heappop(heap)[2]
            if task is not None:
                task.handle = None
                self.live -= 1
                task.run()

    def size(self) -> int:
        return self.live


class _NoWaitSelector(selectors.SelectSelector):
    """The loop's selector, minus the wait: time is virtual, so there is never anything to wait for."""

    def select(self, timeout: float | None = None) -> list:
        return []


class _VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self, start_ms: int):
        super().__init__(_NoWaitSelector())
        self.now_ms = start_ms

    def time(self) -> float:
        return self.now_ms


class AsyncioTimer:
    """asyncio's call_at timers, on a loop whose clock (in ms) is virtual."""

    def __init__(self, start_ms: int = 0):
        self.loop = _VirtualClockLoop(start_ms)
        self.live = 0

    def add(self, task: BaselineTask) -> None:
        if task.handle is not None:
            self.cancel(task)
        task.handle = self.loop.call_at(self.loop.now_ms + task.delay_ms, self._fire, task)
        self.live += 1

    def _fire(self, task: BaselineTask) -> None:
        task.handle = None
        self.live -= 1
        task.run()

    def cancel(self, task: BaselineTask) -> None:
        if task.handle is not None:
            task.handle.cancel()
            task.handle = None
            self.live -= 1

    def advance_to(self, to_ms: int) -> None:
        loop = self.loop
        loop.now_ms = to_ms
        while loop._scheduled and loop._scheduled[0].when() <= to_ms:  # _run_once may replace the list
            loop._run_once()

    def size(self) -> int:
        return self.live

    def close(self) -> None:
        self.loop.close()


class SimpleOperation(BaselineTask):
    """A delayed operation for `SimplePurgatory`: same contract as kpurgatory's DelayedOperation, no lock."""

    __slots__ = ("completed", "timer")

    def __init__(self, delay_ms: int):
        super().__init__(delay_ms)
        self.completed = False
        self.timer = None

    def try_complete(self) -> bool:
        raise NotImplementedError

    def on_complete(self) -> None:
        raise NotImplementedError

    def on_expiration(self) -> None:
        raise NotImplementedError

    def force_complete(self) -> bool:
        if self.completed:
            return False
        self.completed = True
        if self.timer is not None:
            self.timer.cancel(self)
        self.on_complete()
        return True

    def run(self) -> None:
        if self.force_complete():
            self.on_expiration()


class SimplePurgatory:
    """Kafka's purgatory rules in the plainest single-threaded Python: a dict of lists and a counter."""

    def __init__(self, timer: HeapqTimer | AsyncioTimer, purge_interval: int = 1000):
        self.timer = timer
        self.purge_interval = purge_interval
        self.watchers: dict[Hashable, list[SimpleOperation]] = {}
        self.estimated_total_operations = 0

    def try_complete_else_watch(self, op: SimpleOperation, keys: Iterable[Hashable]) -> bool:
        if op.try_complete():
            return True
        watchers = self.watchers
        for key in keys:
            if not op.completed:
                operations = watchers.get(key)
                if operations is None:
                    watchers[key] = [op]
                else:
                    operations.append(op)
        self.estimated_total_operations += 1
        if op.try_complete():
            return True
        if not op.completed:
            op.timer = self.timer
            self.timer.add(op)
        return False

    def check_and_complete(self, key: Hashable) -> int:
        operations = self.watchers.get(key)
        if operations is None:
            return 0
        completed = 0
        kept = []
        for op in operations:
            if op.completed:
                continue
            if op.try_complete():
                completed += 1
            else:
                kept.append(op)
        if kept:
            self.watchers[key] = kept
        else:
            del self.watchers[key]
        return completed

    def advance_to(self, to_ms: int) -> int | None:
        self.timer.advance_to(to_ms)
        if self.estimated_total_operations - self.timer.size() <= self.purge_interval:
            return None
        self.estimated_total_operations = self.timer.size()
        purged = 0
        for key, operations in list(self.watchers.items()):
            kept = [op for op in operations if not op.completed]
            purged += len(operations) - len(kept)
            if kept:
                self.watchers[key] = kept
            else:
                del self.watchers[key]
        return purged

    def watched(self) -> int:
        return sum(map(len, self.watchers.values()))

    def num_delayed(self) -> int:
        return self.timer.size()
