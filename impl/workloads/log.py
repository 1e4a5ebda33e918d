"""Partitions as the produce and fetch purgatories see them: a leader's log of record batches rolled into segments,
what the leader knows of its followers, the in-sync replica set (ISR) and the high watermark.

Only what decides when a delayed produce or fetch may complete is kept: offsets, byte positions and segment
boundaries (a fetch left on an older segment completes at once), the followers' fetch positions (they move the high
watermark) and ISR membership (a follower that falls too far behind stops holding acks=-1 produces back). Records
have sizes, not contents. Every offset a client uses is a batch boundary, since producers append whole batches and
fetches return whole batches, so positions are looked up per batch.
"""

from __future__ import annotations

import enum
from bisect import bisect_right
from typing import NamedTuple

import attrs

from kpurgatory.impl.workloads.operation import Errors


class TopicPartition(NamedTuple):
    """A partition, and its purgatory key (Kafka's TopicPartitionOperationKey, labelled ``topic-partition``)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class RecordBatch(NamedTuple):
    """What a produce request carries for one partition."""

    record_count: int
    size_in_bytes: int


class LogOffsetMetadata(NamedTuple):
    """An offset and where it sits: its segment's base offset and its byte position inside that segment."""

    message_offset: int
    segment_base_offset: int
    relative_position_in_segment: int

    def on_older_segment(self, other: LogOffsetMetadata) -> bool:
        return self.segment_base_offset < other.segment_base_offset

    def position_diff(self, other: LogOffsetMetadata) -> int:
        return self.relative_position_in_segment - other.relative_position_in_segment


class Log:
    """Record batches in offset order, rolled into a new segment when the active one would exceed
    ``segment_bytes``."""

    def __init__(self, segment_bytes: int):
        self.segment_bytes = segment_bytes
        self.batch_end_offsets: list[int] = []
        self.batch_end_positions: list[int] = []
        self.segment_base_offsets = [0]
        self.segment_base_positions = [0]

    @property
    def log_end_offset(self) -> int:
        return self.batch_end_offsets[-1] if self.batch_end_offsets else 0

    @property
    def size_in_bytes(self) -> int:
        return self.batch_end_positions[-1] if self.batch_end_positions else 0

    def append(self, batch: RecordBatch) -> int:
        """Append one batch and return its base offset."""
        base, position = self.log_end_offset, self.size_in_bytes
        segment_start = self.segment_base_positions[-1]
        if position > segment_start and position - segment_start + batch.size_in_bytes > self.segment_bytes:
            self.segment_base_offsets.append(base)
            self.segment_base_positions.append(position)
        self.batch_end_offsets.append(base + batch.record_count)
        self.batch_end_positions.append(position + batch.size_in_bytes)
        return base

    def position(self, offset: int) -> int:
        """Bytes before ``offset`` (a batch boundary)."""
        index = bisect_right(self.batch_end_offsets, offset)
        return self.batch_end_positions[index - 1] if index else 0

    def offset_metadata(self, offset: int) -> LogOffsetMetadata:
        segment = bisect_right(self.segment_base_offsets, offset) - 1
        return LogOffsetMetadata(offset, self.segment_base_offsets[segment],
                                 self.position(offset) - self.segment_base_positions[segment])

    def read(self, fetch_offset: int, max_offset: int, max_bytes: int) -> tuple[int, int]:
        """Whole batches from ``fetch_offset`` up to ``max_offset``, at most ``max_bytes`` of them but at least one
        batch (as Kafka does, so a batch larger than the limit cannot stall a reader): (bytes, next offset)."""
        start = bisect_right(self.batch_end_offsets, fetch_offset)
        stop = bisect_right(self.batch_end_offsets, max_offset)
        if start >= stop:
            return 0, fetch_offset
        start_position = self.position(fetch_offset)
        end = max(bisect_right(self.batch_end_positions, start_position + max_bytes, start, stop), start + 1)
        return self.batch_end_positions[end - 1] - start_position, self.batch_end_offsets[end - 1]


class LeaderHwChange(enum.Enum):
    """What an append did to the high watermark; it decides which purgatories the append wakes."""

    INCREASED = "increased"  # produce and fetch purgatories
    SAME = "same"  # the log end moved: fetch purgatory (followers wait on it)
    NONE = "none"  # nothing appended


