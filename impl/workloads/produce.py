"""DelayedProduce: an acks=-1 produce request waiting until its records are replicated (Kafka's DelayedProduce).

The request appended a batch to several partitions. For each it remembers the offset after its last record (the
required offset) and whether acknowledgements are still pending. A partition stops pending once the high watermark
reaches the required offset, or once the partition reports an error (no longer led here, the ISR shrank below
min.insync.replicas); the operation completes when no partition is pending. If the request times out first, the
partitions still pending answer REQUEST_TIMED_OUT. The response callback runs exactly once, from ``on_complete``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import attrs

from kpurgatory.impl.workloads.log import TopicPartition
from kpurgatory.impl.workloads.operation import BrokerOperation, Errors

if TYPE_CHECKING:
    from kpurgatory.impl.workloads.replica_manager import ReplicaManager


@attrs.define
class PartitionResponse:
    error: Errors
    base_offset: int = -1


@attrs.define
class ProducePartitionStatus:
    required_offset: int
    response_status: PartitionResponse
    acks_pending: bool = False


ProduceResponseCallback = Callable[[dict[TopicPartition, PartitionResponse]], None]


class DelayedProduce(BrokerOperation):
    __slots__ = ("required_acks", "produce_status", "replica_manager", "response_callback")

    def __init__(self, delay_ms: int, op_id: str, required_acks: int,
                 produce_status: dict[TopicPartition, ProducePartitionStatus], replica_manager: ReplicaManager,
                 response_callback: ProduceResponseCallback, lock=None):
        super().__init__(delay_ms, op_id, lock)
        self.required_acks = required_acks
        self.produce_status = produce_status
        self.replica_manager = replica_manager
        self.response_callback = response_callback
        for status in produce_status.values():
            # a partition that appended waits for acks, answering REQUEST_TIMED_OUT until they arrive
            status.acks_pending = status.response_status.error is Errors.NONE
            if status.acks_pending:
                status.response_status.error = Errors.REQUEST_TIMED_OUT

    def partition_outcome(self, topic_partition: TopicPartition, status: ProducePartitionStatus) -> Errors | None:
        """The error a pending partition is now done with (NONE when replicated), or None while it still waits."""
        partition, error = self.replica_manager.get_partition_or_error(topic_partition)
        if partition is None:
            return error
        has_enough, error = partition.check_enough_replicas_reach_offset(status.required_offset)
        return error if has_enough or error is not Errors.NONE else None

    def condition_holds(self) -> bool:
        return all(not status.acks_pending or self.partition_outcome(topic_partition, status) is not None
                   for topic_partition, status in self.produce_status.items())

    def try_complete(self) -> bool:
        """Settle every pending partition that can be settled now; complete once none is pending."""
        pending = False
        for topic_partition, status in self.produce_status.items():
            if status.acks_pending:
                outcome = self.partition_outcome(topic_partition, status)
                if outcome is None:
                    pending = True
                else:
                    status.acks_pending = False
                    status.response_status.error = outcome
        return False if pending else self.force_complete()

    def on_expiration(self) -> None:
        self.replica_manager.record_produce_expiration(
            [topic_partition for topic_partition, status in self.produce_status.items() if status.acks_pending])
        super().on_expiration()

    def on_complete(self) -> None:
        self.response_callback({topic_partition: status.response_status
                                for topic_partition, status in self.produce_status.items()})
        super().on_complete()
