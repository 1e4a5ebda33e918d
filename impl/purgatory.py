"""A thread-safe delayed-operation purgatory: Kafka's DelayedOperation and DelayedOperationPurgatory.

This module is the library counterpart of ``kpurgatory.model.purgatory`` (read them side by side; the model explains
what a delayed operation is, the double check of ``try_complete_else_watch``, stale entries and the purge rule). Here
is what a library adds to the model's single thread of control.

Using it
--------
Subclass `DelayedOperation` and define ``try_complete`` (return ``self.force_complete()`` when the condition holds,
else False), ``on_complete`` and ``on_expiration``. Then::

    with DelayedOperationPurgatory("produce") as purgatory:       # real clock, reaper thread
        purgatory.try_complete_else_watch(op, [("topic", 0)])       # keys: any hashable values
        ...
        purgatory.check_and_complete(("topic", 0))                  # after the state ``op`` waits on changed

``DelayedOperationPurgatory(timer=SystemTimer.virtual())`` is the deterministic, thread-free variant the conformance
suite drives; ``advance_to(ms)`` moves its clock.

Locks, as in Kafka (ordering: op lock, then a shard lock, then the timer lock; never the reverse)
-----------------------------------------------------------------------------------------------------
Every lock comes from `kpurgatory.impl.sync`, named by its role, so a controlled scheduler can take them over.

* Each op has a lock (a fresh reentrant lock, or one the caller supplies, e.g. a group lock shared by several
  ops). Every ``try_complete`` the purgatory makes runs under it, so one op's condition is never evaluated twice at
  once, and the watch-then-try-again of ``safe_try_complete_or_else`` cannot lose a wakeup: a check that runs after the
  op is on a list must wait for the lock, and then finds the op.
* ``force_complete`` is the single door: a test-and-set of ``completed`` lets exactly one caller through however many
  threads race (try, check, expiry, force). Python has no compare-and-set, so the flag is flipped under one of a few
  striped locks held for that instant only; the op lock is not used because it may be a caller's lock held elsewhere.
* Watch lists live in ``shards`` (default 64) maps, each with its own lock. A str key's shard is Kafka's,
  ``abs(hashCode) % shards`` with Java's String.hashCode (`java_string_hash`): the same in every process (Python's str
  hash is salted), so a checker told the layout aims keys at every shard; other keys go by ``hash(key)``. A shard lock
  is held only to find, create, append to, filter or drop a key's list, never while user code runs. A check walks a
  snapshot of the list and afterwards removes, under the shard lock, the entries whose op it saw completed, so ops
  appended meanwhile are kept. An emptied list is dropped only if the map still holds that very list (Kafka's identity
  rule: a concurrent cancel_for_key and re-watch may have put a new list there). Under the GIL shards do not buy
  parallelism; they keep a thread that is preempted while holding one from stalling unrelated keys.
* The estimate of operations (incremented once per watch that reaches the watch phase, reset by a purge) has its own
  lock: ``+=`` is not atomic across threads.

Errors in user code
-------------------
An exception from ``try_complete`` or ``on_complete`` met while walking a key's list (check_and_complete) is reported
to ``on_error(error, op)`` and the walk goes on: one broken op never keeps others from completing (KAFKA-17240).
The timer reports exceptions from expiry (``on_complete``/``on_expiration``) the same way, and the reaper survives
anything. Exceptions from the caller's own op in ``try_complete_else_watch``, or from ``force_complete`` and
``try_complete`` called directly, propagate to that caller, after the purgatory has made its books consistent: an op
that was put on watch lists is also put in the timer, so it cannot be stranded without a timeout.

Domain
------
Same rules and codes as the model: an empty key list raises `EmptyKeysError` (code ``empty_keys``) before anything
happens; so does an op whose deadline would pass Long.MAX_VALUE: the timer's `TimerDomainError` (code
``delay_out_of_range``), where Kafka would watch the op and then wrap the deadline. Keys must be hashable; a ``str``
passed as the whole key list and an empty-string key are rejected (both are caller bugs that Kafka's typed keys
cannot express). ``purge_interval`` must be an int in [0, Integer.MAX_VALUE].
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Callable, Hashable, Iterable

from kpurgatory.impl import sync
from kpurgatory.impl.timer import (
    ErrorHook, Reaper, SystemTimer, TimerBase, TimerTask, check_expiration, log_error,
)
from kpurgatory.model.contract import java_string_hash
from kpurgatory.model.vocabulary import INT_MAX

logger = logging.getLogger("kpurgatory.impl")
#: watch-list shards of a purgatory unless it is given its own count
SHARDS = 64

#: Java's String.hashCode of a key, remembered: keys repeat, and the hash walks every character
key_hash = functools.lru_cache(maxsize=1 << 16)(java_string_hash)

# ---------------------------------------------------------------------------------------------------------------
# DelayedOperation
# ---------------------------------------------------------------------------------------------------------------


class OperationProtocol:
    """What makes a timer task a delayed operation, whichever implementation's `TimerTask` it is mixed into (the
    concrete class declares the ``completed`` and ``lock`` slots): an operation that completes exactly once: when
    ``try_complete`` finds its condition true, when it times out (``on_complete`` then ``on_expiration``), or when
    somebody calls ``force_complete``. ``lock`` guards ``try_complete``; pass one to share it with other state (Kafka's
    Optional<Lock> constructor)."""

    __slots__ = ()

    def __init__(self, delay_ms: int, lock: threading.RLock | threading.Lock | None = None):
        super().__init__(delay_ms)
        self.completed = False
        self.lock = sync.reentrant_lock("op") if lock is None else lock

    # --- to define in subclasses ------------------------------------------------------------------------------

    def try_complete(self) -> bool:
        """Return ``self.force_complete()`` if the condition holds, else False. Runs under ``lock``."""
        raise NotImplementedError

    def on_complete(self) -> None:
        """Runs exactly once, in the thread whose ``force_complete`` won."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Runs after ``on_complete`` when the timeout won."""
        raise NotImplementedError

    # --- the completion protocol ------------------------------------------------------------------------------

    def force_complete(self) -> bool:
        """Complete the op if nobody has yet: only the first caller gets True; it cancels the timeout and runs
        ``on_complete``."""
        if self.completed:
            return False
        with sync.completion_locks[id(self) >> 4 & 63]:
            if self.completed:
                return False
            self.completed = True
        self.cancel()
        self.on_complete()
        return True

    def safe_try_complete_or_else(self, action: Callable[[], None]) -> bool:
        """Under the op lock: try; if that fails run ``action`` (watch the keys) and try once more."""
        with self.lock:
            if self.try_complete():
                return True
            action()
            return self.try_complete()

    def safe_try_complete(self) -> bool:
        """Under the op lock: a completed op is not tried again (KAFKA-17848)."""
        with self.lock:
            return False if self.completed else self.try_complete()

    def run(self) -> None:
        """The timer's expiry: complete, and only if that won, call ``on_expiration``."""
        if self.force_complete():
            self.on_expiration()


