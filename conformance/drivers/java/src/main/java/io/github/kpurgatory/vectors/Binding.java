package io.github.kpurgatory.vectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Set;

/** What the driver runs vectors against: one implementation, with what it declares (specs/protocol.md §3). */
public interface Binding extends AutoCloseable {
    /** Shown in the output and written as the observed trace's {@code implementation}. */
    String name();

    /** {@code exact} (Kafka step by step) or {@code contract} (only what a user relies on). */
    String level();

    /** As in hello (firing, lazy_size, max_deadline_ms, beyond_max_deadline, negative_delays, kafka_version). */
    ObjectNode declarations();

    /** {@code timer} and/or {@code purgatory}. */
    Set<String> profiles();

    /** The commands of specs/protocol.md §5 it can run, read-outs ({@code wheel}, …) included. */
    Set<String> commands();

    /** Why it cannot take these init params (e.g. a tick that is not a power of two), or null. */
    default String rejects(Params params) {
        return null;
    }

    /** Starts a fresh run, discarding all state. */
    void init(String profile, Params params) throws Exception;

    /** Executes one command; what it answered, or a failure when it could not answer. */
    Observed step(String cmd, JsonNode args) throws Exception;

    @Override
    default void close() throws Exception {}
}
