"""A controlled scheduler: the threads of a concurrent run take turns, and switch only at synchronisation points.

Racing real threads finds a race by chance and cannot bring it back. Under this scheduler the system's threads run
one at a time; each runs until it reaches a *point* — a lock's acquire or try, the compare-and-set on an op's
``completed`` flag, a condition wait, its own start and end — where a seeded *strategy* chooses which ready thread
goes on. A thread that finds a lock held waits (it is not ready) until the holder releases it. Everything else a
thread does between two points is invisible to the others in a program whose shared state is guarded by those
locks, so the choices at the points are the whole interleaving (Fray and Coyote control the JVM and .NET the same
way; CHESS, Musuvathi et al., OSDI 2008, first).

A run is a sequence of rounds (each starts when the one before has ended), and its interleaving is its `Schedule`:
the strategy's name and seed, and its *switches*, the points where the chosen thread is not the *default* one — the
running thread while it can go on, else the first ready thread in the round's order — each named by its round, its
point's number within the round and the thread's number within the round. Running the same plan under `Replay` of
a schedule gives the same interleaving, so the same history, byte for byte, on any machine and under any load;
dropping switches gives a simpler interleaving, and since switches are named round by round, a schedule carries over
to a plan with fewer rounds or calls (`carried`): that is how a failing run is shrunk.

Strategies: `RandomWalk` (a uniformly random ready thread at every point, up to ``bound`` switches) and `PCT`
(Burckhardt et al., ASPLOS 2010: random thread priorities and ``depth - 1`` points where the running thread drops
to the lowest priority; any bug that needs ``depth`` ordering constraints among ``n`` threads and ``k`` points is
found by one run with probability at least 1 / (n k^(depth-1)); here applied round by round, so ``k`` is a round's
points).

Racy code between the locks (a find-or-create without its lock) needs more points: with ``calls`` granularity
every Python function call the system's code makes, and the return of every C call (a dict's get, a list's
append), is a point too, deterministic all the same (`interleave` steps aside at the same places, at random).

`Scheduler.primitives` are the locks the scheduler controls, for `kpurgatory.impl.sync.using`: a system built
while they are in use runs under the scheduler. A thread the scheduler does not manage (the harness's own, between
rounds) uses them as plain locks.
"""

from __future__ import annotations

import hashlib
import random
import sys
import threading
from typing import Callable, Iterable

import attrs

from kpurgatory.conformance.traces.codec import Schedule
from kpurgatory.impl.sync import Primitives

STRATEGIES = ("random", "pct")
#: where threads may switch: at synchronisation points only, or at the system's function calls too
GRANULARITIES = ("sync", "calls")
#: PCT's depth unless told: bugs of two ordering constraints (an op completed between a check's walk and its try)
DEPTH = 3
#: how long a round may take before the system counts as hung (a thread blocked outside the scheduler's locks)
ROUND_TIMEOUT_S = 60.0


class Deadlock(RuntimeError):
    """Every thread left waits for a lock another one holds: raised in each of them."""


class Hung(RuntimeError):
    """A round did not end: a thread blocked on something the scheduler does not control."""


# ---------------------------------------------------------------------------------------------------------------
# Strategies: who goes on at a point
# ---------------------------------------------------------------------------------------------------------------


class Strategy:
    """Chooses among the ready threads (numbered within their round) at each point: the ``point``-th of the run, at
    ``where`` = (round, point within it). ``started`` is told of each thread as its round starts."""

    name: str

    def round_started(self, points_before: int) -> None:
        """A round starts; the one before had ``points_before`` points."""

    def started(self, thread: int) -> None:
        """A thread of the round starts."""

    def choose(self, point: int, where: tuple[int, int], ready: list[int], running: int | None,
               default: int) -> int:
        raise NotImplementedError


class RandomWalk(Strategy):
    """A uniformly random ready thread at every point, until ``bound`` switches were made (None: no bound)."""

    name = "random"

    def __init__(self, seed: int, bound: int | None = None):
        self.rng, self.bound, self.switches = random.Random(seed), bound, 0

    def choose(self, point: int, where: tuple[int, int], ready: list[int], running: int | None,
               default: int) -> int:
        if self.bound is not None and self.switches >= self.bound:
            return default
        chosen = self.rng.choice(ready)
        self.switches += chosen != default
        return chosen


