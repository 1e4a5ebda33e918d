"""What runs draw: parameters and commands that reach the interesting states.

Each distribution is one drawing function over `choices.Choices` (``draw_*``): a check draws its runs from a seeded
generator and shrinks them with Hypothesis through the same functions (`conformance.check.runs`), and each has a
Hypothesis strategy of the same name without ``draw_`` for tests and vectors. In every range the low end is the
simple choice a failing run shrinks to.

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

from kpurgatory.conformance.check.choices import Choices, pick, roll, strategy
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import KAFKA, Declarations, WatcherShards

OP_IDS = tuple(f"o{i}" for i in range(8))
#: the keys a run shares among its ops: few, so that lists are shared, checked, cancelled and purged
KEYS_PER_RUN = 4
TASK_IDS = tuple(f"t{i}" for i in range(10))
#: an op's condition: never by count (set_ready only), ready on the first, second or third tryComplete
READY_ON_CHOICES = (None, None, 1, 2, 3)
#: set_ready: mostly making a condition true, sometimes clearing it again
READY_CHOICES = (True, True, True, False)


@functools.cache
def scales(tick_ms: int, wheel_size: int) -> tuple[int, ...]:
    """The spacings of boundaries: the tick times every power of two, and every level's interval, up to
    Long.MAX_VALUE."""
    powers = [tick_ms << k for k in range(63) if tick_ms << k <= v.LONG_MAX]
    levels = [tick_ms * wheel_size ** level for level in range(1, 64) if tick_ms * wheel_size ** level <= v.LONG_MAX]
    return tuple(sorted(set(powers + levels)))


def draw_near(choices: Choices, time_ms: int, spread: int, limit: int) -> int:
    """A time within ``spread`` of ``time_ms``, kept inside [0, limit]."""
    return min(max(time_ms + choices.integer(-spread, spread), 0), limit)


def draw_origin(choices: Choices, tick_ms: int, wheel_size: int, limit: int = v.LONG_MAX) -> int:
    """A clock origin (start_ms): 0 and small ones, anywhere in [0, limit], and a few ticks either side of a multiple
    (1x-3x) of a boundary spacing or of Long.MAX_VALUE."""
    kind = roll(choices, 5)
    if kind == 0:
        return 0
    if kind == 1:
        return choices.integer(0, min(5 * tick_ms * wheel_size, limit))
    if kind == 2:
        multiple = min(pick(choices, scales(tick_ms, wheel_size)) * choices.integer(1, 3), limit)
        return draw_near(choices, multiple, 3 * tick_ms, limit)
    if kind == 3:
        return draw_near(choices, limit, 3 * tick_ms, limit)
    return choices.integer(0, limit)


#: wheel sizes beyond the small ones: Kafka's 20 (first, so a large wheel shrinks to it), powers of two and odd sizes
#: either side of them
LARGE_WHEELS = (20, 20, 7, 8, 16, 21, 32, 63, 64, 511, 512)


def draw_wheel_size(choices: Choices) -> int:
    """Mostly 2-6 buckets, where overflow wheels three and more levels up are cheap to reach; one run in four a
    larger wheel, even or odd, up to 512 (delays and advances scale with it, so its upper levels are reached too)."""
    return pick(choices, LARGE_WHEELS) if roll(choices, 4) == 3 else choices.integer(2, 6)


#: ticks: 1 ms in half the runs (Kafka's), else even, odd, prime and coarse ones, as often as each other, so that
#: rounding to the tick (of the start, of every advance, of a deadline) is exercised as much as the wheel's sizes are
TICKS = (1, 1, 1, 1, 1, 2, 3, 7, 10, 1000)


def draw_params(choices: Choices, profile: str = "purgatory", declarations: Declarations = KAFKA) -> v.Params:
    tick = pick(choices, TICKS)
    wheel_size = draw_wheel_size(choices)
    start = draw_origin(choices, tick, wheel_size, declarations.max_deadline_ms)
    purge_interval = choices.integer(0, 4) if profile == "purgatory" else 1000
    return v.Params(tick, wheel_size, start, purge_interval)


def origins(tick_ms: int, wheel_size: int, limit: int = v.LONG_MAX) -> st.SearchStrategy[int]:
    return strategy(draw_origin, tick_ms, wheel_size, limit)


def params(profile: str = "purgatory", declarations: Declarations = KAFKA) -> st.SearchStrategy[v.Params]:
    return strategy(draw_params, profile, declarations)


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


def draw_run_keys(choices: Choices, shards: WatcherShards, home: int | None = None) -> tuple[str, ...]:
    """A run's `KEYS_PER_RUN` keys, so that the runs of a check spread over every watcher shard: a bug in one list (a
    purge that skips the last) is reached. The keys sit on consecutive shards from ``home`` (None: k0's, where the
    keys are k0, k1, k2, k3), so a check that moves ``home`` on from run to run uses every shard; now and then a key
    is on a shard drawn anywhere (it shrinks back to its place), and the last one shares the first one's shard under
    another name, so two keys meet in one list's map and lock."""
    names = key_names(shards)
    home = shards.shard("k0") if home is None else home
    # mostly in the rotation's block, so that rotating covers every shard; now and then anywhere
    offsets = [choices.integer(0, shards.count - 1) if roll(choices, 4) == 3 else 0 for _ in range(KEYS_PER_RUN)]
    shard_of = [(home + i + offset) % shards.count for i, offset in enumerate(offsets)]
    if roll(choices, 8) == 7:
        shard_of[-1] = shard_of[0]
    used: dict[int, int] = {}
    picked = []
    for shard in shard_of:
        candidates = names[shard]
        picked.append(candidates[used.get(shard, 0) % len(candidates)])
        used[shard] = used.get(shard, 0) + 1
    return tuple(dict.fromkeys(picked))


