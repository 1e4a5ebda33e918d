"""Hypothesis strategies for runs: parameters and command sequences that reach the interesting states.

Small wheels (2-6 buckets) make overflow wheels three and more levels up cheap to reach; delays are drawn near the
edges that matter (tick and interval boundaries, multiples of coarse ticks, already-expired negatives); ops share a
few keys so checks, stale entries, cancelled keys, duplicate keys and purges at the boundary all happen; ready_on 2
makes ops complete on watch's second try. Every drawn sequence is valid for the model (ops re-watched with their own
delay, commands only on known ids, nothing after shutdown).

Timers break where their arithmetic does, so times are drawn there on purpose: clock origins across the whole 64-bit
range, most of them a few ticks either side of a *boundary* — a multiple of the tick times a power of two (where a
tick counter carries into a higher bit and a power-of-two mask wraps: 2^31 and 2^32 ticks are int and uint wraps), a
multiple of a level's interval (where a wheel's window ends), or Long.MAX_VALUE; deadlines and advances that land on
the next boundary or a millisecond either side; and, on purpose rather than by accident of a bound, deadlines of
exactly Long.MAX_VALUE (the last one inside the model's domain) and just beyond it (rejected, delay_out_of_range).
"""

from __future__ import annotations

from hypothesis import strategies as st

from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import KAFKA, Declarations

OP_IDS = tuple(f"o{i}" for i in range(8))
KEYS = tuple(f"k{i}" for i in range(5))
TASK_IDS = tuple(f"t{i}" for i in range(10))
#: an op's condition: never by count (set_ready only), ready on the first, second or third tryComplete
READY_ON = st.sampled_from([None, None, 1, 2, 3])
#: set_ready: mostly making a condition true, sometimes clearing it again
READY = st.sampled_from([True, True, True, False])


def scales(tick_ms: int, wheel_size: int) -> list[int]:
    """The spacings of boundaries: the tick times every power of two, and every level's interval, up to
    Long.MAX_VALUE."""
    powers = [tick_ms << k for k in range(63) if tick_ms << k <= v.LONG_MAX]
    levels = [tick_ms * wheel_size ** level for level in range(1, 64) if tick_ms * wheel_size ** level <= v.LONG_MAX]
    return sorted(set(powers + levels))


def near(time_ms: st.SearchStrategy[int], spread: int, limit: int) -> st.SearchStrategy[int]:
    """Times within ``spread`` of those drawn, kept inside [0, limit]."""
    return st.tuples(time_ms, st.integers(-spread, spread)).map(lambda drawn: min(max(sum(drawn), 0), limit))


def origins(tick_ms: int, wheel_size: int, limit: int = v.LONG_MAX) -> st.SearchStrategy[int]:
    """Clock origins (start_ms): 0 and small ones, anywhere in [0, limit], and a few ticks either side of a multiple
    (1x-3x) of a boundary spacing or of Long.MAX_VALUE."""
    multiples = st.tuples(st.sampled_from(scales(tick_ms, wheel_size)), st.integers(1, 3)).map(
        lambda drawn: min(drawn[0] * drawn[1], limit))
    return st.one_of(st.just(0), st.integers(0, min(5 * tick_ms * wheel_size, limit)),
                     near(multiples, 3 * tick_ms, limit), near(st.just(limit), 3 * tick_ms, limit),
                     st.integers(0, limit))


@st.composite
def params(draw, profile: str = "purgatory", declarations: Declarations = KAFKA) -> v.Params:
    tick = draw(st.sampled_from([1, 1, 1, 2, 3, 10]))
    wheel_size = draw(st.integers(2, 6))
    start = draw(origins(tick, wheel_size, declarations.max_deadline_ms))
    purge_interval = draw(st.integers(0, 4)) if profile == "purgatory" else 1000
    return v.Params(tick, wheel_size, start, purge_interval)


