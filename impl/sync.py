"""Where the pure-Python implementation gets its locks, named by what they guard.

Every lock `kpurgatory.impl.purgatory` and `kpurgatory.impl.timer` take is made here: ``lock("shard")``,
``reentrant_lock("op")``, ``condition(lock)``, and the stripes of the compare-and-set on an op's ``completed`` flag.
Normally they are `threading`'s, at no cost. A controlled scheduler (one that runs the threads one at a time and
chooses who goes next at each lock, so that an interleaving can be replayed) supplies its own for a while with
`using`; objects made meanwhile keep the scheduler's locks. The compiled core follows (`follow`): meanwhile its ops
get their locks from the scheduler too (its other locks are held only where no Python code runs, so no thread ever
stops while holding one).

The roles, in the implementation's lock order: ``op`` (an op's lock around its tries), ``shard`` (a watcher shard's
map of lists), ``estimate`` (the estimate of operations), ``timer`` (the wheels, buckets and delay queue), and
``completed`` (the flag's compare-and-set, held for that instant only).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import attrs

#: how many locks stripe the compare-and-set on ``completed`` (an op's stripe comes from its id)
STRIPES = 64


@attrs.frozen
class Primitives:
    """Factories of a plain lock, a reentrant lock (each given the role of the lock it makes) and a condition."""

    lock: Callable[[str], Any]
    reentrant_lock: Callable[[str], Any]
    condition: Callable[[Any], Any]


THREADING = Primitives(lambda _role: threading.Lock(), lambda _role: threading.RLock(), threading.Condition)
_primitives = THREADING
#: told of every change of primitives: the compiled core, whose ops then take their locks from them
_followers: list[Callable[[Primitives], None]] = []
#: the stripes of the compare-and-set on ``completed``, read as ``completion_locks[id(op) >> 4 & 63]``
completion_locks = tuple(threading.Lock() for _ in range(STRIPES))


def lock(role: str):
    return _primitives.lock(role)


def reentrant_lock(role: str):
    return _primitives.reentrant_lock(role)


def condition(guard):
    return _primitives.condition(guard)


def follow(follower: Callable[[Primitives], None]) -> None:
    """Call ``follower`` with the primitives whenever `using` changes them (the compiled core's hook)."""
    _followers.append(follower)


def _use(primitives: Primitives, stripes: tuple) -> None:
    global _primitives, completion_locks
    _primitives, completion_locks = primitives, stripes
    for follower in _followers:
        follower(primitives)


@contextlib.contextmanager
def using(primitives: Primitives) -> Iterator[None]:
    """Make every lock from ``primitives`` while the body runs (not reentrant: one controller at a time)."""
    previous = _primitives, completion_locks
    _use(primitives, tuple(primitives.lock("completed") for _ in range(STRIPES)))
    try:
        yield
    finally:
        _use(*previous)