#: the most watcher shards one watch spans (`shard_keys`): Kafka's 512, and more than any system declares in practice
WIDEST_WATCH = 1024


def shard_keys(shards: WatcherShards, first: int = 0, width: int | None = None) -> tuple[str, ...]:
    """A key on each of ``width`` consecutive watcher shards from ``first`` (default: every shard, up to
    `WIDEST_WATCH`): what a produce request to many partitions is watched on. An op watched on them and completed
    leaves a stale entry on every shard, which the next purge must sweep: one skipped shard of 512 shows."""
    width = min(shards.count, WIDEST_WATCH) if width is None else width
    names = key_names(shards)
    return tuple(names[shard % shards.count][0] for shard in range(first, first + width) if names[shard % shards.count])


def run_keys(shards: WatcherShards, home: int | None = None) -> st.SearchStrategy[tuple[str, ...]]:
    return strategy(draw_run_keys, shards, home)


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


def draw_wheel_edge(choices: Choices, p: v.Params, now: int, clocks: tuple[int, ...] = ()) -> int:
    """A deadline on a comparison TimingWheel.add makes at a level of tick t and current time c: c + t (below it,
    expired on add) a millisecond either side; and c + t * wheel_size, the level's interval (below it, a bucket of
    this level; from it, the overflow wheel, created by the first such add), a millisecond and a tick either side.
    The same comparisons are made again when a bucket of the level falls due, at c + t or c + 2t, and its entries
    are added again from there: so also that time itself, and that time plus the interval of a level below the one
    under it (a millisecond either side), where an entry of that bucket, added again, meets that interval exactly.
    Mostly at the first wheel and its overflow wheel, where an off-by-one in add shows soonest."""
    levels = level_clocks(p, now, clocks)
    top = len(levels) - 1
    level = choices.integer(0, min(1, top)) if roll(choices, 3) else choices.integer(0, top)
    return pick(choices, edge_times(p, levels, level))


