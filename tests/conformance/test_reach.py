"""Exploration reaches Kafka's whole structure: keys over every watcher shard a system declares, wheels from 2 to 512
buckets, deadlines and advances on every comparison of the wheel's add, and the concurrent check drawing the
sequential patterns (a watch then a cancel_key of its key) and replaying the shared corpus."""

import json
import random

import pytest
from hypothesis import Phase, find, settings
from hypothesis.errors import NoSuchExample

from kpurgatory.conformance.adapters.builtin import BuiltinAdapter
from kpurgatory.conformance.check.choices import SeededChoices
from kpurgatory.conformance.check import corpus, strategies
from kpurgatory.conformance.check.concurrent import (CLOCK, check_history, corpus_plan, plan_run,
                                                     run_concurrent_check)
from kpurgatory.conformance.check.coverage import Coverage
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.tools.mutants import BY_ID, adapter_class
from kpurgatory.conformance.traces.codec import (Header, Step, Timing, Trace, declarations_from_json,
                                                 declarations_to_json, dumps, loads, model_trace)
from kpurgatory.impl.purgatory import SHARDS
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import KAFKA, Declarations, RealTime, WatcherShards, java_string_hash

DRAWN = settings(database=None, max_examples=400, phases=[Phase.generate], derandomize=True)


def drawn(strategy, examples: int = 400) -> list:
    """What ``strategy`` draws in ``examples`` tries (Hypothesis's generation, no shrinking)."""
    seen = []
    with pytest.raises(NoSuchExample):
        find(strategy, lambda value: seen.append(value) and False,
             settings=settings(DRAWN, max_examples=examples))
    return seen


CANCEL_KEEPS_TIMER = adapter_class(BY_ID["cancel_key_keeps_timeout"])


# --- watcher shards ------------------------------------------------------------------------------------------


def test_keys_hash_as_java_strings_and_land_on_kafkas_shards():
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2**31  # Math.abs of it is still negative; % first
    assert [KAFKA.watcher_shards.shard(f"k{i}") for i in range(6)] == [293, 294, 295, 296, 297, 298]
    assert KAFKA.watcher_shards.shard("polygenelubricants") == 0
    assert WatcherShards(1, "none").shard("anything") == 0


def test_every_shard_has_short_ascii_names_that_land_on_it():
    for shards in (KAFKA.watcher_shards, WatcherShards(3), WatcherShards(1, "none"), WatcherShards(4096)):
        names = strategies.key_names(shards)
        assert len(names) == shards.count and all(names)
        assert all(shards.shard(name) == shard for shard, listed in enumerate(names) for name in listed)
        assert all(name.isascii() and name.isalnum() and len(name) <= 5 for listed in names for name in listed)
        assert sum(map(len, names)) >= strategies.KEYS_PER_RUN
    assert strategies.key_names(KAFKA.watcher_shards)[293][0] == "k0"


def test_a_runs_keys_are_few_distinct_spread_over_shards_and_shrink_to_k0_k3():
    shards = KAFKA.watcher_shards
    assert find(strategies.run_keys(shards), lambda keys: True) == ("k0", "k1", "k2", "k3")
    runs = [strategies.draw_run_keys(SeededChoices(run), shards) for run in range(200)]  # as a check draws them
    assert all(len(set(keys)) == len(keys) <= strategies.KEYS_PER_RUN for keys in runs)
    assert len({shards.shard(key) for keys in runs for key in keys}) > 100  # now and then a key anywhere
    rotated = {shards.shard(key) for home in range(0, 512, strategies.KEYS_PER_RUN)
               for key in find(strategies.run_keys(shards, home), lambda keys: True)}
    assert rotated == set(range(512))  # a run's keys in their places: every shard in 128 runs
    assert any(len({shards.shard(key) for key in keys}) < len(keys) for keys in runs)  # two keys in one list
    few = WatcherShards(2)
    assert all(len(keys) == strategies.KEYS_PER_RUN for keys in drawn(strategies.run_keys(few), 50))


