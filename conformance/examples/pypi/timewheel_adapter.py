"""kpurgatory adapter (timer profile, in process) for the PyPI package ``timewheel`` 0.0.5 (module ``timeWheel``).

    PYTHONPATH=conformance/examples/pypi kpurgatory check --profile timer --level contract --impl timewheel_adapter:factory

The package is a thread whose ``run`` is an endless busy loop over ``int(time.time())`` with one-second slots:
``insertTask(task, ttl)`` files a callable under the slot ``probe + ttl`` seconds, and the loop runs a slot's tasks
when the wall clock reaches it. It has no cancel, no move, no read-out of what is pending, and no way to stop or step
the loop. What this adapter does about each, so the verdict can be weighed:

* Time: one protocol millisecond is one second of the package. Each run gets a fresh ``TimeLoop`` whose epoch is
  the run's start, and its thread is never started: ``advance`` calls the package's own, unmodified ``run`` in the
  caller's thread with the module's ``time`` replaced by `SecondsClock`, which serves every second the loop would act
  in, three loop iterations each (a busy loop makes thousands; after three nothing more changes: the slot ran, a wrap
  ran, slot 0 ran), and ends the loop by raising `Parked` from ``time()`` once the target second is served. Seconds in
  which the loop would find nothing to do (no task under its slot, no wrap) are skipped: visiting them changes
  nothing, and a jump of 10^9 seconds must not take 10^9 iterations.
* Tasks run inline (what ``start(isPool=False)`` sets up) and record a Run event.
* Cancel and move: the adapter wraps each task in a `Scheduling` it can disarm; the package still holds and later
  "runs" a disarmed one, which then does nothing. ``size`` is the package's own ``getAllTaskSize()`` less the
  disarmed schedulings the package still holds, and ``shutdown`` lists the armed ones it holds: both read the
  package's state, not the adapter's.
* Shared state: ``TimeLoop`` keeps its task table and error list in class attributes, shared by every instance (a
  finding: FINDINGS.md). Each run gets its own, so one run's tasks cannot fire in the next.
* A deadline past Long.MAX_VALUE is rejected with ``delay_out_of_range``, the vocabulary's domain rule.
"""

from __future__ import annotations

import unittest.mock

from timeWheel import TimeLoop, threadTimeWheel

from kpurgatory.conformance.adapters.sut import Hello
from kpurgatory.model import CommandError
from kpurgatory.model import vocabulary as v

#: loop iterations per visited second after which the loop's state no longer changes (see the module docstring)
ITERATIONS_PER_SECOND = 3


class Parked(Exception):
    """Raised from the clock to leave the package's endless loop once the advance is done."""


class SecondsClock:
    """``time.time()`` for the package's loop: serves ``ITERATIONS_PER_SECOND`` calls per visited second, from
    ``now`` (again) up to ``to``, skipping seconds where the loop would do nothing."""

    def __init__(self, loop: TimeLoop, now: int, to: int):
        self.loop, self.second, self.to, self.calls = loop, now, to, 0

    def time(self) -> int:
        if self.calls == ITERATIONS_PER_SECOND:  # the loop has done all it will do in this second
            self.second, self.calls = self.next_second(), 0
        self.calls += 1
        return self.second

    def next_second(self) -> int:
        """The next second the loop acts in: a slot holding tasks, or the wrap once the probe passes ``max``.
        With no task in any slot the loop can reach, a round only moves the epoch: skip to the last wrap."""
        if self.second >= self.to:
            raise Parked
        epoch, limit = self.loop._TimeLoop__oninit, self.loop._TimeLoop__max
        slots = [slot for slot, tasks in self.loop._TimeLoop__loop.items() if tasks and 0 <= slot <= limit]
        wrap = epoch + limit + 1
        if not slots and self.to > wrap:
            wrap += (self.to - wrap) // (limit + 1) * (limit + 1)
        return min([epoch + slot for slot in slots if epoch + slot > self.second] + [wrap, self.to])


class Scheduling:
    """One insertTask of a task; disarmed when the task is cancelled or added again."""

    def __init__(self, task: str, adapter: TimewheelAdapter):
        self.task, self.adapter, self.armed = task, adapter, True

    def __call__(self) -> None:
        if self.armed:
            self.armed = False
            self.adapter.events.append(v.Run(self.task))


class TimewheelAdapter:
    """`SystemUnderTest` over timeWheel.TimeLoop (see the module docstring)."""

    def __init__(self) -> None:
        self.loop: TimeLoop | None = None
        self.now = 0
        self.events: list[v.Event] = []
        self.current: dict[str, Scheduling] = {}

    def hello(self) -> Hello:
        return Hello("timewheel 0.0.5 (PyPI; virtual seconds, 1 ms = 1 s)", ("timer",))

    def init(self, profile: str, params: v.Params) -> None:
        if profile != "timer":
            raise CommandError(f"profile: timewheel implements only the timer profile, not {profile!r}")
        self.__init__()
        self.loop = TimeLoop()
        self.now = params.start_ms
        self.loop._TimeLoop__oninit = params.start_ms
        self.loop._TimeLoop__isPool = False
        self.loop._TimeLoop__loop, self.loop._TimeLoop__errors = {}, []

    def step(self, command: v.Command) -> v.Observation:
        self.events = []
        result, error = None, None
        if isinstance(command, v.TimerAdd):
            if self.now + command.delay_ms > v.LONG_MAX:
                error = "delay_out_of_range"
            else:
                self.disarm(command.task)
                self.current[command.task] = scheduling = Scheduling(command.task, self)
                self.loop.insertTask(scheduling, command.delay_ms)
        elif isinstance(command, v.TimerCancel):
            self.disarm(command.task)
        elif isinstance(command, v.Advance):
            self.advance(command.to_ms)
        elif isinstance(command, v.Size):
            result = self.loop.getAllTaskSize() - sum(not s.armed for s in self.held())
        elif isinstance(command, v.Shutdown):
            result = sorted(s.task for s in self.held() if s.armed)
        else:
            raise CommandError(f"{command.name}: not supported by timewheel")
        return v.Observation(result=result, events=tuple(self.events), error=error)

    def close(self) -> None:
        self.loop = None

    def disarm(self, task: str) -> None:
        if task in self.current:
            self.current.pop(task).armed = False

    def held(self) -> list[Scheduling]:
        """What the package's task table still holds."""
        return [s for tasks in self.loop._TimeLoop__loop.values() for s in tasks if isinstance(s, Scheduling)]

    def advance(self, to_ms: int) -> None:
        with unittest.mock.patch.object(threadTimeWheel, "time", SecondsClock(self.loop, self.now, to_ms)):
            try:
                self.loop.run()
            except Parked:
                pass
        self.now = to_ms


def factory() -> TimewheelAdapter:
    return TimewheelAdapter()
