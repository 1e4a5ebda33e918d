"""What a failure is: its signature, and whether it is one of Kafka's known misbehaviours (a *finding*).

A signature groups the failures that are the same bug: the property a contract violation breaks; the command and the
field (result, error, events) in which a system differs from the model; or how a system failed to answer (raised an
exception of some class, crashed, hung, broke the protocol) and in which command. `kpurgatory check` reports one
shrunk counterexample per signature and, once a signature is reported, treats runs that fail with it as passing, so
exploration goes on to the next bug.

Kafka's own timer misbehaves at the edge of the model's domain, where its ``long`` arithmetic wraps (the model's
choice there is written down in ``model/timer.py``). A system that does what Kafka does there has not diverged from
Kafka; it has Kafka's bug. `FINDINGS` names those behaviours, each by the class of input that triggers it and the
system's outcome on it; a failure that matches one is reported as ``Kafka finding (NAME): …`` with its own shrunk
trace, apart from failures, and does not fail the check unless asked to (``--fail-on-findings``).
"""

from __future__ import annotations

import re
from typing import Callable

import attrs

from kpurgatory.conformance.adapters.subprocess import AdapterError, AdapterTimedOut
from kpurgatory.conformance.check.compare import Difference
from kpurgatory.model import Model
from kpurgatory.model import vocabulary as v


@attrs.frozen(order=True)
class Signature:
    """``kind`` is one of differs, breaks, raised, hung, finding or an adapter error's kind (adapter crashed, …);
    ``command`` is the command that failed (empty when the kind alone names the bug: a broken property, a finding);
    ``detail`` is the field, property, exception class or finding name."""

    kind: str
    command: str
    detail: str

    def __str__(self) -> str:
        if self.kind == "differs":
            return f"{self.command}: {self.detail} differs from the model"
        if self.kind == "breaks":
            return f"breaks {self.detail}"
        if self.kind == "finding":
            return f"Kafka finding {self.detail}"
        return f"{self.command}: {self.kind} {self.detail}".rstrip()

    @property
    def slug(self) -> str:
        """The signature as a file-name part."""
        return re.sub(r"[^a-z0-9]+", "-", f"{self.kind} {self.command} {self.detail}".lower()).strip("-")


def failure_signature(command: v.Command, what) -> Signature:
    """The signature of the first failure of a step (a `Difference` or a contract `Violation`)."""
    if isinstance(what, Difference):
        return Signature("differs", command.name, what.field)
    return Signature("breaks", "", what.prop)


def error_signature(where: str, error: Exception) -> Signature:
    """The signature of a system that did not answer ``where`` (a command's name, or init)."""
    if isinstance(error, AdapterTimedOut):
        return Signature("hung", where, "")
    if isinstance(error, AdapterError):
        return Signature(error.kind, where, "")
    return Signature("raised", where, type(error).__name__)


# ---------------------------------------------------------------------------------------------------------------
# Kafka's known misbehaviours at the edge of the domain
# ---------------------------------------------------------------------------------------------------------------

#: Inputs: predicates on the model after the step, the step's command and the model's observation of it (None for
#: init); outcomes: on what the system answered (None when it failed) and how it failed (None when it answered).
Inputs = Callable[[Model, "v.Command | None", "v.Observation | None"], bool]
Outcome = Callable[["v.Observation | None", "Exception | None"], bool]


def deadline_beyond_long_max(model: Model, command: v.Command | None, expected: v.Observation | None) -> bool:
    """``now + delay_ms`` exceeds Long.MAX_VALUE: the model rejects it with ``delay_out_of_range``."""
    return expected is not None and expected.error == "delay_out_of_range"


def past_long_max(model: Model) -> set[str]:
    """The tasks and ops whose entry sits at a level whose window ends past Long.MAX_VALUE (current time + interval;
    the interval itself may exceed it). Kafka computes that end in a ``long``: it wraps, so Kafka places such an
    entry wrongly or, once an interval wraps to 0 or keeps wrapping, never."""
    return {entry.task.task_id for wheel in model.timer.timing_wheel.levels()
            if wheel.current_time_ms + wheel.interval > v.LONG_MAX
            for bucket in wheel.buckets for entry in bucket.entries}


def compares_past_long_max(model: Model, deadline: int) -> bool:
    """Placing ``deadline`` compares it with a sum past Long.MAX_VALUE: the finest level's current time + tick (the
    "already expired" test), or the current time + interval of a level it passes through or lands in. Kafka
    computes those sums in a ``long``; they wrap."""
    levels = list(model.timer.timing_wheel.levels())
    if levels[0].current_time_ms + levels[0].tick_ms > v.LONG_MAX:
        return True
    if deadline < levels[0].current_time_ms + levels[0].tick_ms:
        return False
    for wheel in levels:
        if wheel.current_time_ms + wheel.interval > v.LONG_MAX:
            return True
        if deadline < wheel.current_time_ms + wheel.interval:
            return False
    return False