def test_watcher_shards_are_declared_in_hello_and_travel_in_trace_headers():
    declared = declarations_from_json({"watcher_shards": {"count": 16}})
    assert declared.watcher_shards == WatcherShards(16, "java-string-hashcode")
    assert declarations_from_json({}).watcher_shards == WatcherShards(512, "java-string-hashcode")
    unsharded = Declarations(watcher_shards={"count": 1, "hash": "none"})
    trace = Trace(Header("t", "purgatory", v.Params(), declarations=unsharded), ())
    assert loads(dumps(trace)) == [trace]
    assert json.loads(dumps(trace))["header"]["declarations"]["watcher_shards"] == {"count": 1, "hash": "none"}
    for wrong in ({"count": 0}, {"count": 512, "hash": "none"}, {"hash": "md5"}, {"count": True}):
        with pytest.raises(ValueError):
            Declarations(watcher_shards=wrong)


def test_real_time_is_declared_and_travels_in_trace_headers():
    """A system on a real clock declares its real-time allowances (a live recording's header does); a system on the
    virtual clock declares none, and its header leaves them out."""
    assert declarations_from_json({}).real_time is None
    assert "real_time" not in declarations_to_json(KAFKA)
    declared = declarations_from_json({"kafka_version": "3.9.1", "real_time": {"executor_lag_ms": 250}})
    assert declared.real_time == RealTime(1, 250, 200)
    assert (declared.real_time.early_ms, declared.real_time.late_ms) == (1, 251)
    live = Declarations(real_time={"clock_granularity_ms": 2, "executor_lag_ms": 0, "reaper_ms": 100})
    trace = Trace(Header("t", "purgatory", v.Params(), threads=2, declarations=live), ())
    assert loads(dumps(trace)) == [trace]
    assert json.loads(dumps(trace))["header"]["declarations"]["real_time"] == {
        "clock_granularity_ms": 2, "executor_lag_ms": 0, "reaper_ms": 100}
    for wrong, field in (({"executor_lag_ms": -1}, "real_time.executor_lag_ms"),
                         ({"reaper_ms": 1.5}, "real_time.reaper_ms"),
                         ({"clock_granularity_ms": True}, "real_time.clock_granularity_ms"),
                         ({"lag_ms": 3}, "real_time.lag_ms"), (5, "real_time")):
        with pytest.raises(ValueError, match=field.replace(".", r"\.")):
            Declarations(real_time=wrong)


def test_coverage_counts_the_shards_used_and_leaves_them_out_without_shards():
    assert "watcher shards hit (of 512)" in Coverage("purgatory").report()
    assert not any("shards" in item for item in Coverage("timer").report())
    assert not any("shards" in item for item in Coverage("purgatory", WatcherShards(1, "none")).report())


def test_a_check_uses_keys_on_many_shards_and_says_how_many():
    result = run_check(BuiltinAdapter, profile="purgatory", examples=60, seed=3)
    assert result.passed, result.failure_summary
    assert result.coverage[f"watcher shards hit (of {SHARDS})"] > SHARDS / 2  # the built-in purgatory's


# --- wheel sizes and the wheel's comparisons ------------------------------------------------------------------


def test_wheels_range_from_two_buckets_to_512_both_parities_mostly_small():
    sizes = [p.wheel_size for p in drawn(strategies.params("purgatory"))]
    assert {2, 3, 4, 5, 6} <= set(sizes)
    assert 20 in sizes and any(size > 6 and size % 2 for size in sizes) and any(size > 20 and size % 2 == 0
                                                                               for size in sizes)
    assert sum(size <= 6 for size in sizes) > len(sizes) / 2


def test_deadlines_are_drawn_on_every_comparison_of_add_at_both_levels():
    """Tick 2, four buckets, the first wheel lagging at 10 with now 13: its tick edge is 12, its interval edge 18; the
    overflow wheel (tick 8, at 8) has them at 16 and 40; its bucket falling due at 16 re-adds entries that meet the
    first wheel's interval at 16 + 8 = 24."""
    p = v.Params(2, 4, 0)
    deadlines = {13 + strategies.draw_delay(SeededChoices(run), p, 13, (10, 8)) for run in range(2000)}  # as checked
    assert {11, 12, 13} <= deadlines  # the first wheel's tick, ±1 ms
    assert {16, 17, 18, 19, 20} <= deadlines  # its interval, ±1 ms and ±1 tick
    assert {15, 16, 17, 39, 40, 41, 32, 48} <= deadlines  # the overflow wheel's
    assert {23, 24, 25} <= deadlines  # re-added from the level above
    advances = {strategies.draw_boundary(SeededChoices(run), p, 13, (10, 8)) for run in range(1000)}
    assert {17, 18, 39, 40} <= advances and min(advances) >= 13


