"""kpurgatory.impl — a thread-safe, fast delayed-operation purgatory and hierarchical timing wheel for Python servers.

    from kpurgatory.impl import DelayedOperation, DelayedOperationPurgatory, SystemTimer

It is the library twin of `kpurgatory.model` (same names, same semantics, checked by the conformance suite). Two
implementations share that API: ``compiled`` (the default: the wheels, buckets, delay queue and watch lists in C,
`kpurgatory.impl.compiled`) and ``python`` (pure Python, `kpurgatory.impl.timer` and `kpurgatory.impl.purgatory`,
which explain the design). ``KPURGATORY_IMPL=python`` in the environment selects the pure-Python one for
``kpurgatory.impl``'s names; `implementation` gives either explicitly.
"""

from __future__ import annotations

import os
import warnings
from types import SimpleNamespace

from kpurgatory.impl.purgatory import EmptyKeysError
from kpurgatory.impl.timer import TimerDomainError, VirtualClock

IMPLEMENTATIONS = ("compiled", "python")
#: the environment variable that selects the implementation behind this package's names
SELECTOR = "KPURGATORY_IMPL"


def implementation(name: str) -> SimpleNamespace:
    """The classes of one implementation: ``name``, ``SystemTimer``, ``TimerTask``, ``DelayedOperation`` and
    ``DelayedOperationPurgatory``."""
    if name == "compiled":
        try:
            from kpurgatory.impl import compiled as module
        except ImportError as error:
            raise ImportError(f"kpurgatory.impl's compiled core is not built ({error}); reinstall the package "
                              f"(pip install -e .) or set {SELECTOR}=python") from error
    elif name == "python":
        from kpurgatory.impl import purgatory, timer
        module = SimpleNamespace(SystemTimer=timer.SystemTimer, TimerTask=timer.TimerTask,
                                 DelayedOperation=purgatory.DelayedOperation,
                                 DelayedOperationPurgatory=purgatory.DelayedOperationPurgatory)
    else:
        raise ValueError(f"{SELECTOR}: unknown implementation {name!r} (expected one of {', '.join(IMPLEMENTATIONS)})")
    return SimpleNamespace(name=name, SystemTimer=module.SystemTimer, TimerTask=module.TimerTask,
                           DelayedOperation=module.DelayedOperation,
                           DelayedOperationPurgatory=module.DelayedOperationPurgatory)


def _default() -> SimpleNamespace:
    """The compiled implementation, or, if its extension was not built (a source checkout never installed), the
    pure-Python one with a warning; the test suite fails on that fallback."""
    try:
        return implementation("compiled")
    except ImportError as error:
        warnings.warn(f"{error}; using the pure-Python implementation", RuntimeWarning, stacklevel=2)
        return implementation("python")


SELECTED = implementation(os.environ[SELECTOR]) if os.environ.get(SELECTOR) else _default()
SystemTimer = SELECTED.SystemTimer
TimerTask = SELECTED.TimerTask
DelayedOperation = SELECTED.DelayedOperation
DelayedOperationPurgatory = SELECTED.DelayedOperationPurgatory

__all__ = [
    "DelayedOperation", "DelayedOperationPurgatory", "EmptyKeysError", "IMPLEMENTATIONS", "SystemTimer",
    "TimerDomainError", "TimerTask", "VirtualClock", "implementation",
]
