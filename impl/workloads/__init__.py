"""Kafka's users of the purgatory, as workloads for kpurgatory.impl: DelayedProduce, DelayedFetch and
DelayedHeartbeat with the broker logic that creates and completes them (ReplicaManager, GroupCoordinator), and a
deterministic broker simulator that drives them on a virtual clock.

The purgatory exists for these operations; their traffic is what benchmarks, recorded traces and campaigns should run
on. Each is a real subclass of kpurgatory.impl's DelayedOperation (``try_complete`` returns ``force_complete()`` when
its condition holds), and `SimulatedPurgatory` can record everything the purgatory did in the model's vocabulary, so
the traces replay against the model (``kpurgatory simulate``).
"""

from kpurgatory.impl.workloads.fetch import DelayedFetch, FetchParams, PartitionData
from kpurgatory.impl.workloads.heartbeat import DelayedHeartbeat, GroupCoordinator, MemberKey
from kpurgatory.impl.workloads.log import Partition, RecordBatch, TopicPartition
from kpurgatory.impl.workloads.operation import ActionQueue, BrokerOperation, Errors
from kpurgatory.impl.workloads.produce import DelayedProduce
from kpurgatory.impl.workloads.replica_manager import ReplicaManager
from kpurgatory.impl.workloads.scheduler import Scheduler, SimulatedPurgatory
from kpurgatory.impl.workloads.simulator import SCENARIOS, Simulation, SimulationConfig, scenario_config

__all__ = [
    "ActionQueue", "BrokerOperation", "DelayedFetch", "DelayedHeartbeat", "DelayedProduce", "Errors", "FetchParams",
    "GroupCoordinator", "MemberKey", "Partition", "PartitionData", "RecordBatch", "ReplicaManager", "SCENARIOS",
    "Scheduler", "SimulatedPurgatory", "Simulation", "SimulationConfig", "TopicPartition", "scenario_config",
]