def test_a_wheel_without_its_clocks_is_taken_as_kept_up_with_now():
    assert strategies.level_clocks(v.Params(2, 4, 0), 13)[:3] == [(2, 12), (8, 8), (32, 0)]
    assert strategies.level_clocks(v.Params(1, 2, 0), 0)[-1][0] == 2**62  # every level whose tick is a long


# --- the concurrent check -----------------------------------------------------------------------------------


def history(*calls) -> Trace:
    """calls: (thread, invoked, returned, command, result, events), in order of invocation."""
    steps = [Step(seq, command, v.Observation(result, tuple(events)), Timing(thread, invoked, returned))
             for seq, (thread, invoked, returned, command, result, events) in enumerate(calls, start=1)]
    return Trace(Header("h", "purgatory", v.Params(1, 4, 0, 1000), "test", threads=2), steps)


def test_plans_draw_the_sequential_patterns():
    plans = [plan_run(random.Random(seed), 3, 30) for seed in range(20)]
    followed = 0
    for plan in plans:
        for round_, next_round in zip(plan.rounds, plan.rounds[1:]):
            for thread, command in round_:
                if isinstance(command, v.Watch):
                    followed += any(other == thread and isinstance(call, v.CancelKey) and call.key in command.keys
                                    for other, call in next_round)
    assert followed >= 10
    assert len({key for plan in plans for key in plan.keys}) > 40  # keys on other shards from run to run
    to_deadline = 0
    for plan in plans:
        clock, deadlines = plan.params.start_ms, set()
        for round_ in plan.rounds:
            deadlines |= {clock + call.delay_ms for _, call in round_ if isinstance(call, v.Watch)}
            advance = round_[-1][1]
            to_deadline += advance.to_ms > clock and bool({advance.to_ms, advance.to_ms + 1} & deadlines)
            clock = advance.to_ms
    assert to_deadline >= 20


def test_a_cancel_key_that_leaves_the_timer_entry_is_caught_under_threads():
    result = run_concurrent_check(CANCEL_KEEPS_TIMER, threads=4, runs=30, steps=40, seed=1)
    assert not result.passed
    assert {violation.property for violation in result.violations} == {"justified"}
    assert "after cancel_key" in result.violations[0].message


def test_the_expiry_after_a_cancel_rule_holds_for_the_correct_purgatory():
    result = run_concurrent_check(BuiltinAdapter, threads=4, runs=30, steps=40, seed=2)
    assert result.passed, [report.violations for report in result.failures]


def test_a_cancel_during_the_watch_may_come_before_the_timer_entry():
    """cancel_key while the watch is still running: the watch adds the op to the timer after watching its keys, so
    the op may expire later (Kafka does this), and no rule blames it."""
    trace = history(("w0", 1, 4, v.Watch("a", ("k",), 5), False, []),
                    ("w1", 2, 3, v.CancelKey("k"), ["a"], []),
                    (CLOCK, 5, 6, v.Advance(10), None, [v.Complete("a", "expire"), v.Expire("a")]))
    assert not any("cancel" in violation.message for violation in check_history(trace))
    after = history(("w0", 1, 2, v.Watch("a", ("k",), 5), False, []),
                    ("w1", 3, 4, v.CancelKey("k"), ["a"], []),
                    (CLOCK, 5, 6, v.Advance(10), None, [v.Complete("a", "expire"), v.Expire("a")]))
    assert [violation.property for violation in check_history(after)] == ["justified"]


def test_the_corpus_runs_are_played_as_plans(tmp_path):
    commands = [v.Watch("o0", ["k0"], 10), v.CancelKey("k0"), v.Advance(20), v.Wheel(), v.Shutdown()]
    trace = model_trace(Header("found", "purgatory", v.Params(1, 4, 0, 1000)), commands)
    corpus.add(tmp_path, trace)
    plan = corpus_plan(trace.header.params, commands, BuiltinAdapter().hello())
    assert [len(round_) for round_ in plan.rounds] == [1] * 4  # one call a round; the drain shuts down
    assert [thread for round_ in plan.rounds for thread, _ in round_] == ["w0", "w0", CLOCK, "w0"]
    result = run_concurrent_check(CANCEL_KEEPS_TIMER, threads=2, runs=0, steps=10, seed=1, corpus=tmp_path)
    assert not result.passed and result.history.trace_id == "corpus-1"
    assert run_concurrent_check(BuiltinAdapter, threads=2, runs=0, steps=10, seed=1, corpus=tmp_path).passed