class PCT(Strategy):
    """Probabilistic concurrency testing, round by round (a round ends when all its threads have: each is a program
    of its own): each thread gets a random priority when its round starts (above ``depth``), and at ``depth - 1``
    points of the round, drawn from as many points as the round before had, the running thread's priority drops to
    ``depth - i`` (below every starting priority); the highest-priority ready thread always goes on. A round's few
    points (tens, where a run has thousands) keep the chance of the right change points high."""

    name = "pct"

    def __init__(self, seed: int, depth: int = DEPTH):
        self.rng, self.depth = random.Random(seed), depth
        self.priority: dict[int, float] = {}
        self.changes: dict[int, int] = {}

    def round_started(self, points_before: int) -> None:
        points = max(points_before, self.depth)
        self.changes = {point: self.depth - number for number, point in
                        enumerate(sorted(self.rng.sample(range(1, points + 1), self.depth - 1)), 1)}

    def started(self, thread: int) -> None:
        self.priority[thread] = self.depth + self.rng.random()

    def choose(self, point: int, where: tuple[int, int], ready: list[int], running: int | None,
               default: int) -> int:
        if where[1] in self.changes and running is not None:
            self.priority[running] = self.changes.pop(where[1])
        return max(ready, key=self.priority.__getitem__)


class Replay(Strategy):
    """The interleaving of ``schedule``: its switches, and the default everywhere else (a switch to a thread that
    is not ready is skipped: a shrunk schedule may name one)."""

    def __init__(self, schedule: Schedule):
        self.name = schedule.strategy
        self.switches = {(round_, point): thread for round_, point, thread in schedule.switches}

    def choose(self, point: int, where: tuple[int, int], ready: list[int], running: int | None,
               default: int) -> int:
        chosen = self.switches.get(where, default)
        return chosen if chosen in ready else default


@attrs.frozen
class Scheduling:
    """How the runs of a controlled check are scheduled: the strategy, PCT's ``depth``, the random walk's ``bound``
    on switches, and where threads may switch (``granularity``)."""

    strategy: str = "pct"
    depth: int = DEPTH
    bound: int | None = None
    granularity: str = "sync"

    def __attrs_post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"scheduler: unknown strategy {self.strategy!r} (expected one of "
                             f"{', '.join(STRATEGIES)})")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"scheduler: unknown granularity {self.granularity!r} (expected one of "
                             f"{', '.join(GRANULARITIES)})")

    def scheduler(self, seed: int) -> Scheduler:
        """A scheduler for one run."""
        chooser = RandomWalk(seed, self.bound) if self.strategy == "random" else PCT(seed, self.depth)
        return Scheduler(chooser, seed, calls=self.granularity == "calls")

    def flags(self) -> str:
        """The options of `kpurgatory check` that schedule alike."""
        return (f" --scheduler {self.strategy} --granularity {self.granularity}"
                + (f" --depth {self.depth}" if self.strategy == "pct" else "")
                + (f" --switch-bound {self.bound}" if self.strategy == "random" and self.bound is not None else ""))

    def __str__(self) -> str:
        where = "at locks and calls" if self.granularity == "calls" else "at locks"
        if self.strategy == "pct":
            return f"PCT of depth {self.depth}, switching {where}"
        bound = f" of at most {self.bound} switches" if self.bound is not None else ""
        return f"a random walk{bound}, switching {where}"


def carried(schedule: Schedule, rounds: list[tuple], smaller: list[tuple]) -> Schedule:
    """``schedule``'s switches for a plan whose ``smaller`` rounds keep some of ``rounds``' calls, in order (each
    round a tuple of calls): a switch stays at its point of the round that kept its round's calls, to its thread's
    new number, and goes if its round or its thread's call went."""
    switches, origin = [], 0
    for number, calls in enumerate(smaller):
        while origin < len(rounds) and not _subsequence(calls, rounds[origin]):
            origin += 1
        if origin == len(rounds):
            break
        positions = _positions(calls, rounds[origin])
        switches += [(number, point, positions.index(thread)) for round_, point, thread in schedule.switches
                     if round_ == origin and thread in positions]
        origin += 1
    return attrs.evolve(schedule, switches=switches, rounds=())


def _subsequence(part: tuple, whole: tuple) -> bool:
    remaining = iter(whole)
    return all(call in remaining for call in part)


def _positions(part: tuple, whole: tuple) -> list[int]:
    """Where the calls of ``part`` (a subsequence of ``whole``) are in ``whole``."""
    positions, start = [], 0
    for call in part:
        start = whole.index(call, start)
        positions.append(start)
        start += 1
    return positions


def replaying(schedule: Schedule) -> Scheduler:
    """A scheduler that replays ``schedule``."""
    return Scheduler(Replay(schedule), schedule.seed, schedule.granularity == "calls")


