"""A small, deterministic broker cluster on a virtual clock, driving real DelayedProduce, DelayedFetch and
DelayedHeartbeat operations through kpurgatory.impl purgatories.

Each broker has a produce, a fetch and a heartbeat purgatory (`SimulatedPurgatory`), a ReplicaManager and a
GroupCoordinator. Partitions of topic ``t`` are spread round-robin: partition p is led by broker p mod brokers and
followed by the next ``replication_factor - 1`` brokers. Around them:

* producers batching records (RecordAccumulator) and sending acks -1 / 1 / 0 requests, one per broker at a time;
* a follower fetcher per (follower, leader) pair, whose fetches move the high watermark; now and then a follower
  broker stalls (``slow_followers_per_min`` episodes of ``slow_follower_ms``), holding acks=-1 produces back until
  it catches up or drops out of the ISR after ``replica_lag_time_max_ms``;
* consumers with their own min bytes, reading up to the high watermark;
* consumer groups whose members heartbeat, commit, miss heartbeats, pause, leave and rejoin; now and then a group's
  coordinator moves to another broker (the old one unloads it: its heartbeats complete as the group is dead there).

Time-scale defaults are shorter than Kafka's (produce timeout, lag time, session timeout) so that a run of a minute
or two takes every path: completions, expirations, ISR shrinks, rebalances.
"""

from __future__ import annotations

import random
from typing import Callable

import attrs

from kpurgatory.impl.workloads.clients import Consumer, GroupMember, Producer, ReplicaFetcher
from kpurgatory.impl.workloads.heartbeat import GroupCoordinator
from kpurgatory.impl.workloads.log import Partition, TopicPartition
from kpurgatory.impl.workloads.replica_manager import ReplicaManager
from kpurgatory.impl.workloads.scheduler import Recorder, Scheduler, SimulatedPurgatory
from kpurgatory.model import vocabulary as v

PURGATORY_KINDS = ("produce", "fetch", "heartbeat")


@attrs.frozen
class SimulationConfig:
    duration_ms: int = 60_000
    seed: int = 1
    # the cluster
    brokers: int = 3
    partitions: int = 12
    replication_factor: int = 3
    min_insync_replicas: int = 2
    segment_bytes: int = 1 << 20
    purge_interval: int = 1000
    network_delay_ms: int = 1
    # producers (acks cycled over the producers)
    producers: int = 6
    producer_acks: tuple[int, ...] = (-1, -1, -1, -1, 1, 0)
    records_per_s: float = 2000.0
    record_bytes: int = 512
    batch_size: int = 16384
    linger_ms: int = 5
    produce_timeout_ms: int = 3000
    retry_backoff_ms: int = 100
    # replication
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_lag_time_max_ms: int = 8000
    follower_lag_ms: float = 1.0
    slow_followers_per_min: float = 1.0
    slow_follower_ms: tuple[int, int] = (1000, 12_000)
    # consumers (min bytes cycled over the consumers; partitions dealt round-robin)
    consumers: int = 4
    consumer_min_bytes: tuple[int, ...] = (1, 16384, 262144)
    fetch_max_wait_ms: int = 500
    poll_ms: int = 2
    # consumer groups
    groups: int = 6
    members_per_group: int = 8
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3000
    commit_interval_ms: int = 5000
    missed_heartbeat_probability: float = 0.05
    member_pause_probability: float = 0.003
    member_leave_probability: float = 0.001
    coordinator_moves_per_min: float = 1.0
    # gauges
    sample_interval_ms: int = 100

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.replication_factor <= self.brokers:
            raise ValueError(f"replication_factor must be in [1, brokers={self.brokers}]")
        if (self.producers or self.consumers) and not self.partitions:
            raise ValueError("producers and consumers need partitions")
        if self.duration_ms < 0 or self.sample_interval_ms < 1:
            raise ValueError("duration_ms must be >= 0 and sample_interval_ms >= 1")


#: What each scenario changes from the defaults ("mixed" is the defaults).
SCENARIOS: dict[str, dict] = {
    "produce": {"consumers": 0, "groups": 0},
    "fetch": {"producers": 2, "records_per_s": 300.0, "consumers": 24, "groups": 0},
    "heartbeat": {"partitions": 0, "producers": 0, "consumers": 0, "groups": 40, "members_per_group": 25},
    "mixed": {},
}


def scenario_config(scenario: str, **overrides) -> SimulationConfig:
    """The scenario's configuration; ``overrides`` that are None keep the scenario's value."""
    return attrs.evolve(SimulationConfig(**SCENARIOS[scenario]),
                        **{name: value for name, value in overrides.items() if value is not None})


class Broker:
    def __init__(self, broker_id: int, simulation: Simulation):
        self.broker_id = broker_id
        self.purgatories = {kind: simulation.make_purgatory(f"broker-{broker_id}.{kind}") for kind in PURGATORY_KINDS}
        scheduler = simulation.scheduler
        self.replica_manager = ReplicaManager(broker_id, simulation.partitions, self.purgatories["produce"],
                                              self.purgatories["fetch"], scheduler.action_queue, scheduler.clock)
        self.group_coordinator = GroupCoordinator(broker_id, self.purgatories["heartbeat"], scheduler.action_queue)
        #: while a slow episode lasts, this broker's follower fetchers do not process responses
        self.stalled_until_ms = 0