class FetchIsolation(enum.Enum):
    """How far a fetch may read: followers to the log end, consumers to the high watermark."""

    LOG_END = "log_end"
    HIGH_WATERMARK = "high_watermark"


@attrs.define
class Replica:
    """The leader's view of a follower (Kafka's Replica state): the offset its last fetch came from, and when it
    was last caught up with the leader."""

    log_end_offset: int = 0
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = 0
    last_fetch_time_ms: int = 0

    def update_fetch_state(self, fetch_offset: int, fetch_time_ms: int, leader_end_offset: int) -> None:
        """A follower is caught up if it fetched from the leader's current end, or from at least the end the leader
        had at its previous fetch (then it was caught up at that fetch's time)."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = fetch_time_ms


class Partition:
    """A partition with its leader's log. The first replica leads; the others follow by fetching."""

    def __init__(self, topic_partition: TopicPartition, replicas: tuple[int, ...], segment_bytes: int,
                 min_insync_replicas: int = 1):
        self.topic_partition = topic_partition
        self.leader_id = replicas[0]
        self.followers = replicas[1:]
        self.log = Log(segment_bytes)
        self.remote_replicas = {broker: Replica() for broker in self.followers}
        self.isr = set(replicas)
        self.min_insync_replicas = min_insync_replicas
        self.high_watermark = 0

    def append_records_to_leader(self, batch: RecordBatch, required_acks: int) -> tuple[int, LeaderHwChange]:
        """Append ``batch``; returns its base offset and what happened to the high watermark. An acks=-1 append with
        fewer in-sync replicas than min.insync.replicas appends nothing (base offset -1)."""
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            return -1, LeaderHwChange.NONE
        base = self.log.append(batch)
        return base, LeaderHwChange.INCREASED if self.maybe_increment_leader_hw() else LeaderHwChange.SAME

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, Errors]:
        """Whether an acks=-1 append ending before ``required_offset`` is replicated: the high watermark passed it.
        If the ISR shrank below min.insync.replicas meanwhile, it is done but answers
        NOT_ENOUGH_REPLICAS_AFTER_APPEND."""
        if self.high_watermark < required_offset:
            return False, Errors.NONE
        if len(self.isr) < self.min_insync_replicas:
            return True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return True, Errors.NONE

    def end_offset_metadata(self, isolation: FetchIsolation) -> LogOffsetMetadata:
        end = self.log.log_end_offset if isolation is FetchIsolation.LOG_END else self.high_watermark
        return self.log.offset_metadata(end)

    def update_follower_fetch_state(self, follower_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower fetched from ``fetch_offset``, so it holds everything before it: update its state, add it
        back to the ISR once it has reached the high watermark, and move the high watermark. Returns whether the high
        watermark increased."""
        replica = self.remote_replicas[follower_id]
        previous = replica.log_end_offset
        replica.update_fetch_state(fetch_offset, now_ms, self.log.log_end_offset)
        if follower_id not in self.isr and fetch_offset >= self.high_watermark:
            self.isr.add(follower_id)
        return replica.log_end_offset != previous and self.maybe_increment_leader_hw()

    def maybe_shrink_isr(self, now_ms: int, replica_lag_time_max_ms: int) -> bool:
        """Drop followers not caught up within the last ``replica_lag_time_max_ms``; returns whether the high
        watermark increased as a result."""
        leader_end = self.log.log_end_offset
        lagging = {broker for broker in self.isr - {self.leader_id}
                   if self.remote_replicas[broker].log_end_offset < leader_end
                   and now_ms - self.remote_replicas[broker].last_caught_up_time_ms > replica_lag_time_max_ms}
        if not lagging:
            return False
        self.isr -= lagging
        return self.maybe_increment_leader_hw()

    def maybe_increment_leader_hw(self) -> bool:
        """The high watermark is the smallest log end offset in the ISR; it never moves back."""
        new_high_watermark = min([self.log.log_end_offset] + [self.remote_replicas[broker].log_end_offset
                                                              for broker in self.isr if broker != self.leader_id])
        if new_high_watermark <= self.high_watermark:
            return False
        self.high_watermark = new_high_watermark
        return True