# ---------------------------------------------------------------------------------------------------------------
# The scheduler
# ---------------------------------------------------------------------------------------------------------------


class Managed:
    """A thread under the scheduler: it runs only while it holds its turn (``turn`` is released to let it run)."""

    __slots__ = ("number", "label", "turn", "waiting_for", "done", "deadlocked")

    def __init__(self, number: int, label: str):
        self.number, self.label = number, label
        self.turn = threading.Lock()
        self.turn.acquire()
        self.waiting_for: ControlledLock | None = None
        self.done = self.deadlocked = False


class Scheduler:
    """Runs rounds of tasks under one strategy (`run`); the locks it controls come from `primitives`. Counts the
    points of the run (``points``), records its switches (`schedule`) and which points were reached (``reached``:
    ``kind role in function``)."""

    def __init__(self, chooser: Strategy, seed: int, calls: bool = False):
        self.chooser, self.seed, self.calls = chooser, seed, calls
        #: with ``calls`` granularity, the files of the system's code, whose calls are points (`code`)
        self.files: frozenset[str] = frozenset()
        self.points = 0
        self.round, self.round_points = -1, 0
        self.switches: list[tuple[int, int, int]] = []
        self.reached: set[str] = set()
        self.threads: list[Managed] = []
        self.local = threading.local()
        self.digest = hashlib.blake2b(digest_size=8)
        self.round_over = threading.Lock()

    @property
    def schedule(self) -> Schedule:
        return Schedule(self.chooser.name, self.seed, tuple(self.switches),
                        granularity="calls" if self.calls else "sync")

    @property
    def interleaving(self) -> str:
        """An identity of the run's interleaving: which thread went on at each point where several could."""
        return self.digest.hexdigest()

    @property
    def primitives(self) -> Primitives:
        return Primitives(lambda role: ControlledLock(self, role), lambda role: ControlledLock(self, role, True),
                          lambda guard: ControlledCondition(self, guard))

    def current(self) -> Managed | None:
        return getattr(self.local, "managed", None)

    # --- rounds -----------------------------------------------------------------------------------------------

    def run(self, tasks: Iterable[tuple[str, Callable[[], None]]], timeout: float = ROUND_TIMEOUT_S) -> None:
        """Run ``tasks`` (label, body), each on its own thread, one at a time, until all have ended. Raises `Hung`
        if they have not after ``timeout`` seconds (their threads are left behind, daemons)."""
        self.threads = []
        self.chooser.round_started(self.round_points)
        self.round, self.round_points = self.round + 1, 0
        for label, body in tasks:
            managed = Managed(len(self.threads), label)
            self.chooser.started(managed.number)
            self.threads.append(managed)
            threading.Thread(target=self._serve, args=(managed, body), daemon=True, name=label).start()
        if not self.threads:
            return
        self.round_over.acquire()
        self._give(self._choose("start", "", None))
        if not self.round_over.acquire(timeout=timeout):
            raise Hung(f"a round of the controlled run did not end within {timeout:g} s: a thread waits for "
                       f"something the scheduler does not control")
        self.round_over.release()

    def _serve(self, managed: Managed, body: Callable[[], None]) -> None:
        managed.turn.acquire()
        self.local.managed = managed
        if self.calls:
            sys.setprofile(self._at_call)
        try:
            body()
        finally:
            sys.setprofile(None)
            self.local.managed = None
            managed.done = True
            following = self._choose("end", "", None)
            if following is None:
                following = self._break_deadlock()
            if following is None:
                self.round_over.release()
            else:
                self._give(following)

    @staticmethod
    def _give(managed: Managed) -> None:
        managed.turn.release()

    def _ready(self) -> list[Managed]:
        return [managed for managed in self.threads if not managed.done and managed.waiting_for is None]

    def _choose(self, kind: str, where: str, running: Managed | None) -> Managed | None:
        """The thread that goes on at a point (None: no thread is ready)."""
        ready = self._ready()
        if not ready:
            return None
        self.points += 1
        self.round_points += 1
        default = running if running in ready else ready[0]
        if len(ready) == 1:
            return default
        self.reached.add(f"{kind} {where}".rstrip())
        numbers = [managed.number for managed in ready]
        chosen = self.chooser.choose(self.points, (self.round, self.round_points), numbers,
                                     running and running.number, default.number)
        if chosen != default.number:
            self.switches.append((self.round, self.round_points, chosen))
        self.digest.update(b"%d:%d;" % (self.points, chosen))
        return next(managed for managed in ready if managed.number == chosen)

    def point(self, kind: str, where: str) -> None:
        """The running managed thread reached a point: let the strategy choose who goes on."""
        managed = self.current()
        following = self._choose(kind, where, managed)
        if following is not managed:
            self._give(following)
            managed.turn.acquire()

    def code(self, files: frozenset[str]) -> None:
        """With ``calls`` granularity: calls made in ``files`` are points (the system's code; not the harness, the
        standard library or a cache's misses, which would make a replay differ)."""
        self.files = files

    def _at_call(self, frame, event: str, arg) -> None:
        """With ``calls`` granularity: a Python call, or a C call's return, in the system's code."""
        if frame.f_code.co_filename not in self.files:
            return
        if event == "call":
            self.point("call", frame.f_code.co_name)
        elif event == "c_return":
            self.point("return", f"{getattr(arg, '__name__', '?')} in {frame.f_code.co_name}")

    def wait_for(self, lock: ControlledLock) -> None:
        """The running thread found ``lock`` held: it waits until a release makes it ready and it is chosen."""
        managed = self.current()
        managed.waiting_for = lock
        following = self._choose("wait", lock.role, None)
        if following is None:
            following = self._break_deadlock()
        if following is not managed:
            self._give(following)
            managed.turn.acquire()
        if managed.deadlocked:
            raise Deadlock(f"deadlock: every thread left waits for a lock another holds (this one: {lock.role})")

    def released(self, lock: ControlledLock) -> None:
        for managed in self.threads:
            if managed.waiting_for is lock:
                managed.waiting_for = None

    def _break_deadlock(self) -> Managed | None:
        """No thread is ready but some wait: each of them raises `Deadlock`; the first goes on."""
        waiting = [managed for managed in self.threads if not managed.done and managed.waiting_for is not None]
        for managed in waiting:
            managed.waiting_for, managed.deadlocked = None, True
        return waiting[0] if waiting else None


