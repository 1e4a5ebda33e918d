"""Hypothesis strategies for runs: parameters and command sequences that reach the interesting states.

Small wheels (2-6 buckets) make overflow wheels three and more levels up cheap to reach, and most runs use one; the
others use larger wheels, even and odd, up to 512 buckets (Kafka's 20 among them). Delays are drawn near the edges
that matter (tick and interval boundaries, multiples of coarse ticks, already-expired negatives), and on every
comparison the wheel's add makes at its first level and its overflow levels (the tick and the interval from that
level's clock, a millisecond and a tick either side); ops share a few keys so checks, stale entries, cancelled keys,
duplicate keys and purges at the boundary all happen, and the keys of different runs land in different watcher
shards, so that over a check every shard the system declares is used; ready_on 2 makes ops complete on watch's
second try. Every drawn sequence is valid for the model (ops re-watched with their own delay, commands only on known
ids, nothing after shutdown).

Timers break where their arithmetic does, so times are drawn there on purpose: clock origins across the whole 64-bit
range, most of them a few ticks either side of a *boundary* — a multiple of the tick times a power of two (where a
tick counter carries into a higher bit and a power-of-two mask wraps: 2^31 and 2^32 ticks are int and uint wraps), a
multiple of a level's interval (where a wheel's window ends), or Long.MAX_VALUE; deadlines and advances that land on
the next boundary or a millisecond either side; and, on purpose rather than by accident of a bound, deadlines of
exactly Long.MAX_VALUE (the last one inside the model's domain) and just beyond it (rejected, delay_out_of_range).
"""

from __future__ import annotations

import functools
import itertools
import string

from hypothesis import strategies as st

from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import KAFKA, Declarations, WatcherShards

OP_IDS = tuple(f"o{i}" for i in range(8))
#: the keys a run shares among its ops: few, so that lists are shared, checked, cancelled and purged
KEYS_PER_RUN = 4
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


#: wheel sizes beyond the small ones: Kafka's 20 (first, so a large wheel shrinks to it), powers of two and odd sizes
#: either side of them
LARGE_WHEELS = (20, 20, 7, 8, 16, 21, 32, 63, 64, 511, 512)


def wheel_sizes() -> st.SearchStrategy[int]:
    """Mostly 2-6 buckets, where overflow wheels three and more levels up are cheap to reach; one run in four a
    larger wheel, even or odd, up to 512 (delays and advances scale with it, so its upper levels are reached too)."""
    return st.integers(0, 3).flatmap(lambda roll: st.sampled_from(LARGE_WHEELS) if roll == 3 else st.integers(2, 6))


@st.composite
def params(draw, profile: str = "purgatory", declarations: Declarations = KAFKA) -> v.Params:
    tick = draw(st.sampled_from([1, 1, 1, 2, 3, 10]))
    wheel_size = draw(wheel_sizes())
    start = draw(origins(tick, wheel_size, declarations.max_deadline_ms))
    purge_interval = draw(st.integers(0, 4)) if profile == "purgatory" else 1000
    return v.Params(tick, wheel_size, start, purge_interval)


