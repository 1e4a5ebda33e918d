"""Preemption for CPython threads, so that calls of a concurrent run interleave inside the system's critical sections.

A JVM thread can lose its core between any two instructions, and several run at once on several cores. CPython runs
one thread at a time and switches only when the running one blocks or its switch interval ends, so a call of a few
microseconds usually runs from start to end alone, and a race whose window is a few bytecodes (a find-or-create
without its lock) is never seen. `preempted` makes the calling thread step aside at random points inside the call
instead: at a random few of the Python function calls and C calls it makes, it sleeps briefly, letting every other
thread that is ready run meanwhile. Nothing about the system changes; only when threads switch.
"""

from __future__ import annotations

import contextlib
import random
import sys
import time

#: the chance that a thread steps aside at a function entry or at the return of a C call
CHANCE = 0.05
#: how long it steps aside (a sleep of any length lets the waiting threads take the interpreter)
PAUSE_S = 1e-6


def _step_aside(_frame, event: str, _arg) -> None:
    if event in ("call", "c_return") and random.random() < CHANCE:
        time.sleep(PAUSE_S)


@contextlib.contextmanager
def preempted():
    """While the calling thread runs the body, it steps aside at random points."""
    previous = sys.getprofile()
    sys.setprofile(_step_aside)
    try:
        yield
    finally:
        sys.setprofile(previous)