class Simulation:
    """Build with a config (and ``record(name, params)`` returning a trace sink per purgatory, to record), then
    `run`. Everything random comes from ``random.Random(config.seed)``: a run is reproducible."""

    def __init__(self, config: SimulationConfig, record: Callable[[str, v.Params], Recorder] | None = None):
        self.config = config
        self.random = random.Random(config.seed)
        self.scheduler = Scheduler()
        self.params = v.Params(purge_interval=config.purge_interval)
        self._record = record
        self.topic_partitions = [TopicPartition("t", index) for index in range(config.partitions)]
        self.partitions = {
            topic_partition: Partition(
                topic_partition,
                tuple((topic_partition.partition + i) % config.brokers for i in range(config.replication_factor)),
                config.segment_bytes, config.min_insync_replicas)
            for topic_partition in self.topic_partitions}
        self.brokers = [Broker(broker_id, self) for broker_id in range(config.brokers)]
        self.producers = [Producer(self, f"p{index}", config.producer_acks[index % len(config.producer_acks)])
                          for index in range(config.producers)]
        self.fetchers = [ReplicaFetcher(self, follower, leader, tps)
                         for (follower, leader), tps in self._followed_partitions().items()]
        self.consumers = [Consumer(self, f"c{index}", self.topic_partitions[index::config.consumers],
                                   config.consumer_min_bytes[index % len(config.consumer_min_bytes)])
                          for index in range(config.consumers)]
        self.coordinator_of = {f"g{index}": index % config.brokers for index in range(config.groups)}
        self.members = [GroupMember(self, f"g{group}.m{index}", f"g{group}")
                        for group in range(config.groups) for index in range(config.members_per_group)]
        #: client-side latency of acks=-1 produce requests (send to response), in virtual ms
        self.produce_request_latencies_ms: list[int] = []

    def _followed_partitions(self) -> dict[tuple[int, int], list[TopicPartition]]:
        followed: dict[tuple[int, int], list[TopicPartition]] = {}
        for topic_partition, partition in self.partitions.items():
            for follower in partition.followers:
                followed.setdefault((follower, partition.leader_id), []).append(topic_partition)
        return followed

    def make_purgatory(self, name: str) -> SimulatedPurgatory:
        record = self._record(name, self.params) if self._record is not None else None
        return SimulatedPurgatory(name, self.scheduler, self.params, record)

    def purgatories(self, kind: str | None = None) -> list[SimulatedPurgatory]:
        return [purgatory for broker in self.brokers for name, purgatory in broker.purgatories.items()
                if kind is None or name == kind]

    def leader_of(self, topic_partition: TopicPartition) -> int:
        return self.partitions[topic_partition].leader_id

    def network(self, action: Callable, *args, extra_delay_ms: int = 0) -> None:
        """Deliver a request or response: run ``action(*args)`` one network delay from now."""
        self.scheduler.after(self.config.network_delay_ms + extra_delay_ms, action, *args)

    # --- running ----------------------------------------------------------------------------------------------

    def run(self) -> None:
        """Simulate ``duration_ms``, then shut the purgatories down."""
        config, scheduler = self.config, self.scheduler
        for group_id, broker_id in self.coordinator_of.items():
            self.brokers[broker_id].group_coordinator.load_group(group_id)
        for client in [*self.producers, *self.fetchers, *self.consumers]:
            client.start()
        for member in self.members:
            scheduler.after(self.random.randrange(config.heartbeat_interval_ms), member.join)
        for broker in self.brokers:
            scheduler.every(config.replica_lag_time_max_ms // 2, lambda rm=broker.replica_manager:
                            rm.maybe_shrink_isr(config.replica_lag_time_max_ms))
            self._poisson(config.slow_followers_per_min, lambda broker=broker: self._stall(broker))
        if self.coordinator_of and config.brokers > 1:
            self._poisson(config.coordinator_moves_per_min, self._move_coordinator)
        scheduler.every(config.sample_interval_ms, self._sample)
        scheduler.run_until(config.duration_ms)
        for purgatory in self.purgatories():
            purgatory.shutdown()

    def _poisson(self, per_minute: float, action: Callable[[], None]) -> None:
        """Run ``action`` at the events of a Poisson process of ``per_minute`` events per minute."""
        if per_minute <= 0:
            return

        def tick() -> None:
            action()
            self.scheduler.after(round(self.random.expovariate(per_minute / 60_000)), tick)

        self.scheduler.after(round(self.random.expovariate(per_minute / 60_000)), tick)

    def _stall(self, broker: Broker) -> None:
        low, high = self.config.slow_follower_ms
        broker.stalled_until_ms = max(broker.stalled_until_ms, self.scheduler.now_ms + self.random.randint(low, high))

    def _move_coordinator(self) -> None:
        group_id = self.random.choice(sorted(self.coordinator_of))
        old = self.coordinator_of[group_id]
        new = (old + 1 + self.random.randrange(self.config.brokers - 1)) % self.config.brokers
        previous = self.brokers[old].group_coordinator.unload_group(group_id)
        self.coordinator_of[group_id] = new
        self.brokers[new].group_coordinator.load_group(group_id, previous)

    def _sample(self) -> None:
        for purgatory in self.purgatories():
            purgatory.sample()
