"""fetchMessages' immediate-response rules and DelayedFetch: bytes accumulated up to min bytes (to the log end for
followers, the high watermark for consumers), completion at once on truncation, a rolled segment or a lost
leadership, and what it reads on completion or expiry."""

import pytest

from kpurgatory.impl.workloads import DelayedFetch, Errors, FetchParams, PartitionData, RecordBatch, TopicPartition
from kpurgatory.impl.workloads.fetch import FetchPartitionStatus
from kpurgatory.impl.workloads.log import Log, LogOffsetMetadata

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
CONSUMER = FetchParams(-1, max_wait_ms=500, min_bytes=1000)


def fetch(broker, params, offsets: dict[TopicPartition, int], max_bytes: int = 1 << 20) -> list:
    responses: list = []
    broker.replica_manager.fetch_messages(params, [(tp, PartitionData(offset, max_bytes))
                                                   for tp, offset in offsets.items()], responses.append, "c:1")
    return responses


def sizes(response) -> dict:
    return {tp: (data.error, data.size_in_bytes, data.next_fetch_offset) for tp, data in response}


@pytest.mark.parametrize("params, offsets, why", [
    (FetchParams(-1, max_wait_ms=0, min_bytes=1000), {T0: 0}, "does not want to wait"),
    (CONSUMER, {}, "names no partitions"),
    (FetchParams(-1, max_wait_ms=500, min_bytes=600), {T0: 0}, "already has min bytes"),
    (CONSUMER, {T0: 0, TopicPartition("t", 9): 0}, "hit an error"),
])
def test_a_fetch_answers_at_once_when_it(make_broker, params, offsets, why):
    broker = make_broker({0: (0,)})
    broker.produce_request(1, {0: RecordBatch(5, 600)})
    assert len(fetch(broker, params, offsets)) == 1, why
    assert broker.fetch.watched() == 0


def test_bytes_accumulate_over_partitions_until_min_bytes(make_broker):
    broker = make_broker({0: (0,), 1: (0,)})
    responses = fetch(broker, CONSUMER, {T0: 0, T1: 0})
    assert responses == [] and broker.fetch.watched() == 2
    broker.produce_request(1, {0: RecordBatch(5, 600)})
    assert responses == []
    broker.produce_request(1, {1: RecordBatch(5, 500)})
    assert [sizes(r) for r in responses] == [{T0: (Errors.NONE, 600, 5), T1: (Errors.NONE, 500, 5)}]


def test_each_partition_counts_at_most_its_max_bytes(make_broker):
    broker = make_broker({0: (0,)})
    responses = fetch(broker, CONSUMER, {T0: 0}, max_bytes=400)
    broker.produce_request(1, {0: RecordBatch(5, 900)})
    assert responses == []  # 900 bytes available, but only 400 count
    broker.advance_to(500)
    assert [sizes(r) for r in responses] == [{T0: (Errors.NONE, 900, 5)}]  # a first batch is returned whole


def test_a_consumer_waits_for_the_high_watermark_a_follower_for_the_log_end(make_broker):
    broker = make_broker({0: (0, 1)})
    consumer = fetch(broker, FetchParams(-1, 500, 1), {T0: 0})
    follower = broker.follower_fetch(1, 0, 0)
    assert consumer == [] and follower == []
    broker.produce_request(1, {0: RecordBatch(5, 300)})  # the log end moves, the high watermark does not
    assert consumer == [] and sizes(follower) == {T0: (Errors.NONE, 300, 5)}
    broker.follower_fetch(1, 0, 5)  # replicated: the high watermark moves
    assert [sizes(r) for r in consumer] == [{T0: (Errors.NONE, 300, 5)}]


def test_a_fetch_completes_at_once_when_the_log_rolled_past_its_segment(make_broker):
    broker = make_broker({0: (0,)}, segment_bytes=1000)
    broker.produce_request(1, {0: RecordBatch(5, 900)})
    responses = fetch(broker, FetchParams(-1, 500, min_bytes=10_000), {T0: 5})
    assert responses == []
    broker.produce_request(1, {0: RecordBatch(5, 200)})  # does not fit: a new segment starts at offset 5
    assert broker.partitions[T0].log.segment_base_offsets == [0, 5]
    assert [sizes(r) for r in responses] == [{T0: (Errors.NONE, 200, 10)}]


def test_a_fetch_beyond_the_log_end_completes_at_once(make_broker):
    """The log was truncated below the fetch offset (a new leader with a shorter log)."""
    broker = make_broker({0: (0,)})
    broker.produce_request(1, {0: RecordBatch(5, 300)})
    status = FetchPartitionStatus(LogOffsetMetadata(8, 0, 480), PartitionData(8))
    op = DelayedFetch("r1:1", FetchParams(1, 500, 1), [(T0, status)], broker.replica_manager, lambda r: None)
    assert op.condition_holds()
    assert broker.fetch.try_complete_else_watch(op, [T0]) is True


def test_a_fetch_on_a_partition_no_longer_led_here_completes_at_once(make_broker):
    broker = make_broker({0: (0, 1)})
    responses = fetch(broker, CONSUMER, {T0: 0})
    broker.partitions[T0].leader_id = 1
    assert broker.fetch.check_and_complete(T0) == 1
    assert [sizes(r) for r in responses] == [{T0: (Errors.NOT_LEADER_OR_FOLLOWER, 0, -1)}]


def test_expiry_reads_what_is_there_once_and_counts_by_fetcher_type(make_broker):
    broker = make_broker({0: (0,), 1: (0, 1)})
    consumer = fetch(broker, CONSUMER, {T0: 0})
    follower = broker.follower_fetch(1, 1, 0)
    broker.produce_request(1, {0: RecordBatch(5, 300), 1: RecordBatch(5, 300)})  # not min bytes for the consumer
    broker.advance_to(500)
    assert [sizes(r) for r in consumer] == [{T0: (Errors.NONE, 300, 5)}]
    assert len(follower) == 1  # completed by the append, not expired
    broker.advance_to(5000)
    assert len(consumer) == 1
    assert broker.replica_manager.fetch_expirations == {"consumer": 1}


def test_log_offsets_positions_and_reads():
    log = Log(segment_bytes=1000)
    for size in (400, 400, 400, 100):
        log.append(RecordBatch(2, size))
    assert log.log_end_offset == 8 and log.segment_base_offsets == [0, 4]
    assert log.offset_metadata(6) == LogOffsetMetadata(6, 4, 400)
    assert log.offset_metadata(4) == LogOffsetMetadata(4, 4, 0)
    assert log.read(0, 8, max_bytes=850) == (800, 4)
    assert log.read(2, 6, max_bytes=10) == (400, 4)  # at least one batch
    assert log.read(8, 8, max_bytes=10) == (0, 8)
