"""appendRecords' decision rules and DelayedProduce: every immediate-response branch, completion by replication or
error, expiry answering REQUEST_TIMED_OUT on the laggards only, and a response callback that runs exactly once."""

import pytest

from kpurgatory.impl.workloads import DelayedProduce, Errors, RecordBatch, TopicPartition
from kpurgatory.impl.workloads.produce import PartitionResponse, ProducePartitionStatus

T0, T1, T2 = (TopicPartition("t", index) for index in range(3))
BATCH = RecordBatch(10, 1000)


def errors(response):
    return {topic_partition: status.error for topic_partition, status in response.items()}


@pytest.mark.parametrize("acks", [2, -2, 5])
def test_invalid_acks_answer_every_partition_at_once_and_append_nothing(make_broker, acks):
    broker = make_broker({0: (0, 1), 1: (0, 1)})
    broker.produce_request(acks, {0: BATCH, 1: BATCH})
    assert [errors(r) for r in broker.responses] == [{T0: Errors.INVALID_REQUIRED_ACKS,
                                                      T1: Errors.INVALID_REQUIRED_ACKS}]
    assert broker.partitions[T0].log.log_end_offset == 0
    assert broker.produce.watched() == 0


@pytest.mark.parametrize("acks", [0, 1])
def test_acks_zero_and_one_append_and_answer_at_once(make_broker, acks):
    broker = make_broker({0: (0, 1)})
    broker.produce_request(acks, {0: BATCH})
    assert [errors(r) for r in broker.responses] == [{T0: Errors.NONE}]
    assert broker.responses[0][T0].base_offset == 0
    assert broker.partitions[T0].log.log_end_offset == 10
    assert broker.produce.watched() == 0 and broker.produce.num_delayed() == 0


def test_acks_all_without_data_answers_at_once(make_broker):
    broker = make_broker({0: (0, 1)})
    broker.produce_request(-1, {})
    assert broker.responses == [{}]
    assert broker.produce.watched() == 0


def test_acks_all_where_every_partition_failed_answers_at_once(make_broker):
    broker = make_broker({0: (1, 0)})  # led by broker 1
    broker.produce_request(-1, {0: BATCH, 7: BATCH})  # t-7 is unknown
    assert [errors(r) for r in broker.responses] == [{T0: Errors.NOT_LEADER_OR_FOLLOWER,
                                                      TopicPartition("t", 7): Errors.UNKNOWN_TOPIC_OR_PARTITION}]
    assert broker.produce.watched() == 0


def test_too_few_in_sync_replicas_fail_the_append(make_broker):
    broker = make_broker({0: (0, 1)}, min_insync_replicas=2)
    broker.partitions[T0].isr.discard(1)
    broker.produce_request(-1, {0: BATCH})
    assert [errors(r) for r in broker.responses] == [{T0: Errors.NOT_ENOUGH_REPLICAS}]
    assert broker.partitions[T0].log.log_end_offset == 0
    broker.produce_request(1, {0: BATCH})  # min.insync.replicas binds acks=-1 only
    assert errors(broker.responses[1]) == {T0: Errors.NONE}


def test_a_delayed_produce_waits_for_every_partitions_high_watermark(make_broker):
    broker = make_broker({0: (0, 1), 1: (0, 1), 2: (0, 2)})
    broker.produce_request(-1, {0: BATCH, 1: BATCH, 2: BATCH})
    assert broker.responses == [] and broker.produce.watched() == 3 and broker.produce.num_delayed() == 1
    broker.follower_fetch(1, 0, 10)  # broker 1 has t-0 and t-1: not enough
    broker.follower_fetch(1, 1, 10)
    assert broker.responses == [] and broker.partitions[T1].high_watermark == 10
    broker.follower_fetch(2, 2, 10)  # the last follower catches up
    assert [errors(r) for r in broker.responses] == [{T0: Errors.NONE, T1: Errors.NONE, T2: Errors.NONE}]
    assert broker.produce.watched() == 2  # stale entries on t-0 and t-1 until a check or a purge