class DelayedOperation(OperationProtocol, TimerTask):
    __doc__ = OperationProtocol.__doc__
    __slots__ = ("completed", "lock")


# ---------------------------------------------------------------------------------------------------------------
# DelayedOperationPurgatory
# ---------------------------------------------------------------------------------------------------------------


class EmptyKeysError(ValueError):
    """try_complete_else_watch was given no keys (Kafka: IllegalArgumentException, before anything happens)."""

    code = "empty_keys"


class WatcherList:
    """One shard: watch lists by key (insertion order, duplicates kept) and the lock guarding them."""

    __slots__ = ("watchers_by_key", "lock")

    def __init__(self) -> None:
        self.watchers_by_key: dict[Hashable, list[DelayedOperation]] = {}
        self.lock = sync.lock("shard")


class DelayedOperationPurgatory:
    """The purgatory. Without a ``timer`` it makes a real-clock ``timer_class`` and runs its own reaper thread (timer
    advance, then the purge check); with a virtual timer it makes no thread and `advance_to` drives it."""

    timer_class: type[TimerBase] = SystemTimer

    def __init__(self, name: str = "purgatory", *, purge_interval: int = 1000, timer: TimerBase | None = None,
                 shards: int = SHARDS, on_error: ErrorHook | None = None):
        if not isinstance(purge_interval, int) or isinstance(purge_interval, bool) \
                or not 0 <= purge_interval <= INT_MAX:
            raise ValueError(f"purge_interval must be an int in [0, {INT_MAX}], got {purge_interval!r}")
        if not isinstance(shards, int) or shards < 1 or shards & (shards - 1):
            raise ValueError(f"shards must be a power of two, got {shards!r}")
        self.name = name
        self.purge_interval = purge_interval
        self.on_error = on_error if on_error is not None else log_error
        if timer is None:
            timer = self.timer_class(name=name, reaper=False, on_error=self.on_error)
        elif timer.has_reaper:
            raise ValueError("the timer runs its own reaper; build it with reaper=False, the purgatory reaps it")
        self.timer = timer
        self._build_watchers(shards)
        self.estimated_total_operations = 0
        self._reaper = None if timer.virtual else Reaper(name, self.advance_clock, timer, self.on_error)

    def _build_watchers(self, shards: int) -> None:
        self._shards = [WatcherList() for _ in range(shards)]
        self._shard_mask = shards - 1
        self._estimate_lock = sync.lock("estimate")

    def _watcher_list(self, key: Hashable) -> WatcherList:
        try:
            return self._shards[(abs(key_hash(key)) if isinstance(key, str) else hash(key)) & self._shard_mask]
        except TypeError:
            raise TypeError(f"purgatory keys must be hashable, got {key!r}") from None

    # --- tryCompleteElseWatch ---------------------------------------------------------------------------------

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Try to complete ``op``; failing that, watch it under every key, try again, and put it in the timer.
        Returns True only when one of this call's own tries completed the op."""
        keys = checked_keys(keys)
        check_expiration(self.timer.clock(), op.delay_ms)  # refuse before watching: no op left without a timeout
        watched = False

        def watch_all_keys() -> None:
            nonlocal watched
            for key in keys:
                if op.completed:  # KAFKA-18027: no new watches for an op that is already complete
                    break
                self._watch_for_operation(key, op)
            with self._estimate_lock:
                self.estimated_total_operations += 1
            watched = True

        try:
            if op.safe_try_complete_or_else(watch_all_keys):
                return True
        except BaseException:
            if watched:
                self._add_to_timer(op)  # watched ops must be able to time out, whatever the caller's code did
            raise
        self._add_to_timer(op)
        return False

    def _watch_for_operation(self, key: Hashable, op: DelayedOperation) -> None:
        """Kafka's watchForOperation: under the shard lock, find or create the key's list and append ``op`` (a list
        found must not be removed by a check or purge before the op is on it)."""
        shard = self._watcher_list(key)
        with shard.lock:
            operations = shard.watchers_by_key.get(key)
            if operations is None:
                shard.watchers_by_key[key] = [op]
            else:
                operations.append(op)

    def _add_to_timer(self, op: DelayedOperation) -> None:
        if not op.completed:
            self.timer.add(op)
            if op.completed:  # completed meanwhile, or expired on the spot by the add
                op.cancel()

    # --- checkAndComplete -------------------------------------------------------------------------------------

    def check_and_complete(self, key: Hashable) -> int:
        """Walk the key's list in order: drop ops already completed, try the others, drop the ones that complete.
        Returns how many ops this call completed; an emptied list is removed."""
        shard = self._watcher_list(key)
        with shard.lock:
            operations = shard.watchers_by_key.get(key)
            if operations is None:
                return 0
            snapshot = operations.copy()
        completed = 0
        removed: list[int] = []  # positions in the snapshot of the entries whose visit found their op completed
        for position, op in enumerate(snapshot):
            if not op.completed:
                try:
                    if op.safe_try_complete():
                        completed += 1
                except Exception as error:  # noqa: BLE001 - see "Errors in user code"
                    self.on_error(error, op)
                if not op.completed:
                    continue
            removed.append(position)
        if removed or not snapshot:
            with shard.lock:
                if removed:
                    operations[:] = without_visited(operations, snapshot, removed)
                self._remove_key_if_empty(shard, key, operations)
        return completed

    @staticmethod
    def _remove_key_if_empty(shard: WatcherList, key: Hashable, operations: list[DelayedOperation]) -> None:
        """Under the shard lock: drop the key only if the map still holds this very list and it is empty."""
        if not operations and shard.watchers_by_key.get(key) is operations:
            del shard.watchers_by_key[key]

    # --- cancelForKey -----------------------------------------------------------------------------------------

    def cancel_for_key(self, key: Hashable) -> list[DelayedOperation]:
        """Remove the key's whole list and cancel each op's timeout. Nothing is completed; stale (completed) entries
        and duplicates are returned too, in list order. A cancelled op never times out but can still complete
        through its other keys."""
        shard = self._watcher_list(key)
        with shard.lock:
            operations = shard.watchers_by_key.pop(key, None)
            if operations is None:
                return []
            cancelled = operations.copy()
        for op in cancelled:
            op.cancel()
        return cancelled

    # --- counters ---------------------------------------------------------------------------------------------

    def watched(self) -> int:
        """Entries over all watch lists: an op once per key (and per duplicate), completed ones included."""
        total = 0
        for shard in self._shards:
            with shard.lock:
                total += sum(map(len, shard.watchers_by_key.values()))
        return total

    def watcher_keys(self) -> list[Hashable]:
        """The keys that have a watch list (never an empty one, once every call has returned), sorted."""
        keys = []
        for shard in self._shards:
            with shard.lock:
                keys.extend(shard.watchers_by_key)
        return sorted(keys)

    def num_delayed(self) -> int:
        return self.timer.size()

    # --- the reaper's step: advance the timer, then the purge check -------------------------------------------

    def advance_clock(self, timeout_ms: float = 0) -> int | None:
        """Release the due timer buckets (waiting up to ``timeout_ms`` for one on a real clock), then purge if more
        than ``purge_interval`` operations are estimated gone from the timer. Returns how many watch-list entries
        the purge removed, or None when no purge was due."""
        self.timer.advance_clock(timeout_ms)
        if self.estimated_total_operations - self.timer.size() <= self.purge_interval:
            return None
        with self._estimate_lock:
            self.estimated_total_operations = self.timer.size()
        logger.debug("%s: begin purging watch lists", self.name)
        purged = self.purge_completed()
        logger.debug("%s: purged %d elements from watch lists", self.name, purged)
        return purged

    def advance_to(self, to_ms: int) -> int | None:
        """Virtual timers only: move the clock to ``to_ms``, then `advance_clock`."""
        if not self.timer.virtual:
            raise RuntimeError("advance_to needs a virtual timer; the real clock moves by itself")
        self.timer.clock.advance_to(to_ms)
        return self.advance_clock()

    def purge_completed(self) -> int:
        purged = 0
        for shard in self._shards:
            with shard.lock:
                by_key = shard.watchers_by_key
                for key, operations in list(by_key.items()):
                    survivors = [op for op in operations if not op.completed]
                    if len(survivors) != len(operations):
                        purged += len(operations) - len(survivors)
                        operations[:] = survivors
                    self._remove_key_if_empty(shard, key, operations)
        return purged

    # --- shutdown ---------------------------------------------------------------------------------------------

    def shutdown(self) -> list[TimerTask]:
        """Stop the reaper and the timer. What was still in the timer is dropped, neither completed nor expired, and
        returned. Idempotent."""
        if self._reaper is not None:
            self._reaper.stop()
        return self.timer.shutdown()

    def __enter__(self) -> DelayedOperationPurgatory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()


