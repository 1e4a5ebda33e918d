"""Hypothesis strategies for runs: parameters and command sequences that reach the interesting states.

Small wheels (2-6 buckets) make overflow wheels three and more levels up cheap to reach; delays are drawn near the
edges that matter (tick and interval boundaries, multiples of coarse ticks, already-expired negatives); ops share a
few keys so checks, stale entries, cancelled keys, duplicate keys and purges at the boundary all happen; ready_on 2
makes ops complete on watch's second try. Every drawn sequence is valid for the model (ops re-watched with their own
delay, commands only on known ids, nothing after shutdown).
"""

from __future__ import annotations

from hypothesis import strategies as st

from kpurgatory.model import vocabulary as v

OP_IDS = tuple(f"o{i}" for i in range(8))
KEYS = tuple(f"k{i}" for i in range(5))
TASK_IDS = tuple(f"t{i}" for i in range(10))
#: an op's condition: never by count (set_ready only), ready on the first, second or third tryComplete
READY_ON = st.sampled_from([None, None, 1, 2, 3])


@st.composite
def params(draw, profile: str = "purgatory") -> v.Params:
    tick = draw(st.sampled_from([1, 1, 1, 2, 3, 10]))
    wheel_size = draw(st.integers(2, 6))
    start = draw(st.one_of(st.just(0), st.integers(0, 5 * tick * wheel_size)))
    purge_interval = draw(st.integers(0, 4)) if profile == "purgatory" else 1000
    return v.Params(tick, wheel_size, start, purge_interval)


def delays(p: v.Params) -> st.SearchStrategy[int]:
    """Delays around the boundaries of the first four levels, plus already-expired and small ones, and rarely one
    whose deadline passes Long.MAX_VALUE (rejected with delay_out_of_range)."""
    interval = p.tick_ms * p.wheel_size
    edges = [p.tick_ms * p.wheel_size ** level for level in range(4)] + [interval * 2]
    usual = st.one_of(
        st.integers(-3, 3 * p.tick_ms),
        st.sampled_from(edges).flatmap(lambda edge: st.integers(edge - 2, edge + 2)),
        st.integers(0, p.tick_ms * p.wheel_size ** 4),
    )
    beyond_long_max = st.integers(v.LONG_MAX - p.start_ms, v.LONG_MAX)
    return st.integers(0, 11).flatmap(lambda roll: beyond_long_max if roll == 0 else usual)


def gaps(p: v.Params) -> st.SearchStrategy[int]:
    """How far one advance moves the clock: a few ticks, or far enough to cascade from the fourth level."""
    return st.one_of(st.integers(0, 3 * p.tick_ms), st.integers(0, p.tick_ms * p.wheel_size ** 3))


def advance_to(now: int, p: v.Params) -> st.SearchStrategy[v.Advance]:
    return gaps(p).map(lambda gap: v.Advance(now + gap))


@st.composite
def timer_commands(draw, p: v.Params, max_steps: int = 40) -> list[v.Command]:
    now, task_delays, commands = p.start_ms, {}, []
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(["add", "add", "add", "cancel", "advance", "advance", "size", "wheel"]))
        if kind == "add":
            task = draw(st.sampled_from(TASK_IDS))
            delay = task_delays.setdefault(task, draw(delays(p)))
            commands.append(v.TimerAdd(task, delay))
        elif kind == "cancel" and task_delays:
            commands.append(v.TimerCancel(draw(st.sampled_from(sorted(task_delays)))))
        elif kind == "advance":
            command = draw(advance_to(now, p))
            now = command.to_ms
            commands.append(command)
        elif kind == "size":
            commands.append(v.Size())
        elif kind == "wheel":
            commands.append(v.Wheel())
    if draw(st.booleans()):
        commands.append(v.Shutdown())
    return commands


@st.composite
def watch_commands(draw, p: v.Params, known: dict[str, int]) -> v.Watch:
    op = draw(st.sampled_from(OP_IDS))
    keys = draw(st.one_of(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4),
                          st.just([]) if draw(st.integers(0, 30)) == 0 else st.nothing()))
    if op in known:
        return v.Watch(op, keys)
    known[op] = draw(delays(p))
    return v.Watch(op, keys, known[op], draw(READY_ON))


@st.composite
def purgatory_commands(draw, p: v.Params, max_steps: int = 40) -> list[v.Command]:
    now, known, commands = p.start_ms, {}, []
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(["watch", "watch", "watch", "ready", "ready", "check", "check", "cancel_key",
                                     "force", "try", "cancel", "advance", "advance", "watched", "delayed", "size",
                                     "wheel"]))
        if kind == "watch":
            commands.append(draw(watch_commands(p, known)))
        elif kind in ("ready", "force", "try", "cancel") and known:
            op = draw(st.sampled_from(sorted(known)))
            commands.append({"ready": v.SetReady, "force": v.Force, "try": v.Try, "cancel": v.Cancel}[kind](op))
        elif kind in ("check", "cancel_key"):
            key = draw(st.sampled_from(KEYS))
            commands.append(v.Check(key) if kind == "check" else v.CancelKey(key))
        elif kind == "advance":
            command = draw(advance_to(now, p))
            now = command.to_ms
            commands.append(command)
        elif kind in ("watched", "delayed", "size", "wheel"):
            commands.append({"watched": v.Watched, "delayed": v.Delayed, "size": v.Size, "wheel": v.Wheel}[kind]())
    if draw(st.booleans()):
        commands.append(v.Shutdown())
    return commands


@st.composite
def runs(draw, profile: str | None = None) -> tuple[str, v.Params, list[v.Command]]:
    """(profile, params, commands): a whole run."""
    profile = profile or draw(st.sampled_from(v.PROFILES))
    p = draw(params(profile))
    commands = draw(timer_commands(p) if profile == "timer" else purgatory_commands(p))
    return profile, p, commands
