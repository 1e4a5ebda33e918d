"""Kafka's DelayedOperation and DelayedOperationPurgatory, single-threaded, over the virtual SystemTimer.

A delayed operation waits for a condition (an acks=-1 produce waits for the followers, a fetch for min bytes). The
purgatory remembers it under one or more *keys* (partitions, group members) and in the timer. It completes exactly
once, by whichever comes first:
  * an event: somebody calls ``check_and_complete(key)`` after changing what the op waits for, and the op's
    ``try_complete`` finds its condition true;
  * its timeout: the timer runs it, which completes it and then calls ``on_expiration``;
  * ``force_complete`` from other code.
``force_complete`` is the single door: a compare-and-set on ``completed`` lets one caller through, which cancels the
timer entry and runs ``on_complete``; every other caller gets False.

Completed ops are not removed from the watch lists of their other keys at once. They stay as *stale entries* until a
check on that key walks past them, or until a *purge*: after every timer advance the purgatory compares its estimate
of operations (incremented once per watch, never decremented) with the number still in the timer, and when the
difference exceeds ``purge_interval`` it resets the estimate and sweeps every list.

The model holds the lock structure (512 shards, per-op locks) as a single thread of control: every Kafka call is one
atomic step here. Interleavings are the business of specs/ and of the conformance suite's concurrent mode.
"""

from __future__ import annotations

from typing import Callable

import attrs

from kpurgatory.model.releases import CURRENT, Release
from kpurgatory.model.timer import SystemTimer, TimerTask, check_expiration
from kpurgatory.model.vocabulary import Complete, Event, Expire, Purge


@attrs.define
class Journal:
    """Where the model writes the events a command causes, with the group each belongs to (see Observation)."""

    events: list[Event] = attrs.field(factory=list)
    group_keys: list[object] = attrs.field(factory=list)
    current_group: object = None

    def record(self, event: Event) -> None:
        self.events.append(event)
        self.group_keys.append(self.current_group)

    def take(self) -> tuple[tuple[Event, ...], tuple[int, ...]]:
        """The events since the last take, and the sizes of their runs of equal group keys."""
        sizes: list[int] = []
        previous = object()
        for key in self.group_keys:
            if sizes and key == previous:
                sizes[-1] += 1
            else:
                sizes.append(1)
            previous = key
        events = tuple(self.events)
        self.events.clear()
        self.group_keys.clear()
        return events, tuple(sizes)


# ---------------------------------------------------------------------------------------------------------------
# DelayedOperation
# ---------------------------------------------------------------------------------------------------------------


@attrs.define(eq=False)
class DelayedOperation(TimerTask):
    """An operation whose condition the trace controls: what the last ``set_ready`` said, or before any, whether
    the ``ready_on``-th tryComplete call has been made. ``via`` tells onComplete which route won (an observation,
    not Kafka state)."""

    journal: Journal = attrs.field(kw_only=True, repr=False)
    ready_on: int | None = attrs.field(default=None, kw_only=True)
    ready: bool | None = attrs.field(default=None, kw_only=True)
    try_calls: int = attrs.field(default=0, kw_only=True)
    completed: bool = attrs.field(default=False, kw_only=True)
    #: delay + clock when the op was built: its deadline in releases before KAFKA-3470
    built_expiration_ms: int | None = attrs.field(default=None, kw_only=True)

    @property
    def op_id(self) -> str:
        return self.task_id

    def condition_holds(self) -> bool:
        if self.ready is not None:
            return self.ready
        return self.ready_on is not None and self.try_calls >= self.ready_on

    def force_complete(self, via: str) -> bool:
        """Complete the op if nobody has yet; only the first caller gets True and runs onComplete."""
        if self.completed:
            return False
        self.completed = True
        self.cancel()
        self.on_complete(via)
        return True

    def on_complete(self, via: str) -> None:
        self.journal.record(Complete(self.op_id, via))

    def on_expiration(self) -> None:
        self.journal.record(Expire(self.op_id))

    def try_complete(self, via: str) -> bool:
        """User code by contract: if the condition holds, return force_complete(); else False. Counts its calls."""
        self.try_calls += 1
        return self.force_complete(via) if self.condition_holds() else False

    def safe_try_complete_or_else(self, action: Callable[[], None]) -> bool:
        """Under the op lock: try; if that fails run ``action`` (watch the keys) and try once more."""
        if self.try_complete("try"):
            return True
        action()
        return self.try_complete("try")

    def safe_try_complete(self) -> bool:
        """Under the op lock: a completed op is not tried again (KAFKA-17848)."""
        return False if self.completed else self.try_complete("check")

    def run(self) -> None:
        """The timer's expiry: complete, and only if that won, call onExpiration."""
        if self.force_complete("expire"):
            self.on_expiration()


