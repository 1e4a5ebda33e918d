"""Judging a check's runs on every core: ``kpurgatory check -j N``.

A run is a function of the check's seed and its number (`machine.draw_run` from ``SeededChoices("SEED/N")``, its
keys from `Session.key_home`), and its outcome a function of the run and the system (`machine.judge`). So the runs
can be judged anywhere, in any order: with ``jobs`` > 1, run N goes to worker N mod ``jobs``, each worker a process
with a system of its own, and the outcomes come back in run order. What a check reports is decided from them in run
order alone (`sequential.explore`): which failure is new, which a repeat, where exploration stops, the coverage
summed over the runs up to there. The same seed thus gives the same report for any number of jobs.

A worker knows only the failures it met itself, which changes what it costs (a known hang's step is sent until the
worker has met it) but not how a run ends.
"""

from __future__ import annotations

import multiprocessing
import signal
from typing import Callable, Iterator

import attrs

from kpurgatory.conformance.adapters import subprocess as adapters
from kpurgatory.conformance.adapters import timed
from kpurgatory.conformance.adapters.sut import SystemUnderTest
from kpurgatory.conformance.check.choices import SeededChoices
from kpurgatory.conformance.check.coverage import Coverage
from kpurgatory.conformance.check.findings import Signature
from kpurgatory.conformance.check.machine import Divergence, Drawn, Session, draw_run, judge

#: runs a worker is sent at a time: enough that a hand-off costs little, few enough that a worker does little past
#: where exploration stops
CHUNK = 8


@attrs.define(eq=False)
class Judged:
    """How run number ``index`` ended: its signature (None: it passed), whether it ended at a foreseen known hang
    (``foreseen``, the finding's signature then) and whether a hang cost a fresh system (``costly``); the steps it
    drew and the coverage it reached. Judged in this process, the run and its failure come with it."""

    index: int
    steps: int
    signature: Signature | None
    foreseen: bool
    costly: bool
    coverage: Coverage
    run: Drawn | None = None
    stop: Divergence | None = None


def judge_run(session: Session, seed: int, steps: int, index: int) -> Judged:
    """Draw run number ``index`` of the check seeded ``seed`` and judge it on ``session``'s system."""
    choices = SeededChoices(f"{seed}/{index}")
    coverage = Coverage(session.profile, session.hello.declarations.watcher_shards)
    run = draw_run(session, choices, steps, session.key_home(index), coverage)
    run.choices = tuple(choices.made)
    stop = judge(session, run)
    signature = stop.signature if stop is not None else run.foreseen.signature if run.foreseen else None
    return Judged(index, len(run.steps), signature, stop is None and signature is not None,
                  session.broke(), coverage, run, stop)


def judged_runs(session: Session, seed: int, steps: int, examples: int, jobs: int,
                factory: Callable[[], SystemUnderTest]) -> Iterator[Judged]:
    """Runs 0 .. ``examples`` - 1, judged, in run order: here on ``session``'s system, or on ``jobs`` workers that
    each make their own with ``factory``. Closing the iterator stops the workers."""
    if jobs <= 1:
        for index in range(examples):
            session.go_on()
            yield judge_run(session, seed, steps, index)
        return
    context = multiprocessing.get_context("fork")  # the factory and the session's settings need no pickling
    chunks = [range(start, min(start + CHUNK, examples)) for start in range(0, examples, CHUNK)]
    with context.Pool(jobs, initializer=start_worker, initargs=(session, factory, seed, steps)) as pool:
        for chunk in pool.imap(judge_chunk, chunks):
            for judged in chunk:
                session.go_on()
                yield judged


#: the worker's own session, its seed and its runs' length
WORKER: tuple[Session, int, int] | None = None


def fresh_worker() -> None:
    """A forked worker process keeps nothing of the parent's threads or adapters, and leaves interruptions to the
    parent, which stops the workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    timed.WATCHDOG = timed.Watchdog()  # the parent's watchdog thread is not in this process
    adapters.LIVE.clear()  # the parent's adapters are the parent's to stop


def start_worker(session: Session, factory: Callable[[], SystemUnderTest], seed: int, steps: int) -> None:
    """A worker process of a check (`fresh_worker`), with a system of its own."""
    global WORKER
    fresh_worker()
    system = factory()
    own = attrs.evolve(session, system=system, hello=system.hello(), on_example=None)
    own.known = {}
    WORKER = own, seed, steps


def judge_chunk(indices: range) -> list[Judged]:
    session, seed, steps = WORKER
    judged = []
    for index in indices:
        result = judge_run(session, seed, steps, index)
        result.run = result.stop = None  # decided and reported by the parent, which judges new failures again
        if result.signature is not None:
            session.known.setdefault(result.signature, 0)
        judged.append(result)
    return judged


def merge(into: Coverage, run: Coverage) -> None:
    """Add one run's coverage to a check's."""
    into.counts.update(run.counts)
    into.states |= run.states
    into.shards_hit |= run.shards_hit