def places_past_long_max(model: Model, command: v.Command | None, expected: v.Observation | None) -> bool:
    """The step adds an entry whose placement compares past Long.MAX_VALUE (or that sits at a level whose window
    ends past it), or advances the clock while such an entry is pending."""
    if isinstance(command, (v.TimerAdd, v.Watch)) and not deadline_beyond_long_max(model, command, expected):
        added = command.task if isinstance(command, v.TimerAdd) else command.op
        delay = command.delay_ms if isinstance(command, v.TimerAdd) else model.ops[command.op].delay_ms
        return added in past_long_max(model) or compares_past_long_max(model, model.now_ms + delay)
    return advances_past_long_max(model, command, expected)


def advances_past_long_max(model: Model, command: v.Command | None, expected: v.Observation | None) -> bool:
    """The step advances the clock while an entry sits at a level whose window ends past Long.MAX_VALUE."""
    return isinstance(command, v.Advance) and bool(past_long_max(model))


def reads_past_long_max(model: Model, command: v.Command | None, expected: v.Observation | None) -> bool:
    """A read-out of the wheel's structure once it has a level whose window ends past Long.MAX_VALUE (levels stay
    when their entries leave, and Kafka's keep their wrapped ticks and intervals)."""
    return isinstance(command, (v.Wheel, v.DelayQueue)) and any(
        wheel.current_time_ms + wheel.interval > v.LONG_MAX for wheel in model.timer.timing_wheel.levels())


def accepted(observed: v.Observation | None, error: Exception | None) -> bool:
    return observed is not None and observed.error is None


def raised(*texts: str) -> Outcome:
    """The system failed with one of ``texts`` in what it said: an exception's message in process, the protocol's
    failure text or a crashed adapter's stderr through a subprocess."""
    return lambda observed, error: error is not None and any(text in f"{type(error).__name__}: {error}"
                                                             for text in texts)


#: how Kafka's wheel fails when its long arithmetic wrapped: a tick of 0, endless overflow levels, a negative index
wheel_arithmetic_failed = raised("/ by zero", "ArithmeticException", "StackOverflow", "ArrayIndexOutOfBounds")


def hung(observed: v.Observation | None, error: Exception | None) -> bool:
    return isinstance(error, AdapterTimedOut)


def anything(observed: v.Observation | None, error: Exception | None) -> bool:
    return True


@attrs.frozen
class Finding:
    name: str
    description: str
    inputs: Inputs = attrs.field(repr=False)
    outcome: Outcome = attrs.field(repr=False)

    @property
    def signature(self) -> Signature:
        return Signature("finding", "", self.name)

    def __str__(self) -> str:
        return f"Kafka finding ({self.name}): {self.description}"


#: Kafka's known misbehaviours, first match wins (kafka-semantics §2.6, measured against Kafka's classes). Each input
#: class is narrow on purpose: a system's own bug that only shows in such a step is taken for Kafka's, but the same
#: bug in any other run is still a failure.
FINDINGS = (
    Finding("deadline-wraps", "now + delay_ms past Long.MAX_VALUE wraps negative in Kafka, so the task runs at once, "
                              "or, with the clock at the end of time, fails to be placed (the model rejects it: "
                              "delay_out_of_range)", deadline_beyond_long_max,
            lambda observed, error: accepted(observed, error) or wheel_arithmetic_failed(observed, error)),
    Finding("interval-divides-by-zero", "an overflow level's interval wraps to 0 (even wheel sizes), so the next "
                                        "level divides by zero: ArithmeticException: / by zero",
            places_past_long_max, raised("/ by zero", "ArithmeticException")),  # a hot JVM drops the message
    Finding("interval-stack-overflow", "overflow levels whose interval wrapped are created without end (odd wheel "
                                       "sizes): StackOverflowError", places_past_long_max, raised("StackOverflow")),
    Finding("negative-bucket-index", "a wrapped interval gives a negative bucket index: "
                                     "ArrayIndexOutOfBoundsException",
            places_past_long_max, raised("ArrayIndexOutOfBounds")),
    Finding("reinsertion-livelock", "an entry whose level's window wrapped is re-inserted into the same bucket "
                                    "forever: the reaper spins (a hang)", advances_past_long_max, hung),
    Finding("wrapped-window-read-out", "the wheel read-out differs once a level's window (current time + "
                                       "interval) wrapped", reads_past_long_max, anything),
)


def recognise(model: Model, command: v.Command | None, expected: v.Observation | None,
              observed: v.Observation | None, error: Exception | None) -> Finding | None:
    """The known misbehaviour a failing step is, if any: ``command`` is the step's command and ``expected`` the
    model's observation of it (None for init), ``observed`` the system's (None when it failed to answer), ``error``
    how it failed."""
    return next((finding for finding in FINDINGS
                 if finding.inputs(model, command, expected) and finding.outcome(observed, error)), None)