def edge_times(p: v.Params, levels: list[tuple[int, int]], level: int) -> list[int]:
    """The times of `draw_wheel_edge` at ``level`` (0: the first wheel; past the top: the top), of ``levels`` as
    `level_clocks` gives them."""
    level = min(level, len(levels) - 1)
    tick, clock = levels[level]
    interval = tick * p.wheel_size
    times = [clock + tick + d for d in (-1, 0, 1)] + [clock + interval + d for d in (-tick, -1, 0, 1, tick)]
    for due in (clock + tick, clock + 2 * tick):
        times += [due] + [due + finer + d for finer, _ in levels[1:level] for d in (-1, 0, 1)]
    return sorted({time for time in times if time <= v.LONG_MAX}) or [v.LONG_MAX]


def draw_boundary(choices: Choices, p: v.Params, now: int, clocks: tuple[int, ...] = ()) -> int:
    """A boundary after ``now`` or a millisecond either side of it, or a comparison's edge of the wheel
    (`draw_wheel_edge`, `interval_ends`, from its levels' ``clocks``), as a time no earlier than now (may pass
    Long.MAX_VALUE by one)."""
    kind = roll(choices, 3)
    time_ms = (draw_near_boundary(choices, p, now) if kind == 0 else draw_wheel_edge(choices, p, now, clocks)
               if kind == 1 else pick(choices, interval_ends(p, now, clocks)))
    return max(time_ms, now)


def interval_ends(p: v.Params, now: int, clocks: tuple[int, ...] = ()) -> list[int]:
    """The end of the first wheel's or the overflow wheel's interval from its clock, or a millisecond before: an
    advance there meets an entry added at that interval (`draw_wheel_edge`), where ``<=`` for ``<`` in add shows."""
    ends = [clock + tick * p.wheel_size for tick, clock in level_clocks(p, now, clocks)[:2]]
    return [end - d for end in ends for d in (0, 1) if end - d <= v.LONG_MAX] or [v.LONG_MAX]