# ---------------------------------------------------------------------------------------------------------------
# DelayedOperationPurgatory
# ---------------------------------------------------------------------------------------------------------------


class EmptyKeysError(ValueError):
    """tryCompleteElseWatch was given no keys (Kafka: IllegalArgumentException, before anything happens)."""

    code = "empty_keys"


@attrs.define(eq=False)
class DelayedOperationPurgatory:
    """The purgatory. ``watchers`` maps each key to its watch list (insertion order, duplicates kept); a key is
    present only while its list is non-empty, except transiently inside one call (and, before KAFKA-2160, for
    ever once it had a list). ``release`` is the Kafka release whose rules it follows (`model/releases.py`)."""

    timer: SystemTimer
    journal: Journal
    purge_interval: int
    release: Release = CURRENT
    watchers: dict[str, list[DelayedOperation]] = attrs.field(factory=dict)
    estimated_total_operations: int = 0

    # --- tryCompleteElseWatch ---------------------------------------------------------------------------------

    def try_complete_else_watch(self, op: DelayedOperation, keys: tuple[str, ...]) -> bool:
        """Try to complete ``op``; failing that, watch it under every key, try again, and put it in the timer.

        The second try closes the window in which the condition became true after the first try but before the op
        was on the lists, where no check would have found it (the lost wakeup that KAFKA-1952's design prevents).
        Returns True only when one of this call's own tries completed the op.
        """
        if not keys:
            raise EmptyKeysError("The watch key list can't be empty")
        # Kafka would watch the op and then wrap its deadline at the timer add; rejecting first leaves no op on watch
        # lists without a timeout
        check_expiration(self.timer.now_ms, op.delay_ms)
        if not self.release.has("KAFKA-1952"):
            return self.try_before_each_key_else_watch(op, keys)
        if not self.release.has("KAFKA-8334"):
            return self.try_watch_until_completed(op, keys)

        def watch_all_keys() -> None:
            for key in keys:
                # KAFKA-18027: no new watches for an op that is already complete
                if not op.completed or not self.release.has("KAFKA-18027"):
                    self.watch_for_operation(key, op)
            self.estimated_total_operations += 1

        if op.safe_try_complete_or_else(watch_all_keys):
            return True
        self.add_to_timer_unless_completed(op)
        return False

    def try_watch_until_completed(self, op: DelayedOperation, keys: tuple[str, ...]) -> bool:
        """Before KAFKA-8334: the same two tries, but the loop over the keys gives up (returns False) as soon as it
        meets the op completed, and the estimate counts the call only once a key was watched. Alone, that happens
        only to an op watched again after it completed: nothing is watched, tried or counted."""
        if op.try_complete("try"):
            return True
        for index, key in enumerate(keys):
            if op.completed:
                return False
            self.watch_for_operation(key, op)
            if index == 0:
                self.estimated_total_operations += 1
        if op.try_complete("try"):
            return True
        self.add_to_timer_unless_completed(op)
        return False

    def try_before_each_key_else_watch(self, op: DelayedOperation, keys: tuple[str, ...]) -> bool:
        """Before KAFKA-1952: a tryComplete before watching each key (n calls for n keys, the CPU cost that
        change removed), giving up at a completed op as above."""
        for index, key in enumerate(keys):
            if op.completed:
                return False
            if op.try_complete("try"):
                return True
            self.watch_for_operation(key, op)
            if index == 0:
                self.estimated_total_operations += 1
        self.add_to_timer_unless_completed(op)
        return False

    def add_to_timer_unless_completed(self, op: DelayedOperation) -> None:
        if op.completed:
            return
        if self.release.has("KAFKA-3470"):
            self.timer.add(op)
        else:  # the deadline the op was built with, even when it is watched again
            self.timer.add(op, expiration_ms=op.built_expiration_ms)
        if op.completed:  # expired on the spot by the add
            op.cancel()

    def watch_for_operation(self, key: str, op: DelayedOperation) -> None:
        self.watchers.setdefault(key, []).append(op)

    # --- checkAndComplete -------------------------------------------------------------------------------------

    def check_and_complete(self, key: str) -> int:
        """Walk the key's list in order: drop ops already completed, try the others, drop the ones that complete.
        Returns how many ops this call completed; an emptied list is removed."""
        operations = self.watchers.get(key)
        if operations is None:
            return 0
        completed, kept = 0, []
        for op in operations:  # each visited entry is kept or removed, as Kafka's iterator does: with duplicate
            if op.completed:   # entries, which occurrence goes decides the list order cancel_for_key reports
                continue
            if op.safe_try_complete():
                completed += 1
            else:
                kept.append(op)
        operations[:] = kept
        self.remove_key_if_empty(key, operations)
        return completed

    def remove_key_if_empty(self, key: str, operations: list[DelayedOperation]) -> None:
        """KAFKA-2160: an emptied list leaves the map, if the key still maps to that very list."""
        if self.release.has("KAFKA-2160") and self.watchers.get(key) is operations and not operations:
            del self.watchers[key]

    # --- cancelForKey -----------------------------------------------------------------------------------------

    def cancel_for_key(self, key: str) -> list[DelayedOperation]:
        """Remove the key's whole list and cancel each op's timer entry. Nothing is completed; stale (completed)
        entries are returned too. A cancelled op can still complete through its other keys, but never times out."""
        operations = self.watchers.pop(key, [])
        for op in operations:
            op.cancel()
        return operations

    # --- counters ---------------------------------------------------------------------------------------------

    def watched(self) -> int:
        """Entries over all watch lists: an op once per key (and per duplicate), completed ones included."""
        return sum(len(operations) for operations in self.watchers.values())

    def num_delayed(self) -> int:
        return self.timer.size()

    # --- the reaper's step: advanceClock then the purge check ---------------------------------------------------

    def advance_clock(self, to_ms: int) -> None:
        self.timer.advance_clock(to_ms)
        self.journal.current_group = "purge"
        if self.purge_is_due():
            self.estimated_total_operations = self.num_delayed()
            self.journal.record(Purge(self.purge_completed()))

    def watcher_keys(self) -> list[str]:
        """The keys that have a watch list (never an empty one, since KAFKA-2160)."""
        return sorted(self.watchers)

    def purge_is_due(self) -> bool:
        """The purge rule: strictly more than ``purge_interval`` operations estimated gone from the timer."""
        return self.estimated_total_operations - self.num_delayed() > self.purge_interval

    def purge_completed(self) -> int:
        purged = 0
        for key, operations in list(self.watchers.items()):
            survivors = [op for op in operations if not op.completed]
            purged += len(operations) - len(survivors)
            operations[:] = survivors
            self.remove_key_if_empty(key, operations)
        return purged

    # --- shutdown ---------------------------------------------------------------------------------------------

    def shutdown(self) -> list[TimerTask]:
        """Stop: what is still in the timer is dropped, neither completed nor expired."""
        return self.timer.pending()
