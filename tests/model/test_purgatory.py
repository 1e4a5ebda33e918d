"""The purgatory model: every bullet of Kafka's DelayedOperationPurgatory semantics."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kpurgatory.conformance.check.strategies import params as params_strategy
from kpurgatory.conformance.check.strategies import purgatory_commands
from kpurgatory.model import Model, Params
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import ContractMonitor
from kpurgatory.model.timer import wheel_invariants


def purgatory(purge_interval=1000, tick=1) -> Model:
    return Model("purgatory", Params(tick, 20, 0, purge_interval))


def test_completion_on_the_first_try_watches_nothing_and_schedules_nothing():
    model = purgatory()
    observation = model.step(v.Watch("o", ("a", "b"), 100, ready_on=1))
    assert observation.result is True and observation.events == (v.Complete("o", "try"),)
    assert model.purgatory.estimated_total_operations == 0
    assert model.step(v.Watched()).result == 0 and model.step(v.Delayed()).result == 0
    assert model.ops["o"].try_calls == 1


def test_completion_on_the_second_try_leaves_stale_entries_and_counts_the_watch():
    model = purgatory()
    assert model.step(v.Watch("o", ("a", "b", "c"), 100, ready_on=2)).result is True
    assert model.step(v.Watched()).result == 3 and model.step(v.Delayed()).result == 0
    assert model.purgatory.estimated_total_operations == 1
    assert model.ops["o"].try_calls == 2


def test_an_op_that_stays_blocked_is_watched_on_every_key_and_put_in_the_timer():
    model = purgatory()
    assert model.step(v.Watch("o", ("a", "b"), 100)).result is False
    assert model.step(v.Watched()).result == 2 and model.step(v.Delayed()).result == 1
    assert model.purgatory.estimated_total_operations == 1


def test_empty_key_list_is_rejected_before_try_complete():
    model = purgatory()
    observation = model.step(v.Watch("o", (), 100, ready_on=1))
    assert observation.error == "empty_keys" and observation.result is None
    assert model.ops["o"].try_calls == 0 and model.purgatory.estimated_total_operations == 0


def test_check_counts_what_it_completed_and_removes_an_emptied_key():
    model = purgatory()
    model.step(v.Watch("a", ("k",), 100))
    model.step(v.Watch("b", ("k",), 100))
    model.step(v.SetReady("a"))
    assert model.step(v.Check("k")).result == 1
    assert list(model.purgatory.watchers) == ["k"]
    model.step(v.SetReady("b"))
    assert model.step(v.Check("k")).events == (v.Complete("b", "check"),)
    assert model.purgatory.watchers == {}


def test_stale_entries_stay_on_other_keys_until_checked():
    model = purgatory()
    model.step(v.Watch("o", ("k1", "k2", "k3"), 100))
    model.step(v.SetReady("o"))
    assert model.step(v.Check("k1")).result == 1
    assert model.step(v.Watched()).result == 2
    assert model.step(v.Check("k2")).result == 0  # removed as already completed, not counted
    assert model.step(v.Watched()).result == 1


def test_cancel_for_key_returns_completed_ops_too_and_completes_nothing():
    model = purgatory()
    for op in ("o1", "o2", "o3"):
        model.step(v.Watch(op, ("k",), 50))
    model.step(v.Force("o3"))
    estimate = model.purgatory.estimated_total_operations
    observation = model.step(v.CancelKey("k"))
    assert observation.result == ["o1", "o2", "o3"] and observation.events == ()
    assert model.purgatory.estimated_total_operations == estimate
    assert model.step(v.Advance(1000)).events == ()  # cancelled ops never time out


@pytest.mark.parametrize("completed, purges", [(2, False), (3, True)])
def test_purge_fires_only_when_the_difference_exceeds_the_interval(completed, purges):
    model = purgatory(purge_interval=2)
    for i in range(4):
        model.step(v.Watch(f"o{i}", (f"k{i}",), 10_000))
    for i in range(completed):
        model.step(v.Force(f"o{i}"))
    events = model.step(v.Advance(1)).events
    if purges:  # 4 - 1 = 3 > 2
        assert events == (v.Purge(3),)
        assert model.purgatory.estimated_total_operations == 1
        assert model.step(v.Watched()).result == 1
    else:  # 4 - 2 = 2 is not > 2
        assert events == ()
        assert model.step(v.Watched()).result == 4


def test_force_complete_lets_one_caller_through_and_expiry_after_completion_does_nothing():
    model = purgatory()
    model.step(v.Watch("o", ("k",), 10))
    assert model.step(v.Force("o")).result is True
    assert model.step(v.Force("o")).result is False
    assert model.step(v.Advance(100)).events == ()


def test_on_expiration_follows_on_complete_only_when_expiry_wins():
    model = purgatory()
    model.step(v.Watch("o", ("k",), 10))
    assert model.step(v.Advance(10)).events == (v.Complete("o", "expire"), v.Expire("o"))


def test_rewatch_resets_the_deadline():
    model = purgatory()
    model.step(v.Watch("r", ("k",), 50))
    model.step(v.Advance(10))
    model.step(v.Watch("r", ("k",)))
    assert model.step(v.Advance(59)).events == ()
    assert model.step(v.Advance(60)).events == (v.Complete("r", "expire"), v.Expire("r"))


def test_rewatching_a_completed_op_skips_its_keys_but_counts_the_watch():
    model = purgatory()
    model.step(v.Watch("o", ("k",), 50, ready_on=1))
    assert model.step(v.Watch("o", ("k", "j"))).result is False
    assert model.step(v.Watched()).result == 0
    assert model.purgatory.estimated_total_operations == 1


def test_duplicate_keys_are_listed_twice_and_completed_once():
    model = purgatory()
    model.step(v.Watch("d", ("k", "k"), 50))
    assert model.step(v.Watched()).result == 2
    model.step(v.SetReady("d"))
    assert model.step(v.Check("k")).result == 1
    assert model.step(v.Watched()).result == 0


def test_shutdown_drops_pending_ops():
    model = purgatory()
    model.step(v.Watch("o1", ("k",), 100))
    model.step(v.Watch("o2", ("k",), 100))
    model.step(v.Force("o1"))
    observation = model.step(v.Shutdown())
    assert observation.result == ["o2"] and observation.events == ()


@settings(max_examples=300)
@given(st.data())
def test_the_model_satisfies_its_own_contract(data):
    """Any run of the model is a correct purgatory: the contract monitor finds nothing, and the wheel's invariants
    and the purgatory's bookkeeping hold after every step."""
    p = data.draw(params_strategy("purgatory"))
    model, monitor = Model("purgatory", p), ContractMonitor("purgatory", p)
    for command in data.draw(purgatory_commands(p)):
        observation = model.step(command)
        assert monitor.observe(command, observation) == []
        assert wheel_invariants(model.timer) == []
        assert all(model.purgatory.watchers.values()), "an empty watch list was left behind"
        in_timer = {task.task_id for task in model.timer.pending()}
        assert not any(model.ops[op].completed for op in in_timer), "a completed op is still in the timer"


def test_check_removes_the_entry_it_visits_not_the_first_occurrence():
    """[o, x, o] where o completes on its second visit: Kafka's iterator removes that visit's entry, keeping the
    first one (now stale) ahead of x."""
    model = purgatory()
    model.step(v.Watch("o", ("k",), 100, ready_on=6))  # tries 1-2
    model.step(v.Watch("x", ("k",), 100))
    model.step(v.Watch("o", ("k",)))  # tries 3-4: list [o, x, o]
    assert model.step(v.Check("k")).result == 1  # visits: o (try 5, fails), x, o (try 6, completes)
    assert model.step(v.CancelKey("k")).result == ["o", "x"]


@pytest.mark.parametrize("command", [v.Watch("o", ("",), 10), v.Watch("o", (3,), 10), v.Check(""), v.Force("")])
def test_ids_and_keys_must_be_non_empty_strings(command):
    from kpurgatory.model import CommandError

    with pytest.raises(CommandError, match="must be a non-empty string"):
        purgatory().step(command)