def boundaries_after(p: v.Params, now: int) -> list[int]:
    """The next boundary of each spacing after ``now``, and Long.MAX_VALUE."""
    return sorted({(now // scale + 1) * scale for scale in scales(p.tick_ms, p.wheel_size)} | {v.LONG_MAX})


def at_boundaries(p: v.Params, now: int) -> st.SearchStrategy[int]:
    """A boundary after ``now`` or a millisecond either side of it, as a time no earlier than now (may pass
    Long.MAX_VALUE by one)."""
    return st.tuples(st.sampled_from(boundaries_after(p, now)), st.sampled_from([-1, 0, 1])).map(
        lambda drawn: max(sum(drawn), now))


def delays(p: v.Params, now: int) -> st.SearchStrategy[int]:
    """Delays (from ``now``) around the boundaries of the first four levels, plus already-expired and small ones;
    deadlines at the next boundaries; and now and then the edge of time: a deadline of exactly Long.MAX_VALUE, or
    just or far beyond it (rejected with delay_out_of_range)."""
    interval = p.tick_ms * p.wheel_size
    edges = [p.tick_ms * p.wheel_size ** level for level in range(4)] + [interval * 2]
    usual = st.one_of(
        st.integers(-3, 3 * p.tick_ms),
        st.sampled_from(edges).flatmap(lambda edge: st.integers(edge - 2, edge + 2)),
        st.integers(0, p.tick_ms * p.wheel_size ** 4),
    )
    crossing = at_boundaries(p, now).map(lambda deadline: min(deadline - now, v.LONG_MAX))
    room = v.LONG_MAX - now  # the largest delay whose deadline is Long.MAX_VALUE; a delay is a long too
    edge_of_time = st.just(room) if now == 0 else st.one_of(
        st.just(room), st.integers(room + 1, min(room + 3 * p.tick_ms, v.LONG_MAX)), st.integers(room + 1, v.LONG_MAX))
    # the usual delays first: Hypothesis shrinks towards the first choice, and a short run should not need the edge
    return st.integers(0, 11).flatmap(lambda roll: usual if roll < 9 else crossing if roll < 11 else edge_of_time)


def declared_delay(delay: int, now: int, declarations: Declarations) -> int | None:
    """``delay`` as a run may send it to a system with ``declarations``: moved to the edge of the domain where the
    system promises nothing beyond it (None when no delay from ``now`` is inside it)."""
    if delay < 0 and declarations.negative_delays == "undefined":
        delay = 0
    if declarations.beyond_max_deadline == "undefined":
        delay = min(delay, declarations.max_deadline_ms - now)
    return delay if declarations.within_domain(now, delay) else None


def gaps(p: v.Params) -> st.SearchStrategy[int]:
    """How far one advance moves the clock: a few ticks, or far enough to cascade from the fourth level."""
    return st.one_of(st.integers(0, 3 * p.tick_ms), st.integers(0, p.tick_ms * p.wheel_size ** 3))


def advance_to(now: int, p: v.Params) -> st.SearchStrategy[v.Advance]:
    """An advance by a gap, or to a boundary (a millisecond either side), never past Long.MAX_VALUE."""
    to_ms = st.one_of(gaps(p).map(lambda gap: now + gap), at_boundaries(p, now))
    return to_ms.map(lambda time_ms: v.Advance(min(time_ms, v.LONG_MAX)))


def allowed(kinds: list[str], names: dict[str, str], unsupported: frozenset[str]) -> list[str]:
    """``kinds`` without those whose command (``names``: kind -> command name, where they differ) is unsupported."""
    return [kind for kind in kinds if names.get(kind, kind) not in unsupported]


@st.composite
def timer_commands(draw, p: v.Params, max_steps: int = 40, unsupported: frozenset[str] = frozenset()
                   ) -> list[v.Command]:
    """A timer run that sends none of the ``unsupported`` commands."""
    now, task_delays, commands = p.start_ms, {}, []
    kinds = allowed(["add", "add", "add", "cancel", "advance", "advance", "size", "wheel"],
                    {"add": "timer_add", "cancel": "timer_cancel"}, unsupported)
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(kinds))
        if kind == "add":
            task = draw(st.sampled_from(TASK_IDS))
            delay = task_delays.setdefault(task, draw(delays(p, now)))
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
    if "shutdown" not in unsupported and draw(st.booleans()):
        commands.append(v.Shutdown())
    return commands


@st.composite
def watch_commands(draw, p: v.Params, known: dict[str, int], now: int) -> v.Watch:
    op = draw(st.sampled_from(OP_IDS))
    keys = draw(st.one_of(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4),
                          st.just([]) if draw(st.integers(0, 30)) == 0 else st.nothing()))
    if op in known:
        return v.Watch(op, keys)
    known[op] = draw(delays(p, now))
    return v.Watch(op, keys, known[op], draw(READY_ON))


@st.composite
def purgatory_commands(draw, p: v.Params, max_steps: int = 40, unsupported: frozenset[str] = frozenset()
                       ) -> list[v.Command]:
    """A purgatory run that sends none of the ``unsupported`` commands."""
    now, known, commands = p.start_ms, {}, []
    kinds = allowed(["watch", "watch", "watch", "ready", "ready", "check", "check", "cancel_key", "force", "try",
                     "cancel", "advance", "advance", "watched", "delayed", "size", "wheel"], {"ready": "set_ready"},
                    unsupported)
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(kinds))
        if kind == "watch":
            commands.append(draw(watch_commands(p, known, now)))
        elif kind == "ready" and known:
            commands.append(v.SetReady(draw(st.sampled_from(sorted(known))), draw(READY)))
        elif kind in ("force", "try", "cancel") and known:
            op = draw(st.sampled_from(sorted(known)))
            commands.append({"force": v.Force, "try": v.Try, "cancel": v.Cancel}[kind](op))
        elif kind in ("check", "cancel_key"):
            key = draw(st.sampled_from(KEYS))
            commands.append(v.Check(key) if kind == "check" else v.CancelKey(key))
        elif kind == "advance":
            command = draw(advance_to(now, p))
            now = command.to_ms
            commands.append(command)
        elif kind in ("watched", "delayed", "size", "wheel"):
            commands.append({"watched": v.Watched, "delayed": v.Delayed, "size": v.Size, "wheel": v.Wheel}[kind]())
    if "shutdown" not in unsupported and draw(st.booleans()):
        commands.append(v.Shutdown())
    return commands


@st.composite
def runs(draw, profile: str | None = None, unsupported: frozenset[str] = frozenset()
         ) -> tuple[str, v.Params, list[v.Command]]:
    """(profile, params, commands): a whole run, without the ``unsupported`` commands."""
    profile = profile or draw(st.sampled_from(v.PROFILES))
    p = draw(params(profile))
    commands = draw(timer_commands(p, unsupported=unsupported) if profile == "timer" else
                    purgatory_commands(p, unsupported=unsupported))
    return profile, p, commands
