"""Refinement between model/ and the encodings (specs/refinement.py, wheel.model.expiration_guard): the obligations
hold on the real model, and each one-edit breakage of model/ below (applied by monkeypatching, never in model/'s
files) is refuted by the obligation named beside it, with a short counterexample written as a replayable trace."""

import pytest

from kpurgatory.conformance.traces.replay import replay
from kpurgatory.model import purgatory as model_purgatory
from kpurgatory.model import timer as model_timer
from kpurgatory.model import vocabulary as v
from kpurgatory.model.purgatory import DelayedOperation, DelayedOperationPurgatory
from kpurgatory.model.timer import LONG_MAX, SystemTimer, TimerDomainError, TimingWheel
from kpurgatory.specs import refinement, wheel
from kpurgatory.specs.core import BOUND, PROVED, REFUTED, load_all

# --- one-edit breakages of model/, each a replacement of one function ------------------------------------------


def wheel_add(index, refused):
    """TimingWheel.add with the bucket index and the refusal test given as functions of (wheel, expiration)."""
    def add(self, entry):
        expiration = entry.expiration_ms
        if entry.cancelled():
            return False
        if refused(self, expiration):
            return False
        if expiration < self.current_time_ms + self.interval:
            virtual_id = expiration // self.tick_ms
            bucket = self.buckets[index(self, virtual_id)]
            bucket.add(entry)
            if bucket.set_expiration(virtual_id * self.tick_ms):
                self.queue.offer(bucket)
            return True
        return self.add_overflow_wheel().add(entry)
    return add


def kafka_index(wheel_, virtual_id):
    return virtual_id % wheel_.wheel_size


def kafka_refused(wheel_, expiration):
    return expiration < wheel_.current_time_ms + wheel_.tick_ms


def unaligned_create(cls, tick_ms, wheel_size, start_ms, queue, counter):
    return cls(tick_ms=tick_ms, wheel_size=wheel_size, current_time_ms=start_ms, queue=queue, counter=counter,
               buckets=[model_timer.TimerTaskList(counter) for _ in range(wheel_size)])


def first_level_unaligned(cls, tick_ms, wheel_size, start_ms, **kwargs):
    timer = ORIGINAL_TIMER_CREATE(tick_ms, wheel_size, start_ms, **kwargs)
    timer.timing_wheel.current_time_ms = start_ms  # the breakage: level 1 starts at start, not at its tick's start
    return timer


ORIGINAL_TIMER_CREATE = SystemTimer.create


def guard_rejecting_long_max(now_ms, delay_ms):
    if now_ms + delay_ms >= LONG_MAX:
        raise TimerDomainError("delay_out_of_range", f"{now_ms} + {delay_ms} >= Long.MAX")
    return now_ms + delay_ms


def check_keeping_completed(self, key):
    operations = self.watchers.get(key)
    if operations is None:
        return 0
    completed, kept = 0, []
    for op in operations:
        if op.completed:
            kept.append(op)  # the breakage: a completed op stays listed
        elif op.safe_try_complete():
            completed += 1
        else:
            kept.append(op)
    operations[:] = kept
    self.remove_key_if_empty(key, operations)
    return completed


def purge_counting_survivors(self):
    purged = 0
    for key, operations in list(self.watchers.items()):
        survivors = [op for op in operations if not op.completed]
        purged += len(survivors)  # the breakage: counts what stays, not what goes
        operations[:] = survivors
        self.remove_key_if_empty(key, operations)
    return purged


def cancel_leaving_key(self, key):
    operations = self.watchers.get(key, [])
    cancelled = list(operations)
    operations.clear()  # the breakage: the key stays in the map with an empty list
    for op in cancelled:
        op.cancel()
    return cancelled


def try_once_else_watch(self, action):
    if self.try_complete("try"):
        return True
    action()
    return False  # the breakage: no second tryComplete after watching


