package org.apache.kafka.server.util.timer;

/**
 * Stand-in for Kafka's {@code Timer} interface (kpurgatory's own code, not Kafka's): the API the adapter compiles
 * against when Kafka's classes are not at hand (conformance/kafka/README.md).
 */
public interface Timer extends AutoCloseable {
    /** Schedules the task {@code delayMs} after now. */
    void add(TimerTask timerTask);

    /** Runs what has become due, waiting up to {@code timeoutMs} for something to; true if anything was due. */
    boolean advanceClock(long timeoutMs) throws InterruptedException;

    /** Entries pending in the timer. */
    int size();
}