@functools.cache
def key_names(shards: WatcherShards) -> tuple[tuple[str, ...], ...]:
    """Per watcher shard, the first names that land in it (as many as a run takes keys, so that a system with fewer
    shards than that still gets distinct keys): "k" and one, two or three letters or digits, shortest first, so
    k0-k9 keep their shards. ASCII and short, so every adapter takes them."""
    wanted = -(-KEYS_PER_RUN // shards.count) + 1
    names: list[list[str]] = [[] for _ in range(shards.count)]
    missing = shards.count
    for length in (1, 2, 3):
        for letters in itertools.product(string.digits + string.ascii_lowercase, repeat=length):
            name = "k" + "".join(letters)
            listed = names[shards.shard(name)]
            if len(listed) < wanted:
                listed.append(name)
                missing -= len(listed) == wanted
                if not missing:
                    return tuple(map(tuple, names))
    return tuple(map(tuple, names))


def run_keys(shards: WatcherShards, home: int | None = None) -> st.SearchStrategy[tuple[str, ...]]:
    """A run's `KEYS_PER_RUN` keys, so that the runs of a check spread over every watcher shard: a bug in one list (a
    purge that skips the last) is reached. The keys sit on consecutive shards from ``home`` (None: k0's, where the
    keys are k0, k1, k2, k3), so a check that moves ``home`` on from run to run uses every shard however Hypothesis
    draws; now and then a key is on a shard drawn anywhere (it shrinks back to its place), and the last one shares
    the first one's shard under another name, so two keys meet in one list's map and lock."""
    names = key_names(shards)
    home = shards.shard("k0") if home is None else home

    def keys(drawn: tuple[tuple[int, ...], bool]) -> tuple[str, ...]:
        offsets, shared = drawn
        shard_of = [(home + i + offset) % shards.count for i, offset in enumerate(offsets)]
        if shared:
            shard_of[-1] = shard_of[0]
        used: dict[int, int] = {}
        picked = []
        for shard in shard_of:
            candidates = names[shard]
            picked.append(candidates[used.get(shard, 0) % len(candidates)])
            used[shard] = used.get(shard, 0) + 1
        return tuple(dict.fromkeys(picked))

    # mostly in the rotation's block, so that rotating covers every shard; now and then anywhere
    offset = st.integers(0, 3).flatmap(lambda roll: st.integers(0, shards.count - 1) if roll == 3 else st.just(0))
    offsets = st.tuples(*[offset] * KEYS_PER_RUN)
    return st.tuples(offsets, st.integers(0, 7).map(lambda roll: roll == 7)).map(keys)


def boundaries_after(p: v.Params, now: int) -> list[int]:
    """The next boundary of each spacing after ``now``, and Long.MAX_VALUE."""
    return sorted({(now // scale + 1) * scale for scale in scales(p.tick_ms, p.wheel_size)} | {v.LONG_MAX})


def level_clocks(p: v.Params, now: int, clocks: tuple[int, ...] = ()) -> list[tuple[int, int]]:
    """(tick, current time) of every level a wheel can have, finest first. ``clocks`` are the current times of the
    levels that exist (a wheel lags behind ``now`` until a bucket expires); without them, a wheel kept up with now.
    A level not created yet would start at the level below's time, rounded down to its own tick."""
    levels, clock = [], now - now % p.tick_ms
    for level in range(64):
        tick = p.tick_ms * p.wheel_size ** level
        if tick > v.LONG_MAX:
            break
        clock = clocks[level] if level < len(clocks) else clock - clock % tick
        levels.append((tick, clock))
    return levels


def wheel_edges(p: v.Params, now: int, clocks: tuple[int, ...] = ()) -> st.SearchStrategy[int]:
    """Deadlines on each comparison TimingWheel.add makes at a level of tick t and current time c: c + t (below it,
    expired on add) a millisecond either side; and c + t * wheel_size, the level's interval (below it, a bucket of
    this level; from it, the overflow wheel, created by the first such add), a millisecond and a tick either side.
    The same comparisons are made again when a bucket of the level falls due, at c + t or c + 2t, and its entries
    are added again from there: so also that time itself, and that time plus the interval of a level below the one
    under it (a millisecond either side), where an entry of that bucket, added again, meets that interval exactly.
    Mostly at the first wheel and its overflow wheel, where an off-by-one in add shows soonest."""
    levels = level_clocks(p, now, clocks)
    top = len(levels) - 1
    level = st.integers(0, 2).flatmap(lambda roll: st.integers(0, min(1, top)) if roll else st.integers(0, top))
    return level.flatmap(lambda drawn: st.sampled_from(edge_times(p, levels, drawn)))


def edge_times(p: v.Params, levels: list[tuple[int, int]], level: int) -> list[int]:
    """The times of `wheel_edges` at ``level`` (0: the first wheel; past the top: the top), of ``levels`` as
    `level_clocks` gives them."""
    level = min(level, len(levels) - 1)
    tick, clock = levels[level]
    interval = tick * p.wheel_size
    times = [clock + tick + d for d in (-1, 0, 1)] + [clock + interval + d for d in (-tick, -1, 0, 1, tick)]
    for due in (clock + tick, clock + 2 * tick):
        times += [due] + [due + finer + d for finer, _ in levels[1:level] for d in (-1, 0, 1)]
    return sorted({time for time in times if time <= v.LONG_MAX}) or [v.LONG_MAX]


def at_boundaries(p: v.Params, now: int, clocks: tuple[int, ...] = ()) -> st.SearchStrategy[int]:
    """A boundary after ``now`` or a millisecond either side of it, or a comparison's edge of the wheel (`wheel_edges`,
    `interval_ends`, from its levels' ``clocks``), as a time no earlier than now (may pass Long.MAX_VALUE by one)."""
    return st.one_of(near_boundaries(p, now), wheel_edges(p, now, clocks), interval_ends(p, now, clocks)).map(
        lambda time_ms: max(time_ms, now))


def interval_ends(p: v.Params, now: int, clocks: tuple[int, ...] = ()) -> st.SearchStrategy[int]:
    """The end of the first wheel's or the overflow wheel's interval from its clock, or a millisecond before: an
    advance there meets an entry added at that interval (`wheel_edges`), where ``<=`` for ``<`` in add shows."""
    ends = [clock + tick * p.wheel_size for tick, clock in level_clocks(p, now, clocks)[:2]]
    return st.sampled_from([end - d for end in ends for d in (0, 1) if end - d <= v.LONG_MAX] or [v.LONG_MAX])


def interval_meetings(p: v.Params, now: int, clocks: tuple[int, ...] = ()) -> list[int]:
    """Times ``due`` at which a bucket of the third wheel or above falls due while an entry of it, added again
    from there, meets the first wheel's interval exactly (its deadline is ``due`` plus that interval): that entry
    and one added at the interval when the first wheel's clock is one interval before ``due`` both have the first
    wheel's slot of ``due``, which is where ``<=`` for ``<`` in add shows at the contract level (an entry filed in a
    bucket that falls due an interval early or late). Each ``due`` is a multiple of the tick of the level where an
    entry with that deadline, added now, lands, and comes an interval or more after now; and no level's window up to
    that one passes Long.MAX_VALUE (where Kafka's windows wrap, the other rules go: its hangs there cost a time limit
    each)."""
    levels = level_clocks(p, now, clocks)
    interval = p.tick_ms * p.wheel_size
    dues = []
    for level in range(2, len(levels)):
        tick, clock = levels[level]
        if clock + tick * p.wheel_size > v.LONG_MAX:
            break
        for ahead in range(1, 4):
            due = (now // tick + ahead) * tick
            if due - interval > now and landing(levels, p, due + interval) == level:
                dues.append(due)
    return sorted(set(dues))


def landing(levels: list[tuple[int, int]], p: v.Params, deadline: int) -> int:
    """The level (0: the first wheel) where TimingWheel.add files a pending entry with ``deadline``, given the
    levels' (tick, current time) as `level_clocks` gives them."""
    for level, (tick, clock) in enumerate(levels):
        if deadline < clock + tick * p.wheel_size:
            return level
    return len(levels) - 1


def near_boundaries(p: v.Params, now: int) -> st.SearchStrategy[int]:
    """A boundary after ``now`` or a millisecond either side of it."""
    return st.tuples(st.sampled_from(boundaries_after(p, now)), st.sampled_from([-1, 0, 1])).map(sum)


def delays(p: v.Params, now: int, clocks: tuple[int, ...] = ()) -> st.SearchStrategy[int]:
    """Delays (from ``now``) around the boundaries of the first four levels, plus already-expired and small ones;
    deadlines at the next boundaries and on the wheel's comparisons (`wheel_edges`, from its levels' ``clocks``);
    and now and then the edge of time: a deadline of exactly Long.MAX_VALUE, or just or far beyond it (rejected with
    delay_out_of_range)."""
    interval = p.tick_ms * p.wheel_size
    edges = [p.tick_ms * p.wheel_size ** level for level in range(4)] + [interval * 2]
    usual = st.one_of(
        st.integers(-3, 3 * p.tick_ms),
        st.sampled_from(edges).flatmap(lambda edge: st.integers(edge - 2, edge + 2)),
        st.integers(0, p.tick_ms * p.wheel_size ** 4),
    )
    crossing = near_boundaries(p, now).map(lambda deadline: min(max(deadline - now, 0), v.LONG_MAX))
    on_edge = wheel_edges(p, now, clocks).map(lambda deadline: deadline - now)  # a lagging wheel's may be past
    room = v.LONG_MAX - now  # the largest delay whose deadline is Long.MAX_VALUE; a delay is a long too
    edge_of_time = st.just(room) if now == 0 else st.one_of(
        st.just(room), st.integers(room + 1, min(room + 3 * p.tick_ms, v.LONG_MAX)), st.integers(room + 1, v.LONG_MAX))
    # the usual delays first: Hypothesis shrinks towards the first choice, and a short run should not need the edge
    return st.integers(0, 11).flatmap(
        lambda roll: usual if roll < 7 else crossing if roll < 9 else on_edge if roll < 11 else edge_of_time)


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
def watch_commands(draw, p: v.Params, known: dict[str, int], now: int, keys: tuple[str, ...]) -> v.Watch:
    op = draw(st.sampled_from(OP_IDS))
    keys = draw(st.one_of(st.lists(st.sampled_from(keys), min_size=1, max_size=4),
                          st.just([]) if draw(st.integers(0, 30)) == 0 else st.nothing()))
    if op in known:
        return v.Watch(op, keys)
    known[op] = draw(delays(p, now))
    return v.Watch(op, keys, known[op], draw(READY_ON))


@st.composite
def purgatory_commands(draw, p: v.Params, max_steps: int = 40, unsupported: frozenset[str] = frozenset(),
                       shards: WatcherShards = KAFKA.watcher_shards) -> list[v.Command]:
    """A purgatory run that sends none of the ``unsupported`` commands, on a few keys of a purgatory with ``shards``."""
    now, known, commands = p.start_ms, {}, []
    keys = draw(run_keys(shards))
    kinds = allowed(["watch", "watch", "watch", "ready", "ready", "check", "check", "cancel_key", "force", "try",
                     "cancel", "advance", "advance", "watched", "delayed", "size", "wheel"], {"ready": "set_ready"},
                    unsupported)
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(kinds))
        if kind == "watch":
            commands.append(draw(watch_commands(p, known, now, keys)))
        elif kind == "ready" and known:
            commands.append(v.SetReady(draw(st.sampled_from(sorted(known))), draw(READY)))
        elif kind in ("force", "try", "cancel") and known:
            op = draw(st.sampled_from(sorted(known)))
            commands.append({"force": v.Force, "try": v.Try, "cancel": v.Cancel}[kind](op))
        elif kind in ("check", "cancel_key"):
            key = draw(st.sampled_from(keys))
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