def test_a_partition_that_failed_to_append_is_not_waited_for(make_broker):
    broker = make_broker({0: (0, 1), 1: (1, 0)})  # t-1 is led elsewhere
    broker.produce_request(-1, {0: BATCH, 1: BATCH})
    assert broker.responses == []  # one partition appended: a delayed produce
    broker.follower_fetch(1, 0, 10)
    assert errors(broker.responses[0]) == {T0: Errors.NONE, T1: Errors.NOT_LEADER_OR_FOLLOWER}


def test_a_produce_already_replicated_completes_inside_the_watch(make_broker):
    broker = make_broker({0: (0,)})  # no followers: the append itself moves the high watermark
    broker.produce_request(-1, {0: BATCH})
    assert errors(broker.responses[0]) == {T0: Errors.NONE}
    assert broker.produce.watched() == 0 and broker.produce.num_delayed() == 0


def test_a_partition_that_lost_its_leadership_answers_with_that_error(make_broker):
    broker = make_broker({0: (0, 1)})
    broker.produce_request(-1, {0: BATCH})
    broker.partitions[T0].leader_id = 1
    assert broker.produce.check_and_complete(T0) == 1
    assert errors(broker.responses[0]) == {T0: Errors.NOT_LEADER_OR_FOLLOWER}


def test_an_isr_shrunk_below_min_insync_answers_not_enough_replicas_after_append(make_broker):
    broker = make_broker({0: (0, 1, 2)}, min_insync_replicas=2)
    broker.produce_request(-1, {0: BATCH})
    broker.follower_fetch(1, 0, 10)  # broker 2 never fetches
    broker.now_ms = 100
    broker.replica_manager.maybe_shrink_isr(replica_lag_time_max_ms=50)
    assert broker.partitions[T0].isr == {0, 1}  # broker 1 was caught up at its fetch
    assert errors(broker.responses[0]) == {T0: Errors.NONE}
    broker.produce_request(-1, {0: BATCH})
    broker.now_ms = 200
    broker.replica_manager.maybe_shrink_isr(replica_lag_time_max_ms=50)
    assert broker.partitions[T0].isr == {0}
    assert errors(broker.responses[1]) == {T0: Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND}


def test_expiry_answers_request_timed_out_on_the_laggards_only(make_broker):
    broker = make_broker({0: (0, 1), 1: (0, 1), 2: (0, 2)})
    broker.produce_request(-1, {0: BATCH, 1: BATCH, 2: BATCH}, timeout_ms=1000)
    broker.follower_fetch(1, 0, 10)
    broker.follower_fetch(1, 1, 10)
    broker.advance_to(999)
    assert broker.responses == []
    broker.advance_to(1000)
    assert [errors(r) for r in broker.responses] == [{T0: Errors.NONE, T1: Errors.NONE,
                                                      T2: Errors.REQUEST_TIMED_OUT}]
    assert broker.replica_manager.produce_expirations == {T2: 1}


def watched_produce(broker, responses: list) -> DelayedProduce:
    """A DelayedProduce of 10 records appended to t-0, watched directly (to keep a handle on it)."""
    op = DelayedProduce(100, "p:1", -1, {T0: ProducePartitionStatus(10, PartitionResponse(Errors.NONE, 0))},
                        broker.replica_manager, responses.append)
    broker.partitions[T0].log.append(BATCH)
    assert broker.produce.try_complete_else_watch(op, [T0]) is False
    return op


def test_the_response_callback_runs_exactly_once(make_broker):
    broker, responses = make_broker({0: (0, 1)}), []
    op = watched_produce(broker, responses)
    broker.follower_fetch(1, 0, 10)  # completes it through the check
    assert op.force_complete() is False and op.try_complete() is False
    assert broker.produce.check_and_complete(T0) == 0
    broker.advance_to(500)  # its timeout was cancelled
    assert [errors(r) for r in responses] == [{T0: Errors.NONE}]


def test_an_early_force_complete_answers_request_timed_out_and_nothing_later_responds(make_broker):
    broker, responses = make_broker({0: (0, 1)}), []
    op = watched_produce(broker, responses)
    assert op.force_complete() is True
    broker.follower_fetch(1, 0, 10)
    broker.advance_to(500)
    assert [errors(r) for r in responses] == [{T0: Errors.REQUEST_TIMED_OUT}]
    assert broker.replica_manager.produce_expirations == {}  # forced, not expired