BREAKAGES = {
    # name: (obligation that must refute it, [(owner, attribute, replacement)])
    "bucket_index_relative_to_clock": ("refinement.wheel", [(TimingWheel, "add", wheel_add(
        lambda w, vid: (vid - w.current_time_ms // w.tick_ms) % w.wheel_size, kafka_refused))]),
    "clock_starts_unaligned": ("refinement.wheel", [(TimingWheel, "create", classmethod(unaligned_create))]),
    "first_level_clock_unaligned": ("refinement.wheel", [(SystemTimer, "create", classmethod(first_level_unaligned))]),
    "refusal_by_one_ms": ("refinement.wheel", [(TimingWheel, "add", wheel_add(
        kafka_index, lambda w, expiration: expiration < w.current_time_ms + 1))]),
    "guard_rejects_long_max": ("wheel.model.expiration_guard", [(model_timer, "check_expiration",
                                                                 guard_rejecting_long_max),
                                                                (model_purgatory, "check_expiration",
                                                                 guard_rejecting_long_max)]),
    "check_keeps_completed": ("refinement.purgatory", [(DelayedOperationPurgatory, "check_and_complete",
                                                        check_keeping_completed)]),
    "purge_counts_survivors": ("refinement.purgatory", [(DelayedOperationPurgatory, "purge_completed",
                                                         purge_counting_survivors)]),
    "purge_at_interval": ("refinement.purgatory", [(DelayedOperationPurgatory, "purge_is_due", lambda self: (
        self.estimated_total_operations - self.num_delayed() >= self.purge_interval))]),
    "cancel_key_leaves_key": ("refinement.purgatory", [(DelayedOperationPurgatory, "cancel_for_key",
                                                        cancel_leaving_key)]),
    "no_second_try": ("refinement.purgatory", [(DelayedOperation, "safe_try_complete_or_else",
                                                try_once_else_watch)]),
}


@pytest.fixture(scope="module")
def registry():
    return load_all()


@pytest.mark.parametrize("name, expected", [("refinement.purgatory", BOUND), ("refinement.wheel", BOUND),
                                            ("wheel.model.expiration_guard", PROVED)])
def test_the_obligations_hold_on_the_model(registry, name, expected):
    outcome = registry[name].run()
    assert outcome.status == expected, outcome.detail
    if expected == BOUND:  # the bound reached is stated: the depth, the states expanded and transitions checked
        depth = refinement.PURGATORY_DEPTH if name == "refinement.purgatory" else refinement.WHEEL_DEPTH
        assert outcome.witness["depth"] == depth and f"depth {depth}" in outcome.detail
        assert 100 < outcome.witness["states"] < outcome.witness["transitions"]


@pytest.mark.parametrize("name", ["refinement.purgatory", "refinement.wheel", "wheel.model.expiration_guard"])
def test_each_mutant_is_refuted_with_a_trace(registry, name):
    outcome = registry[name].run(mutated=True)
    assert outcome.status == REFUTED
    assert not replay(outcome.traces["counterexample"]).ok


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_a_broken_model_is_refuted(registry, monkeypatch, breakage):
    name, patches = BREAKAGES[breakage]
    for owner, attribute, replacement in patches:
        monkeypatch.setattr(owner, attribute, replacement)
    outcome = registry[name].run()
    assert outcome.status == REFUTED, outcome.detail
    trace = outcome.traces["counterexample"]
    assert len(trace.steps) <= 8
    # replayed while the model is still broken, the encoding's answers (the system's) fail
    assert not replay(trace).ok
    print(f"{breakage}: {name}: {outcome.detail}")


def test_a_state_only_divergence_shows_in_a_read_out():
    """cancel_key leaving its key changes no observation of the call itself: the trace's read-outs show it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DelayedOperationPurgatory, "cancel_for_key", cancel_leaving_key)
        divergence, _ = refinement.purgatory_refines(refinement.PURGATORY_PARAMS[0], 2)
        trace = refinement.purgatory_trace("refinement.purgatory", refinement.PURGATORY_PARAMS[0], divergence,
                                           frozenset())
    assert [type(c) for c in divergence.commands] == [v.Watch, v.CancelKey]
    last = trace.steps[-1]
    assert isinstance(last.command, v.WatcherKeys)
    assert last.observation.result == ["k0"] and last.system.result == []


def test_kafka_wheel_is_left_out_where_java_wraps():
    """Near Long.MAX the shared arithmetic's exact sums leave the long range: KafkaWheel is not compared there."""
    shape = refinement.WheelShape(1, 2, LONG_MAX - 6)
    w = refinement.wheels_after(shape, [v.TimerAdd("t1", 6)], wheel.KAFKA)
    assert w.kafka is None and w.arithmetic.overflowed
    w = refinement.wheels_after(shape, [v.TimerAdd("t1", 1)], wheel.KAFKA)
    assert w.kafka is not None