@functools.lru_cache(maxsize=1 << 14)  # shrinking draws the same states again and again
def interval_meetings(p: v.Params, now: int, clocks: tuple[int, ...] = ()) -> list[int]:
    """Times ``due`` at which a bucket of the third wheel or above falls due while an entry of it, added again
    from there, meets the first wheel's interval exactly (its deadline is ``due`` plus that interval): that entry
    and one added at the interval when the first wheel's clock is one interval before ``due`` both have the first
    wheel's slot of ``due``, which is where ``<=`` for ``<`` in add shows at the contract level (an entry filed in a
    bucket that falls due an interval early or late). Each ``due`` is a multiple of the tick of the level where an
    entry with that deadline, added now, lands, and comes an interval or more after now; and no level's window up to
    that one passes Long.MAX_VALUE (where Kafka's windows wrap, the other rules go: its hangs there cost a time limit
    each)."""
    interval = p.tick_ms * p.wheel_size
    dues = []
    passed = -1  # the latest interval end of the levels below: a deadline from there on is past all of them
    for level, (tick, clock) in enumerate(level_clocks(p, now, clocks)):
        end = clock + tick * p.wheel_size
        if level >= 2:
            if end > v.LONG_MAX:
                break
            for ahead in range(1, 4):
                due = (now // tick + ahead) * tick
                # TimingWheel.add files the entry at the first level whose interval end is past its deadline
                if due - interval > now and passed <= due + interval < end:
                    dues.append(due)
        passed = max(passed, end)
    return sorted(set(dues))


def draw_near_boundary(choices: Choices, p: v.Params, now: int) -> int:
    """A boundary after ``now`` or a millisecond either side of it."""
    return pick(choices, boundaries_after(p, now)) + pick(choices, (-1, 0, 1))


def draw_delay(choices: Choices, p: v.Params, now: int, clocks: tuple[int, ...] = ()) -> int:
    """A delay (from ``now``) around the boundaries of the first four levels, or already expired, or small; a
    deadline at the next boundaries or on the wheel's comparisons (`draw_wheel_edge`, from its levels' ``clocks``);
    and now and then the edge of time: a deadline of exactly Long.MAX_VALUE, or just or far beyond it (rejected with
    delay_out_of_range)."""
    # the usual delays first: a failing run shrinks towards them, and a short run should not need the edge
    kind = roll(choices, 12)
    if kind < 7:
        usual = roll(choices, 3)
        if usual == 0:
            return choices.integer(-3, 3 * p.tick_ms)
        if usual == 1:
            edge = pick(choices, (*(p.tick_ms * p.wheel_size ** level for level in range(4)),
                                  p.tick_ms * p.wheel_size * 2))
            return choices.integer(edge - 2, edge + 2)
        return choices.integer(0, p.tick_ms * p.wheel_size ** 4)
    if kind < 9:
        return min(max(draw_near_boundary(choices, p, now) - now, 0), v.LONG_MAX)
    if kind < 11:
        return draw_wheel_edge(choices, p, now, clocks) - now  # a lagging wheel's may be past
    room = v.LONG_MAX - now  # the largest delay whose deadline is Long.MAX_VALUE; a delay is a long too
    beyond = roll(choices, 3)
    if beyond == 0 or now == 0:  # nothing is beyond the edge from 0: a delay is a long
        # mostly the edge itself; drawn as a delay from now, so that a failing run shrinks towards short delays
        return choices.integer(0, room, usual=room)
    if beyond == 1:
        return choices.integer(room + 1, min(room + 3 * p.tick_ms, v.LONG_MAX))
    return choices.integer(room + 1, v.LONG_MAX)


def delays(p: v.Params, now: int, clocks: tuple[int, ...] = ()) -> st.SearchStrategy[int]:
    return strategy(draw_delay, p, now, clocks)


def declared_delay(delay: int, now: int, declarations: Declarations) -> int | None:
    """``delay`` as a run may send it to a system with ``declarations``: moved to the edge of the domain where the
    system promises nothing beyond it (None when no delay from ``now`` is inside it)."""
    if delay < 0 and declarations.negative_delays == "undefined":
        delay = 0
    if declarations.beyond_max_deadline == "undefined":
        delay = min(delay, declarations.max_deadline_ms - now)
    return delay if declarations.within_domain(now, delay) else None


def draw_gap(choices: Choices, p: v.Params) -> int:
    """How far one advance moves the clock: a few ticks, or far enough to cascade from the fourth level."""
    return choices.integer(0, 3 * p.tick_ms if roll(choices, 2) == 0 else p.tick_ms * p.wheel_size ** 3)


def draw_advance(choices: Choices, p: v.Params, now: int) -> v.Advance:
    """An advance by a gap, or to a boundary (a millisecond either side), never past Long.MAX_VALUE."""
    to_ms = now + draw_gap(choices, p) if roll(choices, 2) == 0 else draw_boundary(choices, p, now)
    return v.Advance(min(to_ms, v.LONG_MAX))


def allowed(kinds: list[str], names: dict[str, str], unsupported: frozenset[str]) -> list[str]:
    """``kinds`` without those whose command (``names``: kind -> command name, where they differ) is unsupported."""
    return [kind for kind in kinds if names.get(kind, kind) not in unsupported]


def draw_timer_commands(choices: Choices, p: v.Params, max_steps: int = 40,
                        unsupported: frozenset[str] = frozenset()) -> list[v.Command]:
    """A timer run that sends none of the ``unsupported`` commands."""
    now, task_delays, commands = p.start_ms, {}, []
    kinds = allowed(["add", "add", "add", "cancel", "advance", "advance", "size", "wheel"],
                    {"add": "timer_add", "cancel": "timer_cancel"}, unsupported)
    for _ in range(choices.integer(1, max_steps)):
        kind = pick(choices, kinds)
        if kind == "add":
            task = pick(choices, TASK_IDS)
            if task not in task_delays:
                task_delays[task] = draw_delay(choices, p, now)
            commands.append(v.TimerAdd(task, task_delays[task]))
        elif kind == "cancel" and task_delays:
            commands.append(v.TimerCancel(pick(choices, sorted(task_delays))))
        elif kind == "advance":
            command = draw_advance(choices, p, now)
            now = command.to_ms
            commands.append(command)
        elif kind == "size":
            commands.append(v.Size())
        elif kind == "wheel":
            commands.append(v.Wheel())
    if "shutdown" not in unsupported and roll(choices, 2):
        commands.append(v.Shutdown())
    return commands


def draw_watch(choices: Choices, p: v.Params, known: dict[str, int], now: int, keys: tuple[str, ...]) -> v.Watch:
    op = pick(choices, OP_IDS)
    watched = [] if roll(choices, 31) == 30 else [pick(choices, keys) for _ in range(choices.integer(1, 4))]
    if op in known:
        return v.Watch(op, watched)
    known[op] = draw_delay(choices, p, now)
    return v.Watch(op, watched, known[op], pick(choices, READY_ON_CHOICES))


def draw_purgatory_commands(choices: Choices, p: v.Params, max_steps: int = 40,
                            unsupported: frozenset[str] = frozenset(),
                            shards: WatcherShards = KAFKA.watcher_shards) -> list[v.Command]:
    """A purgatory run that sends none of the ``unsupported`` commands, on a few keys of a purgatory with ``shards``."""
    now, known, commands = p.start_ms, {}, []
    keys = draw_run_keys(choices, shards)
    kinds = allowed(["watch", "watch", "watch", "ready", "ready", "check", "check", "cancel_key", "force", "try",
                     "cancel", "advance", "advance", "watched", "delayed", "size", "wheel"], {"ready": "set_ready"},
                    unsupported)
    for _ in range(choices.integer(1, max_steps)):
        kind = pick(choices, kinds)
        if kind == "watch":
            commands.append(draw_watch(choices, p, known, now, keys))
        elif kind == "ready" and known:
            commands.append(v.SetReady(pick(choices, sorted(known)), pick(choices, READY_CHOICES)))
        elif kind in ("force", "try", "cancel") and known:
            op = pick(choices, sorted(known))
            commands.append({"force": v.Force, "try": v.Try, "cancel": v.Cancel}[kind](op))
        elif kind in ("check", "cancel_key"):
            key = pick(choices, keys)
            commands.append(v.Check(key) if kind == "check" else v.CancelKey(key))
        elif kind == "advance":
            command = draw_advance(choices, p, now)
            now = command.to_ms
            commands.append(command)
        elif kind in ("watched", "delayed", "size", "wheel"):
            commands.append({"watched": v.Watched, "delayed": v.Delayed, "size": v.Size, "wheel": v.Wheel}[kind]())
    if "shutdown" not in unsupported and roll(choices, 2):
        commands.append(v.Shutdown())
    return commands


def draw_run(choices: Choices, profile: str | None = None, unsupported: frozenset[str] = frozenset()
             ) -> tuple[str, v.Params, list[v.Command]]:
    """(profile, params, commands): a whole run, without the ``unsupported`` commands."""
    profile = profile or pick(choices, v.PROFILES)
    p = draw_params(choices, profile)
    drawing = draw_timer_commands if profile == "timer" else draw_purgatory_commands
    return profile, p, drawing(choices, p, unsupported=unsupported)


def timer_commands(p: v.Params, max_steps: int = 40, unsupported: frozenset[str] = frozenset()
                   ) -> st.SearchStrategy[list[v.Command]]:
    return strategy(draw_timer_commands, p, max_steps, unsupported)


def purgatory_commands(p: v.Params, max_steps: int = 40, unsupported: frozenset[str] = frozenset(),
                       shards: WatcherShards = KAFKA.watcher_shards) -> st.SearchStrategy[list[v.Command]]:
    return strategy(draw_purgatory_commands, p, max_steps, unsupported, shards)


def runs(profile: str | None = None, unsupported: frozenset[str] = frozenset()
         ) -> st.SearchStrategy[tuple[str, v.Params, list[v.Command]]]:
    return strategy(draw_run, profile, unsupported)