def without_visited(operations: list[DelayedOperation], snapshot: list[DelayedOperation],
                    removed: list[int]) -> list[DelayedOperation]:
    """``operations`` less the entries at ``removed`` positions of the walked ``snapshot``, as Kafka's iterator
    removes the entry it visits (with duplicates, which occurrence goes decides cancel_for_key's order). Entries
    appended during the walk follow the snapshot and are kept. If another thread reshaped the walked prefix
    meanwhile, positions mean nothing any more: drop one occurrence per removed entry, by identity, instead."""
    prefix = len(snapshot)
    if len(operations) >= prefix and all(a is b for a, b in zip(operations, snapshot)):
        gone = set(removed)
        return [op for position, op in enumerate(operations[:prefix]) if position not in gone] + operations[prefix:]
    pending: dict[int, int] = {}
    for position in removed:
        pending[id(snapshot[position])] = pending.get(id(snapshot[position]), 0) + 1
    kept = []
    for op in operations:
        if pending.get(id(op)):
            pending[id(op)] -= 1
        else:
            kept.append(op)
    return kept


def checked_keys(keys: Iterable[Hashable]) -> tuple[Hashable, ...]:
    """The watch keys as a tuple, or a clear error: empty (`EmptyKeysError`), a bare str/bytes instead of a list,
    an unhashable key, an empty-string key."""
    if isinstance(keys, (str, bytes)):
        raise TypeError(f"keys must be a collection of keys, not the single {type(keys).__name__} {keys!r}")
    keys = tuple(keys)
    if not keys:
        raise EmptyKeysError("The watch key list can't be empty")
    try:
        hash(keys)  # hashes every key, in C
    except TypeError:
        culprit = next(key for key in keys if _unhashable(key))
        raise TypeError(f"purgatory keys must be hashable, got {culprit!r}") from None
    if "" in keys:
        raise ValueError("purgatory keys must not be empty strings")
    return keys


def _unhashable(key: object) -> bool:
    try:
        hash(key)
    except TypeError:
        return True
    return False
