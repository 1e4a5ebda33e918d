"""Three bugs a contributor could plausibly write, and the revert of KAFKA-17848 (`test_kafka_17848`), as mutants
(`kpurgatory.conformance.tools.mutants`): each one's own run, played against it, shows the bug at the levels that can
see it, and the built-in implementation passes the same run."""

import pytest

from kpurgatory.conformance.adapters.builtin import BuiltinAdapter
from kpurgatory.conformance.check.concurrent import run_concurrent_check
from kpurgatory.conformance.check.sequential import run_check
from kpurgatory.conformance.tools.mutants import BY_ID, adapter_class
from kpurgatory.conformance.traces.codec import Header, model_trace
from kpurgatory.conformance.traces.replay import replay
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import WatcherShards


def failing_level(mutant_id: str, profile: str, params: v.Params, commands: list[v.Command]) -> dict[str, int | None]:
    """Per level, the step at which the mutant first fails the model's run of ``commands`` (None: it passes)."""
    mutant = adapter_class(BY_ID[mutant_id])
    trace = model_trace(Header(mutant_id, profile, params), commands)
    for level in ("exact", "contract"):
        assert replay(trace, BuiltinAdapter(), level).ok
    return {level: getattr(replay(trace, mutant(), level).first_failure, "seq", None)
            for level in ("exact", "contract")}


def test_an_entry_due_one_interval_ahead_stays_on_the_level_it_ends():
    """Due at 4 on a wheel of 4 one-ms buckets: the overflow wheel's, not slot 0 of the first. Every due bucket is
    released before the next call, so the entry still runs on time: only the read-out shows it."""
    commands = [v.TimerAdd("t", 4), v.Wheel(), v.Advance(3), v.Advance(4), v.Size()]
    assert failing_level("window_end_inside", "timer", v.Params(1, 4, 0, 1000), commands) == \
        {"exact": 2, "contract": None}


def test_two_entries_meeting_in_the_slot_at_the_interval_fire_one_early():
    """On a wheel of 2 one-ms buckets: t0 (due 6) waits in a third-level bucket due at 4; t1 moves the clocks to 2;
    t2, due at 4, is filed at the interval in the first wheel's slot of 4, where t0, added again at 4 with 2 to go,
    joins it: t0 fires at 4, two ms early. Both profiles show it at both levels (`meet_at_interval`'s pattern)."""
    timer = [v.TimerAdd("t0", 6), v.TimerAdd("t1", 2), v.Advance(2), v.TimerAdd("t2", 2), v.Advance(4)]
    assert failing_level("window_end_inside", "timer", v.Params(1, 2, 0, 1000), timer) == {"exact": 5, "contract": 5}
    purgatory = [v.Watch("a", ["k"], 6), v.Watch("b", ["k"], 2), v.Advance(2), v.Watch("c", ["k"], 2), v.Advance(4)]
    assert failing_level("window_end_inside", "purgatory", v.Params(1, 2, 0, 1000), purgatory) == \
        {"exact": 5, "contract": 5}


def test_a_cancelled_key_leaves_its_ops_in_the_timer():
    """After cancelForKey the op is no longer delayed and never times out; the mutant still counts it and
    expires it."""
    commands = [v.Watch("o", ["k"], 10), v.CancelKey("k"), v.Delayed(), v.Advance(10)]
    assert failing_level("cancel_key_keeps_timeout", "purgatory", v.Params(1, 20, 0, 0), commands) == \
        {"exact": 3, "contract": 3}


def key_on_shard(shards: WatcherShards, wanted) -> str:
    """A key whose shard (Kafka's rule over ``shards``, as the mutant's hello declares) is ``wanted``."""
    return next(key for key in (f"k{number}" for number in range(10_000)) if wanted(shards.shard(key)))


def test_the_purge_leaves_completed_ops_on_the_last_shards_lists():
    """Purge interval 0: the advance after a completion purges. A key in any other of Kafka's 512 shards is swept
    clean; on the last shard's key the completed op stays watched (and the advance purged nothing, which the exact
    level reads)."""
    def run(key: str) -> list[v.Command]:
        return [v.Watch("o", [key], 10), v.Force("o"), v.Advance(1), v.Watched()]

    shards = adapter_class(BY_ID["purge_skips_last_shard"])().hello().declarations.watcher_shards
    assert shards.count == 512
    params = v.Params(1, 20, 0, 0)
    elsewhere = run(key_on_shard(shards, lambda shard: shard < shards.count - 1))
    assert failing_level("purge_skips_last_shard", "purgatory", params, elsewhere) == \
        {"exact": None, "contract": None}
    last = run(key_on_shard(shards, lambda shard: shard == shards.count - 1))
    assert failing_level("purge_skips_last_shard", "purgatory", params, last) == \
        {"exact": 3, "contract": 4}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_purge_that_skips_one_of_512_shards_is_caught_at_every_level_in_a_few_runs(seed, tmp_path):
    """A request watched on a key of every shard, completed, then a purge: the skipped shard keeps its entry. At the
    contract level it shows as watched() above the live entries, and the counterexample narrows to that one key."""
    mutant = adapter_class(BY_ID["purge_skips_last_shard"])
    shards = mutant().hello().declarations.watcher_shards
    for level in ("exact", "contract"):
        result = run_check(mutant, profile="purgatory", level=level, examples=20, seed=seed, max_failures=1,
                           out_dir=tmp_path / level)
        [found] = result.failures
        watches = [step.command for step in found.counterexample.steps if isinstance(step.command, v.Watch)]
        assert [shards.shard(key) for watch in watches for key in watch.keys] == [shards.count - 1]
    concurrent = run_concurrent_check(mutant, threads=3, runs=10, steps=20, seed=seed, out_dir=tmp_path / "threads")
    assert "watcher_cleanup" in {violation.property for violation in concurrent.violations}, [
        (report.history.trace_id, report.violations) for report in concurrent.failures]
