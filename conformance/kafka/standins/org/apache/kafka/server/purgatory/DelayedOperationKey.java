package org.apache.kafka.server.purgatory;

/** Stand-in for Kafka's {@code DelayedOperationKey} (kpurgatory's own code): what an operation is watched under. */
public interface DelayedOperationKey {
    String keyLabel();
}
