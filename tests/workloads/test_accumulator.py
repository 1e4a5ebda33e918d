"""The RecordAccumulator: batches fill per partition, become sendable when full or lingered, and drain as one
request per ready broker with one batch per partition; brokers with a request in flight wait."""

from kpurgatory.impl.workloads import TopicPartition
from kpurgatory.impl.workloads.accumulator import RecordAccumulator

T0, T1, T2 = (TopicPartition("t", index) for index in range(3))
LEADERS = {T0: 0, T1: 0, T2: 1}


def test_a_batch_is_sendable_once_full_or_lingered():
    accumulator = RecordAccumulator(batch_size=1000, linger_ms=5, retry_backoff_ms=100)
    assert accumulator.append(T0, 400, now_ms=0) is True  # opens a batch: the sender wakes to start the linger
    assert accumulator.append(T0, 400, now_ms=1) is False
    assert accumulator.ready(2, LEADERS.get, muted=()) == (set(), 3)
    assert accumulator.ready(5, LEADERS.get, muted=()) == ({0}, None)
    assert accumulator.append(T0, 400, now_ms=2) is True  # does not fit: a second batch, the first is complete
    assert accumulator.ready(2, LEADERS.get, muted=()) == ({0}, None)


def test_drain_takes_one_batch_per_partition_per_broker_and_skips_muted_brokers():
    accumulator = RecordAccumulator(batch_size=1000, linger_ms=0, retry_backoff_ms=100)
    for topic_partition in (T0, T0, T1, T2):
        accumulator.append(topic_partition, 900, now_ms=0)
    ready, _ = accumulator.ready(0, LEADERS.get, muted={1})
    assert ready == {0}
    drained = accumulator.drain(LEADERS.get, ready, now_ms=0)
    assert {node: [batch.topic_partition for batch in batches] for node, batches in drained.items()} == {0: [T0, T1]}
    assert [len(accumulator.batches[tp]) for tp in (T0, T1, T2)] == [1, 0, 1]


def test_a_retried_batch_waits_for_the_backoff():
    accumulator = RecordAccumulator(batch_size=1000, linger_ms=0, retry_backoff_ms=100)
    accumulator.append(T0, 100, now_ms=0)
    (batch,) = accumulator.drain(LEADERS.get, {0}, now_ms=0)[0]
    accumulator.reenqueue(batch, now_ms=10)
    assert accumulator.ready(50, LEADERS.get, muted=()) == (set(), 60)
    assert accumulator.ready(110, LEADERS.get, muted=()) == ({0}, None)
    accumulator.append(T0, 100, now_ms=110)  # new records do not join a retried batch
    assert [b.record_count for b in accumulator.batches[T0]] == [1, 1]