def caller(role: str = "") -> str:
    """The function of the system that reached a point: the innermost frame outside this module. An op lock taken
    by compiled code has no frame of its own: the one that called into it is an adapter's handler of a command
    (named ``_``), and the point is named after the command."""
    frame = sys._getframe(1)
    while frame.f_code.co_filename == __file__:
        frame = frame.f_back
    command = frame.f_locals.get("command") if role == "op" and frame.f_code.co_name == "_" else None
    return f"compiled {command.name}" if hasattr(command, "name") else frame.f_code.co_name


class ControlledLock:
    """A lock (``reentrant`` or not) whose acquire and try are points of its scheduler."""

    __slots__ = ("scheduler", "role", "reentrant", "owner", "count")

    def __init__(self, scheduler: Scheduler, role: str, reentrant: bool = False):
        self.scheduler, self.role, self.reentrant = scheduler, role, reentrant
        self.owner: object | None = None
        self.count = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if timeout not in (-1, None):
            raise NotImplementedError("a controlled lock is not acquired with a timeout")
        scheduler = self.scheduler
        me = scheduler.current()
        if me is None:  # a thread outside the scheduler: nothing else runs meanwhile
            me = threading.current_thread()
        else:
            scheduler.point("acquire" if blocking else "try", f"{self.role} in {caller(self.role)}")
        while self.owner is not None and not (self.reentrant and self.owner is me):
            if not blocking:
                return False
            if not isinstance(me, Managed):
                raise RuntimeError(f"a {self.role} lock is held by a controlled thread outside a round")
            scheduler.wait_for(self)
        self.owner = me
        self.count += 1
        return True

    def release(self) -> None:
        if self.owner is None:
            raise RuntimeError(f"release of an unheld {self.role} lock")
        self.count -= 1
        if not self.count:
            self.owner = None
            self.scheduler.released(self)

    def locked(self) -> bool:
        return self.owner is not None

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class ControlledCondition:
    """A condition on a controlled lock whose wait is a point: it releases the lock, lets the strategy choose, and
    takes the lock again — a wakeup for any reason, as a condition's wait may have."""

    __slots__ = ("scheduler", "guard")

    def __init__(self, scheduler: Scheduler, guard: ControlledLock):
        self.scheduler, self.guard = scheduler, guard

    def wait(self, timeout: float | None = None) -> bool:
        self.guard.release()
        if self.scheduler.current() is not None:
            self.scheduler.point("wait", f"{self.guard.role} in {caller()}")
        self.guard.acquire()
        return False

    def notify(self, n: int = 1) -> None:
        pass

    def notify_all(self) -> None:
        pass
